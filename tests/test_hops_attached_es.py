"""The second hop (``hops: 1``) over attached indices (issue 41) on 7.17, 8.19 and 9.2: an index made with plain
mappings, as a user's own (the title a ``text`` field named ``name`` with a ``keyword`` sub-field ``raw``, or
only a ``lowercase``-normalized one; the text in ``body_text``; the readers in ``readers``), attached with
``hopsearch indices attach``, hops by the keyword field of its title found at attach time: a paragraph
only a link reaches is found with one hop and not without, over real HTTP (uvicorn), while a restricted
linked passage never shows to a caller who may not read it (``_retrieve``, ``/retrieve``, ``_ask`` and its
trace, the MCP ``search`` tool; whole responses searched for its marker) and shows, by the same hop, to
one who may. A record made before hops is looked up at first use; an index whose title has no keyword
field says it cannot hop and searches one hop."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import httpx2
import pytest
from click.testing import CliRunner
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hopsearch.cli.main import main
from hopsearch.service.access import ADMIN
from hopsearch.service.api import create_app
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.config.settings import Settings
from hopsearch.service.requests import Query
from tests.api_fixtures import API_KEY, api_settings, uvicorn_serving_async
from tests.attached_corpus import plain_client
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.test_hops_es import LINKED, PASSAGES, QUESTION, RESTRICTED, SECRET
from tests.test_permissions_ask import EchoModel

#: How the user's index maps its title ``name``: each a plain mapping a back end of its own would write.
TITLES: dict[str, dict[str, Any]] = {
    "raw": {"type": "text", "fields": {"raw": {"type": "keyword"}}},
    "folded": {"type": "text", "fields": {"folded": {"type": "keyword", "normalizer": "lowercase"}}},
    "text": {"type": "text"},
}
#: The title key each is attached with (``--json``'s ``title_key``).
KEYS: dict[str, dict[str, Any]] = {
    "raw": {"field": "name.raw", "fold": "exact"},
    "folded": {"field": "name.folded", "fold": "lowercase"},
    "text": {"field": None, "why": "its title field [name] is text without a keyword sub-field"},
}
ADMIN_HEADERS = {"Authorization": f"ApiKey {API_KEY}"}
#: Hits asked for: room for the film's paragraph and the two paragraphs it names.
K = 5
LINK = {"name": "Arthur Dreifuss", "from": "p-morgan", "passage": "p-dreifuss", "how": "title"}


@contextmanager
def user_index(url: str, major: int, layout: str) -> Iterator[str]:
    """The film paragraphs, the paragraph only a link reaches and the restricted one (readable by hr) in an
    index of the user's, written by plain elasticsearch-py; with a normalizer only, the linked titles in
    capitals (only a lookup that folds case finds them). Deleted afterwards."""
    client = plain_client(url, major)
    name = f"user{uuid.uuid4().hex[:8]}-kb"
    mappings = {"properties": {"name": TITLES[layout], "body_text": {"type": "text"}, "readers": {"type": "keyword"}}}
    client.indices.create(index=name, body={"settings": {"number_of_shards": 1}, "mappings": mappings})
    try:
        for doc_id, title, text in [*PASSAGES, LINKED, RESTRICTED]:
            readers = ["group:hr"] if doc_id == RESTRICTED[0] else ["public"]
            title = title.upper() if layout == "folded" and title == LINKED[1] else title
            source = {"name": title, "body_text": text, "readers": readers}
            client.index(index=name, id=doc_id, body=source)
        client.indices.refresh(index=name)
        yield name
    finally:
        client.indices.delete(index=name, ignore_unavailable=True)
        client.close()


def _attach(settings: Settings, index: str) -> Any:
    env = {
        "HOPSEARCH_ES_URL": settings.es_url[0],
        "HOPSEARCH_INDEX_PREFIX": settings.index_prefix,
        "HOPSEARCH_EMBEDDER": "none",
        "HOPSEARCH_STATE_DIR": "/nonexistent-state",
    }
    fields = ("--title-field", "name", "--text-field", "body_text", "--acl-field", "readers")
    shown = CliRunner().invoke(main, ["indices", "attach", index, *fields], env=env)
    assert shown.exit_code == 0, shown.output
    done = CliRunner().invoke(main, ["indices", "attach", index, *fields, "--json"], env=env)
    assert done.exit_code == 0, done.output
    return shown.output, json.loads(done.output)


async def _keys(http: httpx.AsyncClient) -> dict[str, str]:
    secrets = {"admin": ADMIN_HEADERS["Authorization"]}
    for name, principals in (("hr", ["group:hr", "public"]), ("public", ["public"])):
        made = await http.post("/_keys", json={"name": f"{name}-backend", "principals": principals})
        assert made.status_code == 201, made.text
        secrets[name] = f"ApiKey {made.json()['key']}"
    return secrets


async def _routes(url: str, index: str, secret: str) -> dict[str, str]:
    """One caller's whole responses over ``index``, by route, every request with one hop (and ``_retrieve``
    without, as ``hops0``)."""
    got: dict[str, str] = {}
    async with httpx.AsyncClient(base_url=url, timeout=60, headers={"Authorization": secret}) as http:
        for hops in (0, 1):
            found = await http.post(f"/{index}/_retrieve", json={"query": QUESTION, "k": K, "hops": hops})
            assert found.status_code == 200, found.text
            got[f"hops{hops}"] = found.text
        batch = {"queries": [QUESTION], "topk": K, "hops": 1, "index": index}
        answered = await http.post("/retrieve", json=batch)
        assert answered.status_code == 200, answered.text
        got["/retrieve"] = answered.text
        ask = {"question": QUESTION, "strategy": "single", "options": {"k": K, "hops": 1}}
        asked = await http.post(f"/{index}/_ask", json=ask)
        assert asked.status_code == 200, asked.text
        trace = await http.get(f"/_traces/{asked.json()['trace_id']}")
        assert trace.status_code == 200, trace.text
        got["_ask"] = asked.text + trace.text
    keyed = httpx2.AsyncClient(headers={"Authorization": secret}, timeout=60)
    async with keyed, Client(streamable_http_client(f"{url}/_mcp/", http_client=keyed)) as client:
        searched = await client.call_tool("search", {"query": QUESTION, "k": K, "hops": 1, "index": index})
    got["mcp"] = str(searched.content)
    return got


async def _serve(es_node: EsNode, layout: str) -> tuple[str, dict[str, Any], dict[str, dict[str, str]]]:
    """The index attached (its CLI output and record) and every caller's responses over it."""
    with server_for("vllm", EchoModel()) as llm, user_index(es_node.url, es_node.major, layout) as index:
        settings = api_settings(es_node.url, llm)
        try:
            shown, record = await asyncio.to_thread(_attach, settings, index)
            async with uvicorn_serving_async(create_app(settings)) as url:
                async with httpx.AsyncClient(base_url=url, timeout=60, headers=ADMIN_HEADERS) as http:
                    secrets = await _keys(http)
                got = {name: await _routes(url, index, secret) for name, secret in secrets.items()}
            got["old record"] = await _as_old_record(settings, index, record)
        finally:
            client = plain_client(es_node.url, es_node.major)
            client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True)
            client.close()
    return shown, record, got


