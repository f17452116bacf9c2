"""Indices users already have (issue 30), on 7.17, 8.19 and 9.2: two indices made by plain elasticsearch-py
bulk calls (the Elastic connectors' layout with ``_allow_access_control``; other field names with a 16-d
vector and a nested metadata object) are attached with ``hopsearch indices attach`` and every route answers
from them — ``_retrieve``, ``_ask`` with every strategy, ``POST /retrieve``, MCP, the CLI's ``search``, ``ask``
and ``eval`` — with each caller reading exactly the documents the connectors' identities give it (searched
for in the WHOLE response), while the indices' documents (count, ``_seq_no`` s, sources), mapping, settings
and indexing counters are the same before and after.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner
from mcp import Client

from hopsearch.cli.main import main
from hopsearch.service.access import Caller
from hopsearch.service.api import create_app
from hopsearch.service.api.mcp.tools import build_server
from hopsearch.service.api.state import ApiState
from tests.api_fixtures import API_KEY, api_settings
from tests.attached_corpus import (
    CALLERS,
    DIMS,
    LONG_FILLER,
    QUERY,
    READABLE,
    READABLE_IDS,
    found,
    ids_in,
    snapshot,
    user_indices,
)
from tests.callers import as_caller
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.scripted_embeddings import ScriptedEmbeddings
from tests.scripted_reranker import ScriptedReranker
from tests.test_permissions_ask import EchoModel

STRATEGIES = ("single", "deeprag", "dualrag", "iterative", "hyde")
QUESTION = "What do the company records say about the salary handbook minutes?"
BASE = "http://hopsearch"
#: the service's key; the caller of each request is the one :func:`as_caller` puts into it
KEYED = {"Authorization": f"ApiKey {API_KEY}"}


class ShiftedEmbeddings(ScriptedEmbeddings):
    """Another model of the same dimensions: its vectors are not the stored ones."""

    def vector(self, text: str) -> list[float]:
        return super().vector(f"shifted {text}")


def _env(es_url: str, prefix: str, embed: ScriptedEmbeddings, llm_url: str = "http://127.0.0.1:9/v1") -> dict[str, str]:
    return {
        "HOPSEARCH_ES_URL": es_url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_EMBEDDER": "openai",
        "HOPSEARCH_EMBED_BASE_URL": embed.base_url,
        "HOPSEARCH_EMBED_MODEL": embed.model,
        "HOPSEARCH_EMBED_DIMS": str(DIMS),
        "HOPSEARCH_LLM_BASE_URL": llm_url,
        "HOPSEARCH_LLM_MODEL": "scripted",
        "HOPSEARCH_LLM_RETRIES": "1",
        "HOPSEARCH_STATE_DIR": "/nonexistent-state",
        "COLUMNS": "200",
    }


def _cli(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(main, list(args), env=env)


def _attach_both(env: dict[str, str], sp: str, wiki: str) -> tuple[dict[str, Any], dict[str, Any]]:
    connector = _cli(env, "indices", "attach", sp, "--layout", "elastic-connector", "--json")
    assert connector.exit_code == 0, connector.output
    other = _cli(
        env,
        *("indices", "attach", wiki, "--title-field", "headline", "--text-field", "content"),
        *("--vector-field", "vec", "--embedder", "openai", "--id-field", "ref", "--url-field", "link", "--json"),
    )
    assert other.exit_code == 0, other.output
    return json.loads(connector.output), json.loads(other.output)


def test_attach_checks_fields_types_dimensions_and_vectors(es_node: EsNode, tmp_path: Path) -> None:
    prefix = f"user{uuid.uuid4().hex[:8]}"
    own = f"t{uuid.uuid4().hex[:10]}"
    rows_file = tmp_path / "more.jsonl"
    rows_file.write_text(json.dumps({"_id": "x1", "title": "More", "text": "Written somewhere else."}) + "\n")
    with (
        ScriptedEmbeddings(dims=DIMS, batch_s=0) as embed,
        ShiftedEmbeddings(dims=DIMS, batch_s=0) as shifted,
        user_indices(es_node.url, es_node.major, prefix, embed.vector) as client,
    ):
        sp, wiki = f"{prefix}-sharepoint", f"{prefix}-wiki"
        before = {name: snapshot(client, es_node.major, name) for name in (sp, wiki)}
        env = _env(es_node.url, own, embed)
        try:
            missing = _cli(env, "indices", "attach", wiki, "--title-field", "nope", "--text-field", "content")
            assert missing.exit_code != 0 and "has no field [nope] (the title field)" in missing.output
            keyword = _cli(env, "indices", "attach", wiki, "--title-field", "headline", "--text-field", "ref")
            assert keyword.exit_code != 0
            assert "field [ref]" in keyword.output and "(the text field) is keyword, not" in keyword.output
            crawler = _cli(env, "indices", "attach", sp, "--layout", "elastic-crawler")
            assert crawler.exit_code != 0 and "has no field [body_content]" in crawler.output
            no_embedder = _cli(env, "indices", "attach", wiki, "--title-field", "headline", "--text-field",
                               "content", "--vector-field", "vec")  # fmt: skip
            assert no_embedder.exit_code != 0 and "needs --embedder" in no_embedder.output
            wrong = _cli(
                {**env, "HOPSEARCH_EMBED_BASE_URL": shifted.base_url},
                *("indices", "attach", wiki, "--title-field", "headline", "--text-field", "content"),
                *("--vector-field", "vec", "--embedder", "openai"),
            )
            assert wrong.exit_code != 0 and "are not 'openai:scripted-embed''s" in wrong.output, wrong.output
            wider = _cli(
                {**env, "HOPSEARCH_EMBED_DIMS": str(DIMS * 2)},
                *("indices", "attach", wiki, "--title-field", "headline", "--text-field", "content"),
                *("--vector-field", "vec", "--embedder", "openai"),
            )
            assert wider.exit_code != 0 and str(DIMS) in wider.output and str(DIMS * 2) in wider.output
            pattern = _cli(env, "indices", "attach", f"{prefix}-*", "--layout", "elastic-connector")
            assert pattern.exit_code != 0 and "by its exact name" in pattern.output
            ours = _cli(env, "indices", "attach", f"{own}-passages", "--layout", "elastic-connector")

            assert ours.exit_code != 0 and "hopsearch's own index" in ours.output
            assert "no indices under" in _cli(env, "indices", "list").output  # nothing attached yet
            connector, other = _attach_both(env, sp, wiki)
            assert connector["fields"]["acl"] == "_allow_access_control"
            assert connector["identities"] == "elastic-connector" and connector["embedder"] is None
            assert other["embedder"] == "openai:scripted-embed" and other["dims"] == DIMS
            assert other["vector_mode"] == ("knn" if es_node.major >= 8 else "rerank")
            assert other["checks"]["embedded_as"] == "text" and other["checks"]["cosine"] > 0.99
            listed = _cli(env, "indices", "list", "--json")
            rows = {row["index"]: row for row in json.loads(listed.output) if "attached" in row}
            assert set(rows) == {sp, wiki} and rows[sp]["documents"] == before[sp]["count"]
            table = _cli(env, "indices", "list").output
            assert "attached indices" in table and sp in table and "_allow_access_control" in table
            upgraded = _cli(env, "indices", "upgrade", sp, "--acl", "public")
            assert upgraded.exit_code != 0 and "never writes to it" in upgraded.output, upgraded.output
            loaded = _cli({**env, "HOPSEARCH_EMBEDDER": "none"}, "index", "jsonl", str(rows_file), "--index", sp)
            assert loaded.exit_code != 0 and "never writes to it" in loaded.output, loaded.output
            # an alias over the connector index attaches as an index does (its indices' fields checked)
            client.indices.put_alias(index=sp, name=f"{prefix}-alias")
            aliased = _cli(env, "indices", "attach", f"{prefix}-alias", "--layout", "elastic-connector")
            assert aliased.exit_code == 0, aliased.output
            searched = _cli(
                {**env, "HOPSEARCH_EMBEDDER": "none"}, "search", QUERY, "--index", f"{prefix}-alias", "-k", "20"
            )
            assert searched.exit_code == 0 and "sp-noacl" in searched.output, searched.output
            client.indices.delete_alias(index=sp, name=f"{prefix}-alias")
            assert _cli(env, "indices", "detach", wiki).exit_code == 0
            gone = _cli(env, "indices", "detach", wiki)
            assert gone.exit_code != 0 and "is not attached" in gone.output
        finally:
            client.indices.delete(index=f"{own}-*", allow_no_indices=True, ignore_unavailable=True)
        assert {name: snapshot(client, es_node.major, name) for name in (sp, wiki)} == before


async def _http_routes(api_app: Any, state: ApiState, sp: str, wiki: str, major: int) -> list[str]:
    """Every HTTP route over both indices, each caller; returns the problems found."""
    problems: list[str] = []
    for name, caller in CALLERS.items():
        transport = httpx.ASGITransport(app=as_caller(api_app, caller))
        async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=KEYED, timeout=60) as client:
            got = await client.post(f"/{sp}/_retrieve", json={"query": QUERY, "k": 20})
            text = got.text
            hits = got.json()["hits"]["hits"] if got.status_code == 200 else []
            if got.status_code != 200 or found(text) != READABLE[name] or ids_in(text) != READABLE_IDS[name]:
                problems.append(f"_retrieve/{name}: {got.status_code} {sorted(found(text))}")
            if name != "admin" and "_allow_access_control" in text:
                problems.append(f"_retrieve/{name}: the ACL field was shown")
            if name == "admin" and not any(h["_source"].get("url", "").startswith("https://corp") for h in hits):
                problems.append("_retrieve/admin: the connector's url is not in the hits' sources")
            batch = await client.post("/retrieve", json={"queries": [QUERY], "topk": 20, "index": sp})
            if batch.status_code != 200 or found(batch.text) != READABLE[name]:
                problems.append(f"/retrieve/{name}: {batch.status_code} {sorted(found(batch.text))}")
            long = [d["contents"] for d in batch.json().get("result", [[]])[0] if d["id"] == "sp-long"]
            excerpt = bool(long) and "SP-LONG-MARKER-3" in long[0] and len(long[0]) < 2000 < len(LONG_FILLER)
            if excerpt != ("sp-long" in READABLE_IDS[name]):
                problems.append(
                    f"/retrieve/{name}: a long document's hit is no excerpt ({[len(c) for c in long]} characters)"
                )
            for strategy in STRATEGIES:
                asked = await client.post(f"/{sp}/_ask", json={"question": QUESTION, "strategy": strategy})
                trace_id = asked.json().get("trace_id") if asked.status_code == 200 else None
                trace = await client.get(f"/_traces/{trace_id}") if trace_id else None
                page = await client.get(f"/_ui/traces/{trace_id}") if trace_id else None  # the viewer's titles
                if page is None or page.status_code != 200 or "<html" not in page.text.lower():
                    problems.append(f"viewer/{strategy}/{name}: {page.status_code if page else None}")
                text = asked.text + (trace.text if trace is not None else "") + (page.text if page is not None else "")
                seen, named = found(text), ids_in(text)
                if asked.status_code != 200 or asked.json().get("error") or trace is None or trace.status_code != 200:
                    problems.append(f"_ask/{strategy}/{name}: {asked.status_code} {asked.text[:300]}")
                if not seen <= READABLE[name] or not named <= READABLE_IDS[name]:
                    problems.append(f"_ask/{strategy}/{name}: leaked {sorted(seen)} {sorted(named)}")
                if name == "admin" and not named - READABLE_IDS["staff"]:  # what only admins and carol read
                    problems.append(f"_ask/{strategy}/admin: no restricted document cited {sorted(named)}")
            streamed = await client.post(
                f"/{sp}/_ask", json={"question": QUESTION, "strategy": "dualrag", "stream": True}
            )
            if (
                streamed.status_code != 200
                or "event: answer" not in streamed.text
                or not found(streamed.text) <= READABLE[name]
            ):
                problems.append(f"_ask stream/{name}: {streamed.status_code} {sorted(found(streamed.text))}")
            if not ids_in(streamed.text) <= READABLE_IDS[name]:
                problems.append(f"_ask stream/{name}: names {sorted(ids_in(streamed.text))}")
            wiki_hits = await client.post(f"/{wiki}/_retrieve", json={"query": "Richard Donner", "k": 10})
            count = len(wiki_hits.json()["hits"]["hits"]) if wiki_hits.status_code == 200 else -1
            if count != (2 if name == "admin" else 0):  # no ACL field: private, admins only
                problems.append(f"_retrieve wiki/{name}: {wiki_hits.status_code} {count} hits")
            missing = await client.post(f"/{sp}-not-attached/_retrieve", json={"query": QUERY})
            if missing.status_code != 404:
                problems.append(f"an index neither hopsearch's nor attached answered {missing.status_code}")
            if name != "admin":  # a search passed to the cluster would carry no ACL: refused
                proxied = await client.post(f"/{sp}/_search", json={"query": {"match_all": {}}})
                if proxied.status_code != 403 or found(proxied.text):
                    problems.append(f"proxied _search/{name}: {proxied.status_code} {proxied.text[:200]}")
    scoped = Caller.of(
        ["user:carol@corp.com"], subject="carol", key="wiki-only", owner="key:wiki-only/sub:carol", indices=(wiki,)
    )
    transport = httpx.ASGITransport(app=as_caller(api_app, scoped))
    async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=KEYED, timeout=60) as client:
        outside = await client.post(f"/{sp}/_retrieve", json={"query": QUERY})
        inside = await client.post(f"/{wiki}/_retrieve", json={"query": QUERY})
    if (outside.status_code, inside.status_code) != (403, 200) or found(outside.text) or wiki not in outside.text:
        problems.append(f"a key scoped to [{wiki}] read [{sp}]: {outside.status_code} {inside.status_code}")
    return problems


async def _wiki_modes(client: httpx.AsyncClient, wiki: str, content: str) -> list[str]:
    """The other layout as an admin: each mode, a filter on the nested metadata object and on doc_id."""
    problems: list[str] = []
    for mode in ("bm25", "dense", "hybrid"):
        got = await client.post(f"/{wiki}/_retrieve", json={"query": content, "k": 2, "mode": mode})
        body = got.json()
        hits = body.get("hits", {}).get("hits", [])
        if got.status_code != 200 or not hits or hits[0]["_id"] != "w-donner":
            problems.append(f"wiki {mode}: {got.status_code} {got.text[:300]}")
            continue
        source = hits[0]["_source"]
        if "vec" in source or source.get("headline") != "Richard Donner" or body.get("mode") not in (None, mode):
            problems.append(f"wiki {mode}: {source} {body.get('mode')}")
    for fusion in ("bool", "es_rrf"):  # where the server cannot, client-side RRF, said so
        body = {"query": content, "k": 2, "mode": "hybrid", "fusion": fusion}
        got = await client.post(f"/{wiki}/_retrieve", json=body)
        hits = got.json().get("hits", {}).get("hits", [])
        if got.status_code != 200 or not hits or hits[0]["_id"] != "w-donner" or "vec" in hits[0]["_source"]:
            problems.append(f"wiki hybrid {fusion}: {got.status_code} {got.text[:300]}")
    filters = [{"term": {"metadata.author.name": "Editor"}}, {"term": {"metadata.team": "people"}}]
    got = await client.post(f"/{wiki}/_retrieve", json={"query": "Donner Spielberg film", "k": 10, "filters": filters})
    if sorted(h["_id"] for h in got.json().get("hits", {}).get("hits", [])) != ["w-donner", "w-spielberg"]:
        problems.append(f"wiki metadata filter: {got.text[:300]}")
    got = await client.post(
        f"/{wiki}/_retrieve", json={"query": "film", "k": 10, "filters": [{"term": {"doc_id": "REF-w-jaws"}}]}
    )
    if [h["_id"] for h in got.json().get("hits", {}).get("hits", [])] != ["w-jaws"]:
        problems.append(f"wiki doc_id filter (the mapped ref field): {got.text[:300]}")
    query = {"query": "Spielberg film directed", "k": 1}
    plain = await client.post(f"/{wiki}/_retrieve", json=query)
    reranked = await client.post(f"/{wiki}/_retrieve", json={**query, "rerank": True})
    tops = [r.json().get("hits", {}).get("hits", [{}])[0].get("_id") for r in (plain, reranked)]
    if tops != ["w-jaws", "w-spielberg"]:  # the scripted cross-encoder favours "filmmaker"
        problems.append(f"wiki rerank: {tops} {reranked.text[:300]}")
    dual = await client.post(f"/{wiki}/_ask", json={"question": "Who directed Lethal Weapon?", "strategy": "dualrag"})
    if dual.status_code != 200 or dual.json().get("error"):
        problems.append(f"wiki dualrag: {dual.status_code} {dual.text[:300]}")
    else:  # the viewer names passages by the index's own title field (headline)
        page = await client.get(f"/_ui/traces/{dual.json()['trace_id']}")
        if page.status_code != 200 or "Lethal Weapon" not in page.text:
            problems.append(f"wiki viewer: {page.status_code} {page.text[:300]}")
    return problems


async def _mcp(state: ApiState, sp: str) -> list[str]:
    problems: list[str] = []
    async with Client(build_server(state)) as client:
        searched = await client.call_tool("search", {"query": QUERY, "k": 20, "index": sp})
        asked = await client.call_tool("ask", {"question": QUESTION, "strategy": "dualrag", "index": sp})
    for label, result in (("search", searched), ("ask", asked)):
        text = json.dumps([getattr(part, "text", "") for part in result.content]) + json.dumps(
            result.structured_content or {}
        )
        if result.is_error or not (found(text) if label == "search" else '"sp-' in text):
            problems.append(f"mcp {label}: {text[:300]}")
    return problems


def _cli_routes(env: dict[str, str], sp: str, tmp_path: Path) -> list[str]:
    problems: list[str] = []
    searched = _cli(env, "search", QUERY, "--index", sp, "-k", "20", "--json")
    if searched.exit_code != 0 or found(searched.output) != READABLE["admin"]:
        problems.append(f"cli search: {searched.output[:300]}")
    asked = _cli(env, "ask", QUESTION, "--index", sp, "--strategy", "dualrag")
    if asked.exit_code != 0 or "sp-salary" not in asked.output:
        problems.append(f"cli ask: {asked.output[:300]}")
    questions = tmp_path / "questions.jsonl"
    record = {"_id": "q1", "type": "compositional", "question": QUESTION, "answer": "salary", "context": []}
    questions.write_text(json.dumps(record) + "\n")
    evaluated = _cli(
        env,
        "eval",
        str(questions),
        "--index",
        sp,
        "--strategy",
        "single",
        "--json",
        "--out",
        str(tmp_path / "rows.jsonl"),
    )
    if evaluated.exit_code != 0 or '"n": 1' not in evaluated.output:
        problems.append(f"cli eval: {evaluated.output[-600:]}")
    return problems


async def test_every_route_answers_from_attached_indices_and_writes_nothing(es_node: EsNode, tmp_path: Path) -> None:
    prefix = f"user{uuid.uuid4().hex[:8]}"
    content = "Richard Donner (1930-2021) was an American film director."
    with (
        ScriptedEmbeddings(dims=DIMS, batch_s=0) as embed,
        server_for("vllm", EchoModel()) as llm,
        ScriptedReranker(favour="filmmaker") as reranker,
        user_indices(es_node.url, es_node.major, prefix, embed.vector) as client,
    ):
        sp, wiki = f"{prefix}-sharepoint", f"{prefix}-wiki"
        before = {name: snapshot(client, es_node.major, name) for name in (sp, wiki)}
        settings = api_settings(
            es_node.url,
            llm,
            embedder="openai",
            embed_base_url=embed.base_url,
            embed_model=embed.model,
            embed_dims=DIMS,
            outline_max_age_s=0,
            api_max_k=50,
            rerank_url=reranker.base_url,
            rerank_model="scripted-ce",
        )
        env = _env(es_node.url, settings.index_prefix, embed, llm.base_url)
        try:
            await asyncio.to_thread(_attach_both, env, sp, wiki)
            app = create_app(settings)
            async with app.router.lifespan_context(app):
                state: ApiState = app.state.api
                problems = await _http_routes(app, state, sp, wiki, es_node.major)
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=KEYED, timeout=60) as admin:
                    problems += await _wiki_modes(admin, wiki, content)
                problems += await _mcp(state, sp)
            problems += await asyncio.to_thread(_cli_routes, env, sp, tmp_path)
        finally:
            client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True)
        after = {name: snapshot(client, es_node.major, name) for name in (sp, wiki)}
    assert problems == [], "\n".join(problems)
    assert after == before
