"""The second hop (``hops: 1``) on real Elasticsearch (7.17, 8.19, 9.2): a paragraph only a link reaches is
found (and the trace of the hop says by which name, from which passage), and a linked passage the caller
may not read never shows — ``_retrieve``, ``/retrieve``, ``_ask`` (its body, its SSE events, its trace and the
trace viewer's page), ``/v1/chat/completions`` (a body and every chunk of a stream) and the MCP ``search`` and
``ask`` tools over real HTTP (uvicorn), whole responses searched for its marker — while a caller who may read
it gets it through the same hop."""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from openai import AsyncOpenAI

from hopsearch.service.access import ADMIN
from hopsearch.service.api import create_app
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.requests import Query
from hopsearch.service.store import Store
from tests.api_fixtures import API_KEY, api_settings, uvicorn_serving_async
from tests.conftest import EsNode, make_settings
from tests.llm_fixtures import server_for
from tests.test_permissions_ask import EchoModel

QUESTION = "Where was the director of the film Baby Face Morgan born?"
#: The linked paragraph shares no word with the question: only the film's paragraph, which names it, leads there.
LINKED = ("p-dreifuss", "Arthur Dreifuss", "Arthur Dreifuss (1908-1993) grew up in Frankfurt am Main.")
PASSAGES = [
    (
        "p-morgan",
        "Baby Face Morgan",
        "The film Baby Face Morgan is a 1942 American film directed by Arthur Dreifuss for the PRC studio.",
    ),
    ("p-f1", "Film director", "A film director is the person who directs the making of a film; born a role."),
    ("p-f2", "Born (film)", "Born is a film about where a director was born, and the film of the born director."),
    ("p-f3", "Director (film)", "The director of a film: where born, which film, the director of film."),
    ("p-f4", "Faces", "Faces is a film whose director was born where the film was made; a film of faces."),
]
#: Real titles that are common words and a year: the hop must not follow "1942", "The" or "Film".
COMMON = [
    ("p-year", "1942", "Events of the year: a war, a harvest, an election."),
    ("p-the", "The", "An article of English grammar."),
    ("p-film", "Film", "Moving pictures on a screen."),
]
SECRET = "HOP-SECRET-MARKER-4"
#: A restricted paragraph only the hop reaches: titled as the film's paragraph names it with a disambiguation
#: ("Arthur Dreifuss (diarist)": a second title the name leads to), readable by hr.
RESTRICTED = ("p-secret", "Arthur Dreifuss (diarist)", f"Arthur Dreifuss kept a diary in Frankfurt: {SECRET}.")


async def _load(store: Store, rows: list[tuple[str, str, str]], acl: dict[str, list[str]]) -> None:
    target = await store.ensure_indices(None)
    actions: list[dict[str, Any]] = []
    for doc_id, title, text in rows:
        source = {"title": title, "text": text, "source": "jsonl", "doc_id": doc_id, "chunk": 0}
        source["acl"] = acl.get(doc_id, ["public"])
        actions.append({"_index": target, "_id": doc_id, "_source": source})
    ok, errors = await store.bulk(actions)
    assert (ok, errors) == (len(rows), [])
    await store.refresh(target)


async def test_the_hop_finds_a_paragraph_only_a_link_reaches_and_follows_no_common_word(es_node: EsNode) -> None:
    async with await Runtime.open(make_settings(es_node.url)) as runtime:
        try:
            await _load(runtime.store, [*PASSAGES, LINKED, *COMMON], {})
            queries = [Query(QUESTION, k=3, mode="bm25", hops=0), Query(QUESTION, k=3, mode="bm25", hops=1)]
            one, two = await usecases.search(runtime, await usecases.search_request(runtime, queries, caller=ADMIN))
        finally:
            await runtime.store.client.indices.delete(
                index=f"{runtime.settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
            )
    assert "p-morgan" in [h.id for h in one.hits] and "p-dreifuss" not in [h.id for h in one.hits]
    ids = [h.id for h in two.hits]
    assert "p-dreifuss" in ids and ids.index("p-dreifuss") == ids.index("p-morgan") + 1, ids  # after its namer
    assert len(ids) == 3
    assert [(x.name, x.source, x.passage) for x in two.links] == [("Arthur Dreifuss", "p-morgan", "p-dreifuss")]
    assert one.links == ()
    assert not {"p-year", "p-the", "p-film"} & {h.id for h in two.hits}  # selective: no common word, no year


async def test_a_restricted_linked_passage_never_shows(es_node: EsNode) -> None:
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(es_node.url, llm)
        async with await Runtime.open(settings) as runtime:
            try:
                await _load(runtime.store, [*PASSAGES, RESTRICTED], {"p-secret": ["group:hr"]})
                async with uvicorn_serving_async(create_app(settings)) as url:
                    got = await _responses(url, settings.passages_alias)
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )
    for route, text in got["public"].items():
        assert SECRET not in text and "p-secret" not in text, f"public {route} leaked the linked passage"
    for route in ("_retrieve", "/retrieve", "mcp", "/v1"):  # the same hop reaches it for those who may read it
        assert SECRET in got["hr"][route] and SECRET in got["admin"][route], route
    assert SECRET in got["hr"]["_ask"]


