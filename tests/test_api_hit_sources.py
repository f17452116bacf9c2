"""What ``_retrieve`` shows of a hit's source: no server paths by default, configurable fields."""

from __future__ import annotations

from typing import Any

from hopsearch.service.api.hit_sources import HitSources
from hopsearch.service.settings import Settings
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
