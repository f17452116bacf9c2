"""What ``_retrieve`` shows of a hit's source: no server paths by default, configurable fields."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hopsearch.loaders.docs import load_docs
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.api import create_app
from hopsearch.service.attached.fieldmap import Attachment, FieldMap
from hopsearch.service.config.settings import Settings
from hopsearch.service.retrieval.hit_sources import HitSources
from tests.api_fixtures import API_KEY, serving, uvicorn_serving_async
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


#: An index of the company's own (never written by hopsearch) whose title and text live in other fields and
#: which has fields of its own called ``title`` and ``text``; its document is long, so a hit's excerpt is
#: not its whole text.
FILLER = " ".join(f"Paragraph {n} describes the weather at the coast." for n in range(120))
INTRANET_DOC: dict[str, Any] = {
    "headline": "Glacier service HEADLINE-MARKER-3",
    "content": f"{FILLER} To restart the glacier service, drain it first: CONTENT-MARKER-5. {FILLER}",
    "title": "FORM-12",
    "text": "the form's own text field",
    "readers": ["public"],
}
INTRANET_MAPPING = {
    "properties": {
        "headline": {"type": "text"},
        "content": {"type": "text"},
        "title": {"type": "keyword"},
        "text": {"type": "keyword"},
        "readers": {"type": "keyword"},
    }
}


@asynccontextmanager
async def intranet(api: Any) -> AsyncIterator[str]:
    """hopsearch's passages (``DOC``) and an attached index (``INTRANET_DOC``: title ``headline``, text
    ``content``, readers ``readers``); yields the attached index's name."""
    store = await api.store()
    target = await store.ensure_indices(None)
    assert await store.bulk([{"_index": target, "_id": "d1-0", "_source": DOC}]) == (1, [])
    await store.refresh(target)
    name = f"user{uuid.uuid4().hex[:10]}-intranet"
    await store.client.indices.create(index=name, mappings=INTRANET_MAPPING, settings={"number_of_shards": 1})
    try:
        await store.client.index(index=name, id="form-12", document=INTRANET_DOC, refresh=True)
        fields = FieldMap(title="headline", text="content", vector=None, acl="readers", lang=None, url=None, id=None)
        await store.attach(Attachment(index=name, fields=fields))
        yield name
    finally:
        await store.client.indices.delete(index=name, ignore_unavailable=True)


async def every_route(url: str, index: str, query: str) -> dict[str, Any]:
    """One search of ``index`` on ``_retrieve``, ``POST /retrieve`` and the MCP ``search`` tool, over real
    HTTP with the admin key: each route's body (``text``) and hits."""
    keyed = {"Authorization": f"ApiKey {API_KEY}"}
    async with httpx.AsyncClient(base_url=url, headers=keyed, timeout=60) as client:
        retrieved = await client.post(f"/{index}/_retrieve", json={"query": query, "k": 1})
        batch = await client.post("/retrieve", json={"queries": [query], "topk": 1, "index": index})
    assert retrieved.status_code == 200 and batch.status_code == 200, retrieved.text + batch.text
    http = httpx2.AsyncClient(headers=keyed, timeout=60)
    async with http, Client(streamable_http_client(f"{url}/_mcp/", http_client=http)) as mcp:
        searched = await mcp.call_tool("search", {"query": query, "k": 1, "index": index})
    assert not searched.is_error, searched.content
    tool = json.loads(searched.content[0].text)
    return {
        "text": retrieved.text + batch.text + json.dumps(tool),
        "hit": retrieved.json()["hits"]["hits"][0],
        "contents": batch.json()["result"][0][0]["contents"],
        "tool": tool["hits"][0],
    }


async def test_every_index_shows_its_mapped_title_text_and_excerpt_in_one_place(es8_node: EsNode) -> None:
    """hopsearch's passages and an attached index alike: ``hopsearch`` beside ``_source`` holds the mapped
    title, text and excerpt on ``_retrieve``, and ``/retrieve`` and MCP give the same values; the index's
    own ``title``/``text`` fields stay in ``_source`` as they are."""
    async with (
        serving(es8_node.url, load=False) as api,
        intranet(api) as name,
        uvicorn_serving_async(create_app(api.settings)) as url,
    ):
        own = await every_route(url, api.alias, "glacier runbook")
        attached = await every_route(url, name, "restart the glacier service")
    hit = own["hit"]
    assert set(hit) == {"_index", "_id", "_score", "_source", "hopsearch"} and hit["_id"] == "d1-0"
    assert hit["_source"]["title"] == "Runbook" and hit["_source"]["path"] == "ops/runbook.md"
    assert hit["hopsearch"] == {"title": "Runbook", "text": DOC["text"], "excerpt": DOC["text"]}
    assert own["contents"] == f'"Runbook"\n{DOC["text"]}'
    assert {k: own["tool"][k] for k in ("title", "text", "excerpt")} == hit["hopsearch"]
    hit = attached["hit"]
    assert set(hit) == {"_index", "_id", "_score", "_source", "hopsearch"} and hit["_index"] == name
    assert hit["_source"]["title"] == "FORM-12" and hit["_source"]["text"] == "the form's own text field"
    assert hit["_source"]["content"] == INTRANET_DOC["content"]
    mapped = hit["hopsearch"]
    assert mapped["title"] == INTRANET_DOC["headline"] and mapped["text"] == INTRANET_DOC["content"]
    assert "CONTENT-MARKER-5" in mapped["excerpt"] and len(mapped["excerpt"]) < len(FILLER)
    assert attached["contents"] == f'"{INTRANET_DOC["headline"]}"\n{mapped["excerpt"]}'
    assert {k: attached["tool"][k] for k in ("title", "text", "excerpt")} == mapped


async def test_a_hidden_field_mapped_as_title_or_text_shows_nowhere(es8_node: EsNode) -> None:
    """``HOPSEARCH_API_HIDDEN_FIELDS`` naming the field an index maps as its title (or text) keeps that
    field's value out of ``hopsearch``, ``/retrieve``'s contents and MCP too; ``HOPSEARCH_API_SOURCE_FIELDS``
    likewise keeps what it does not list."""
    async with (
        serving(es8_node.url, load=False, api_hidden_fields=["headline", "text"]) as api,
        intranet(api) as name,
        uvicorn_serving_async(create_app(api.settings)) as url,
    ):
        attached = await every_route(url, name, "restart the glacier service")
        own = await every_route(url, api.alias, "glacier runbook")
    assert "HEADLINE-MARKER-3" not in attached["text"] and "title" not in attached["hit"]["hopsearch"]
    assert attached["hit"]["hopsearch"]["text"] == INTRANET_DOC["content"]
    assert "title" not in attached["tool"] and attached["contents"].startswith('""\n')
    assert own["hit"]["hopsearch"] == {"title": "Runbook"} and "glacier service with care" not in own["text"]
    assert set(own["tool"]) == {"id", "score", "title"} and own["contents"] == '"Runbook"\n'
    async with (
        serving(es8_node.url, load=False, api_source_fields=["headline", "title"]) as api,
        intranet(api) as name,
        uvicorn_serving_async(create_app(api.settings)) as url,
    ):
        listed = await every_route(url, name, "restart the glacier service")
    assert "CONTENT-MARKER-5" not in listed["text"] and listed["hit"]["hopsearch"] == {
        "title": INTRANET_DOC["headline"]
    }
    assert listed["contents"] == f'"{INTRANET_DOC["headline"]}"\n'
