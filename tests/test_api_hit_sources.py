"""What ``_retrieve`` shows of a hit's source: no server paths by default, configurable fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hopsearch.loaders.docs import load_docs
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.api.hit_sources import HitSources
from hopsearch.service.config.settings import Settings
from tests.api_fixtures import serving
from tests.conftest import EsNode

DOC: dict[str, Any] = {
    "title": "Runbook",
    "text": "Restart the glacier service with care.",
    "source": "docs",
    "doc_id": "d1",
    "chunk": 0,
    "path": "/srv/private/team-docs/ops/runbook.md",
    "url": "file:///srv/private/team-docs/ops/runbook.md",
    "metadata": {"root": "/srv/private/team-docs", "type": "md", "size": 12},
}


def shown(**overrides: Any) -> dict[str, Any]:
    return HitSources(Settings(embedder="none", **overrides))(DOC)


def test_server_paths_are_hidden_by_default() -> None:
    source = shown()
    assert source["path"] == "ops/runbook.md"
    assert "url" not in source and "root" not in source["metadata"]
    assert source["metadata"] == {"type": "md", "size": 12} and source["title"] == "Runbook"
    assert "/srv/private" not in repr(source)
    assert DOC["metadata"]["root"] == "/srv/private/team-docs"  # the hit itself is not changed


def test_fields_can_be_listed_or_hidden_and_paths_shown() -> None:
    assert shown(api_source_fields=["title", "path", "metadata.type"]) == {
        "title": "Runbook",
        "path": "ops/runbook.md",
        "metadata": {"type": "md"},
    }
    assert "text" not in shown(api_hidden_fields=["text", "metadata.size"])
    assert "size" not in shown(api_hidden_fields=["text", "metadata.size"])["metadata"]
    assert shown(api_server_paths=True) == DOC
    outside = HitSources(Settings(embedder="none"))({**DOC, "path": "/etc/passwd", "metadata": {}})
    assert "path" not in outside and "url" not in outside


def test_settings_read_comma_separated_lists(monkeypatch: Any) -> None:
    monkeypatch.setenv("HOPSEARCH_API_SOURCE_FIELDS", "title, text")
    monkeypatch.setenv("HOPSEARCH_API_HIDDEN_FIELDS", "metadata.size")
    settings = Settings(embedder="none")
    assert settings.api_source_fields == ["title", "text"] and settings.api_hidden_fields == ["metadata.size"]


async def test_retrieve_hides_server_paths(es8_node: EsNode) -> None:
    async with serving(es8_node.url, load=False) as api:
        store = await api.store()
        target = await store.ensure_indices(None)
        ok, errors = await store.bulk([{"_index": target, "_id": "d1-0", "_source": DOC}])
        assert (ok, errors) == (1, [])
        await store.refresh(target)
        found = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "glacier runbook"})
    assert found.status_code == 200, found.text
    [hit] = found.json()["hits"]["hits"]
    assert hit["_source"]["path"] == "ops/runbook.md" and "url" not in hit["_source"]
    assert "/srv/private" not in found.text


def write_folder(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"# {Path(name).stem}\n\nHandbook page: {text}\n", encoding="utf-8")
    return root


async def test_a_path_filter_takes_the_path_hits_show(es8_node: EsNode, tmp_path: Path) -> None:
    """Two folders indexed by the docs loader (the same relative name in both) and a document of no
    folder: a relative ``path`` filter means what hits show, an absolute one what is stored."""
    team_a = write_folder(tmp_path / "team-a", {"guide/intro.md": "glaciers", "ops/runbook.md": "restarts"})
    team_b = write_folder(tmp_path / "team-b", {"guide/intro.md": "deserts", "zeta.md": "rivers"})
    loose = {"title": "Loose", "text": "Handbook page: loose notes", "source": "jsonl", "doc_id": "n1", "chunk": 0}
    intro_a = str(team_a.resolve() / "guide" / "intro.md")

    async def search(api: Any, filters: list[dict[str, Any]]) -> list[str]:
        body = {"query": "handbook page", "k": 20, "filters": filters}
        found = await api.client.post(f"/{api.alias}/_retrieve", json=body)
        assert found.status_code == 200, found.text
        return sorted(str(hit["_source"].get("path")) for hit in found.json()["hits"]["hits"])

    async with serving(es8_node.url, load=False) as api:
        store = await api.store()
        target = await store.ensure_indices(None)
        for folder in (team_a, team_b):
            report = await load_docs(store, folder, LoadOptions(checkpoint=tmp_path / f"{folder.name}.ckpt"))
            assert report.rejected == 0
        ok, _ = await store.bulk([{"_index": target, "_id": "n1-0", "_source": {**loose, "path": "notes/n1.md"}}])
        assert ok == 1
        await store.refresh(target)
        everything = await search(api, [])
        relative = await search(api, [{"term": {"path": "guide/intro.md"}}])
        absolute = await search(api, [{"term": {"path": intro_a}}])
        listed = await search(api, [{"terms": {"path": ["zeta.md", "notes/n1.md", intro_a]}}])
        ranged = await search(api, [{"range": {"path": {"gte": "guide/", "lt": "guide0"}}}])
        negated = await search(api, [{"not": {"term": {"path": "guide/intro.md"}}}])
        nested = await search(api, [{"and": [{"term": {"source": "docs"}}, {"term": {"path": "ops/runbook.md"}}]}])
        loose_only = await search(api, [{"term": {"path": "notes/n1.md"}}])
        prefix = api.settings.index_prefix
        async with serving(es8_node.url, load=False, api_server_paths=True, index_prefix=prefix) as shown:
            server_absolute = await search(shown, [{"term": {"path": intro_a}}])
            server_relative = await search(shown, [{"term": {"path": "guide/intro.md"}}])
    assert everything == ["guide/intro.md", "guide/intro.md", "notes/n1.md", "ops/runbook.md", "zeta.md"]
    assert relative == ["guide/intro.md", "guide/intro.md"]  # the file of each folder
    assert absolute == ["guide/intro.md"]  # as stored: team-a's alone
    assert listed == ["guide/intro.md", "notes/n1.md", "zeta.md"]
    assert ranged == ["guide/intro.md", "guide/intro.md"]
    assert negated == ["notes/n1.md", "ops/runbook.md", "zeta.md"]
    assert nested == ["ops/runbook.md"] and loose_only == ["notes/n1.md"]
    assert server_absolute == [intro_a]  # server paths shown: the absolute path, as the hit shows it
    assert server_relative == sorted([intro_a, str(team_b.resolve() / "guide" / "intro.md")])