async def _as_old_record(settings: Settings, index: str, record: dict[str, Any]) -> dict[str, str]:
    """The record rewritten as one made before hops (no ``title_key``), then one hop in a fresh process's
    runtime: the title key is found in the mapping at first use."""
    async with await Runtime.open(settings) as runtime:
        old = {key: value for key, value in record.items() if key != "title_key"}
        await runtime.store.put_document(settings.attached_index, index, old, refresh=True)
        request = await usecases.search_request(
            runtime, [Query(QUESTION, k=K, mode="bm25", hops=1)], caller=ADMIN, index=index
        )
        [result] = await usecases.search(runtime, request)
        stored = await runtime.store.get_document(settings.attached_index, index)
    ids = [hit.id for hit in result.hits]
    links = [x.shown() for x in result.links]
    return {"ids": json.dumps(ids), "links": json.dumps(links), "note": result.hops_note, "stored": json.dumps(stored)}


@pytest.mark.parametrize("layout", ["raw", "folded"])
async def test_an_attached_index_hops_by_the_keyword_field_of_its_title(es_node: EsNode, layout: str) -> None:
    shown, record, got = await _serve(es_node, layout)
    assert record["title_key"] == KEYS[layout], record
    assert f"hops: names looked up in [{KEYS[layout]['field']}]" in shown, shown
    for name in ("public", "hr", "admin"):
        without = json.loads(got[name]["hops0"])
        assert "p-morgan" in str(without) and "p-dreifuss" not in str(without) and "links" not in without, name
        hopped = json.loads(got[name]["hops1"])
        ids = [hit["_id"] for hit in hopped["hits"]["hits"]]
        linked = {"p-dreifuss"} | ({"p-secret"} if name != "public" else set())
        at = ids.index("p-morgan")
        assert set(ids[at + 1 : at + 1 + len(linked)]) == linked, (name, ids)  # right after their namer
        assert LINK in hopped["links"] and "hops_note" not in hopped, hopped
        assert "Frankfurt am Main" in got[name]["/retrieve"] + got[name]["mcp"], name
    for route, text in got["public"].items():
        assert SECRET not in text and "p-secret" not in text, f"public {route} leaked the linked passage"
    for route in ("hops1", "/retrieve", "_ask", "mcp"):  # the same hop reaches it for those who may read it
        assert SECRET in got["hr"][route] and SECRET in got["admin"][route], route
    old = got["old record"]
    assert "title_key" not in old["stored"] and old["note"] == "", old  # looked up, not written back
    assert "p-dreifuss" in json.loads(old["ids"]) and LINK in json.loads(old["links"]), old


async def test_an_attached_index_without_a_keyword_title_says_it_cannot_hop(es_node: EsNode) -> None:
    shown, record, got = await _serve(es_node, "text")
    assert record["title_key"] == KEYS["text"], record
    assert "hops: none (its title field [name] is text without a keyword sub-field)" in shown, shown
    note = f"index [{record['index']}] cannot hop: its title field [name] is text without a keyword sub-field"
    for name in ("public", "hr", "admin"):
        without, hopped = json.loads(got[name]["hops0"]), json.loads(got[name]["hops1"])
        assert hopped["hops_note"] == f"{note}; one hop was searched", hopped
        assert [h["_id"] for h in hopped["hits"]["hits"]] == [h["_id"] for h in without["hits"]["hits"]]
        assert "p-dreifuss" not in got[name]["hops1"] and note in got[name]["_ask"] and note in got[name]["mcp"]
    assert got["old record"]["note"] == f"{note}; one hop was searched"