async def _responses(url: str, alias: str, question: str = QUESTION, k: int = 3) -> dict[str, dict[str, str]]:
    """Each caller's whole responses, by route, every request with one hop."""
    out: dict[str, dict[str, str]] = {}
    admin = {"Authorization": f"ApiKey {API_KEY}"}
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=admin) as http:
        secrets = {"admin": admin["Authorization"]}
        for name, principals in (("hr", ["group:hr", "public"]), ("public", ["public"])):
            made = await http.post("/_keys", json={"name": f"{name}-backend", "principals": principals})
            assert made.status_code == 201, made.text
            secrets[name] = f"ApiKey {made.json()['key']}"
        for name, secret in secrets.items():
            head = {"Authorization": secret}
            got: dict[str, str] = {}
            found = await http.post(f"/{alias}/_retrieve", json={"query": question, "k": k, "hops": 1}, headers=head)
            assert found.status_code == 200, found.text
            got["_retrieve"] = found.text
            batch = await http.post("/retrieve", json={"queries": [question], "topk": k, "hops": 1}, headers=head)
            assert batch.status_code == 200, batch.text
            got["/retrieve"] = batch.text
            ask = {"question": question, "strategy": "single", "options": {"k": k, "hops": 1}}
            answered = await http.post(f"/{alias}/_ask", json=ask, headers=head)
            assert answered.status_code == 200, answered.text
            trace_id = answered.json()["trace_id"]
            trace = await http.get(f"/_traces/{trace_id}", headers=head)
            page = await http.get(f"/_ui/traces/{trace_id}", headers=head)  # the viewer's HTML page
            streamed = await http.post(f"/{alias}/_ask", json={**ask, "stream": True}, headers=head)
            got["_ask"] = answered.text + trace.text + page.text + streamed.text  # SSE events too
            got["/v1"] = await _chat(url, secret, question, k)
            got["mcp"] = await _mcp(url, secret, question, k)
            out[name] = got
    return out


async def _chat(url: str, secret: str, question: str, k: int) -> str:
    """The OpenAI-compatible route with one hop, one body and a stream (every chunk)."""
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key=secret.removeprefix("ApiKey "), max_retries=0)
    extra, model = {"hopsearch": {"k": k, "hops": 1}}, "hopsearch-single"
    messages: list[Any] = [{"role": "user", "content": question}]
    body = await client.chat.completions.create(model=model, messages=messages, extra_body=extra)
    stream = await client.chat.completions.create(model=model, messages=messages, stream=True, extra_body=extra)
    chunks = [chunk.model_dump_json() async for chunk in stream]
    await client.close()
    return body.model_dump_json() + "".join(chunks)


async def _mcp(url: str, secret: str, question: str, k: int) -> str:
    keyed = httpx2.AsyncClient(headers={"Authorization": secret}, timeout=60)
    async with keyed, Client(streamable_http_client(f"{url}/_mcp/", http_client=keyed)) as client:
        found = await client.call_tool("search", {"query": question, "k": k, "hops": 1})
        asked = await client.call_tool("ask", {"question": question, "strategy": "single", "k": k, "hops": 1})
    return str(found.content) + str(asked.content)


async def test_a_name_finds_its_title_whatever_the_case_but_as_written_in_an_index_made_before(es_node: EsNode) -> None:
    """Schema 4 looks names up in ``title.key`` (lower-cased): the film's paragraph writing "ARTHUR DREIFUSS"
    links the paragraph titled "Arthur Dreifuss". An index of schema 3 (no ``title.key``) looks them up in
    ``title.keyword`` as written, and its answers say that a rebuild gives the case-blind key."""
    shouting = ("p-morgan", "Baby Face Morgan", "Baby Face Morgan is a 1942 film directed by ARTHUR DREIFUSS.")
    async with await Runtime.open(make_settings(es_node.url)) as runtime:
        store = runtime.store
        try:
            await _load(store, [shouting, *PASSAGES[1:], LINKED], {})
            request = await usecases.search_request(runtime, [Query(QUESTION, k=3, mode="bm25", hops=1)], caller=ADMIN)
            [folded] = await usecases.search(runtime, request)
            meta = {**(await store.index_meta()), "schema_version": 3}
            await store.client.indices.put_mapping(
                index=store.settings.passages_alias, body={"_meta": {"hopsearch": meta}}
            )
            store._meta_cache.clear()
            [written] = await usecases.search(runtime, request)
        finally:
            await store.client.indices.delete(
                index=f"{store.settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
            )
    assert [x.shown() for x in folded.links] == [
        {"name": "ARTHUR DREIFUSS", "from": "p-morgan", "passage": "p-dreifuss", "how": "title"}
    ]
    assert folded.index_note == ""
    assert "p-dreifuss" not in [h.id for h in written.hits] and written.links == ()
    assert "schema 3 < 4" in written.index_note and "title.key" in written.index_note
