"""DualRAG outlines shared across users only where every source is readable (issue 29), over real
Elasticsearch (7.17, 8.19, 9.2), tried as an attacker would: a scripted LLM whose summaries and answers
echo their whole prompt, so anything that reaches a prompt shows in the fact, the answer and the trace.

After privileged principals' questions (``group:hr``: alice and carol; an admin; one on another index), a
restricted principal (bob: ``public`` only, his key scoped to the passages alias) asks about the same
entities, and every response of his is searched whole for the restricted markers: the answer, its
citations, the SSE stream, the trace (JSON and viewer HTML), ``GET /_outlines/…``, ``POST
/_outlines/_search`` and MCP ``outline``. The paths to a leak it covers: a fact summarised from a prompt
that held a restricted fact (its own hits public), an alias learnt from such a prompt (its name carries a
marker), another index's fact, and 20 concurrent questions from both. Revoking the group and deleting
the document make the facts unusable on the next question; a reused fact shows no other user's
question or trace id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hopsearch.loaders.api import load_jsonl
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.access import ADMIN, Caller
from hopsearch.service.api import create_app
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.strategies import Answer
from tests.api_fixtures import API_KEY, Api, serving, uvicorn_serving_async
from tests.callers import as_caller
from tests.conftest import EsNode
from tests.dual_fixtures import entities, reason, role_of
from tests.permissions_corpus import QUERY, records, restated_knowledge, squash, write_corpus
from tests.scripted_llm import ScriptRequest

ALICE = Caller.of(["group:hr", "public"], subject="alice", key="hr-backend", owner="key:hr-backend/sub:alice")
CAROL = Caller.of(["group:hr", "public"], subject="carol", key="hr-backend", owner="key:hr-backend/sub:carol")
DAVE = Caller.of(["public"], subject="dave", key="every-index", owner="key:every-index/sub:dave")
ENTITY = "Company records"
ALIAS = "ALIAS-MARKER-8 Holdings"
OTHER = "OTHER-MARKER-4"
#: What bob may never see (HR's, the board's, admins', the alias learnt from HR's prompt, the other index's).
FORBIDDEN = ("SALARY-MARKER-9", "BOARD-MARKER-7", "PRIVATE-MARKER-5", "NOACL-MARKER-3", "ALIAS-MARKER-8", OTHER)
ASK = "What do the company records say about the salary handbook minutes?"
TWO = "What do the company records and nature notes say about the salary handbook minutes?"


def bob(prefix: str) -> Caller:
    return Caller.of(
        ["public"],
        subject="bob",
        key="public-backend",
        owner="key:public-backend/sub:bob",
        indices=(f"{prefix}-passages*",),
    )


def model(request: ScriptRequest) -> str:
    """DualRAG's roles from the prompt alone (concurrent questions share it): the identifier names the
    company records, then (for :data:`TWO`) the nature notes and an alias of the records; the reasoner
    stops once the outline holds what the question asks; summaries and answers are the whole prompt."""
    prompt = request.prompt
    role = role_of(prompt)
    outline = prompt.split("Knowledge outline", 1)[-1] if "Knowledge outline" in prompt else ""
    two = "nature notes" in prompt
    done = "## Nature" in outline if two else f"## {ENTITY}" in outline
    if role == "reasoner":
        return json.dumps(reason("Look it up." if not done else "I can answer now.", not done))
    if role == "identifier":
        if f"## {ENTITY}" in outline and two:
            found = entities(("Nature", ["rivers mountains moon"]), (ALIAS, ["holdings"], ENTITY))
        else:
            found = entities((ENTITY, [QUERY]))
        return json.dumps(found)
    return restated_knowledge(prompt) if role == "summarizer" else squash(prompt)


def forbidden(value: Any) -> set[str]:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return {marker for marker in FORBIDDEN if marker in text}


def reused(answer: Answer) -> list[dict[str, Any]]:
    return [f for s in answer.trace.steps if s.kind == "outline_reuse" for f in (s.details or {}).get("facts", [])]


async def ask(runtime: Runtime, caller: Caller, question: str = ASK, index: str | None = None) -> Answer:
    request = await usecases.ask_request(runtime, question, caller=caller, strategy="dualrag", index=index)
    answer = await usecases.ask(runtime, request)
    assert answer.error is None, answer.error
    return answer


async def bobs_views(client: httpx.AsyncClient, alias: str, mcp_url: str) -> dict[str, Any]:
    """Everything bob can read about the entity and his own questions (HTTP, SSE, viewer, MCP)."""
    seen: dict[str, Any] = {}
    body = {"question": ASK, "strategy": "dualrag"}
    answer = (await client.post(f"/{alias}/_ask", json=body)).json()
    assert "answer" in answer, answer
    seen["answer"] = answer
    seen["sse"] = (await client.post(f"/{alias}/_ask", json=body | {"stream": True})).text
    assert "event: answer" in seen["sse"], seen["sse"][-500:]
    seen["trace"] = (await client.get(f"/_traces/{answer['trace_id']}")).json()
    seen["viewer"] = (await client.get(f"/_ui/traces/{answer['trace_id']}")).text
    seen["outline"] = (await client.get(f"/_outlines/{ENTITY}")).json()
    by_alias = await client.get(f"/_outlines/{ALIAS}")  # a 404 that names what bob asked for: his own words
    seen["by_alias"] = [by_alias.status_code, by_alias.text.replace(ALIAS, "(asked)")]
    assert by_alias.status_code == 404, by_alias.text
    for words in ("salary handbook minutes", "holdings", "ALIAS-MARKER-8", "SALARY-MARKER-9", OTHER):
        seen[f"search {words}"] = (await client.post("/_outlines/_search", json={"query": words})).json()
    seen["search entity"] = (await client.post("/_outlines/_search", json={"entity": ALIAS})).json()
    keyed = httpx2.AsyncClient(headers={"Authorization": f"ApiKey {API_KEY}"}, timeout=60)
    async with keyed, Client(streamable_http_client(f"{mcp_url}/_mcp/", http_client=keyed)) as mcp:
        result = await mcp.call_tool("outline", {"entity": ENTITY})
        seen["mcp"] = [getattr(c, "text", "") for c in result.content]
    return seen


@dataclass
class World:
    api: Api
    runtime: Runtime
    other: str
    tmp_path: Path

    def bob(self) -> Caller:
        return bob(self.api.settings.index_prefix)

    def client(self, caller: Caller) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=as_caller(self.api.app, caller))
        headers = {"Authorization": f"ApiKey {API_KEY}"}
        return httpx.AsyncClient(transport=transport, base_url="http://hopsearch", headers=headers, timeout=60)


@contextlib.asynccontextmanager
async def world(es_node: EsNode, tmp_path: Path) -> AsyncIterator[World]:
    """The service over the company corpus (the passages alias) and one public record in another index.

    48 questions in flight: the key's fair share is 24 and bob's, one of its end users, 12 (the ten he asks at once).
    """
    async with serving(
        es_node.url, script=model, load=False, outline_max_age_s=3600, api_max_concurrent_asks=48
    ) as api:
        runtime = await api.state.runtime()
        assert (await load_jsonl(runtime.store, write_corpus(tmp_path), LoadOptions(batch_size=50))).reconciled
        other = f"{api.settings.index_prefix}-other"
        rows = [{"_id": "o-1", "title": "Other", "text": f"The salary handbook minutes say: {OTHER}.", "acl": "public"}]
        (tmp_path / "other").mkdir()
        other_file = write_corpus(tmp_path / "other", rows)
        assert (await load_jsonl(runtime.store, other_file, LoadOptions(index=other))).reconciled
        yield World(api, runtime, other, tmp_path)


async def bob_asks(w: World) -> dict[str, Any]:
    """One question of bob's over HTTP: its answer and its stored trace."""
    async with w.client(w.bob()) as client:
        sent = await client.post(f"/{w.api.alias}/_ask", json={"question": ASK, "strategy": "dualrag"})
        answer: dict[str, Any] = sent.json()
        assert "trace_id" in answer, answer
        return answer | {"trace": (await client.get(f"/_traces/{answer['trace_id']}")).json()}


async def test_a_fact_summarised_from_a_prompt_that_held_a_restricted_fact_is_hrs_only(
    es_node: EsNode, tmp_path: Path
) -> None:
    async with world(es_node, tmp_path) as w:
        first = await ask(w.runtime, ALICE, TWO)  # Company records (HR's salary), then Nature from public fillers
        steps = [s for s in first.trace.steps if s.kind == "summarize" and (s.details or {}).get("entity") == "Nature"]
        assert steps and "SALARY-MARKER-9" in (steps[0].output or ""), "the echo shows the prompt's outline"
        assert set(steps[0].hit_ids) <= {"filler-0", "filler-1", "filler-2"}, steps[0].hit_ids  # public hits only
        async with w.client(w.bob()) as client:
            nature = await client.get("/_outlines/Nature")
            found = await client.post("/_outlines/_search", json={"query": "rivers mountains moon"})
        assert nature.status_code == 404 and not forbidden(nature.text), nature.text
        assert found.json()["hits"]["total"]["value"] == 0 and not forbidden(found.text), found.text
        async with w.client(CAROL) as client:  # HR may use it
            assert "SALARY-MARKER-9" in (await client.get("/_outlines/Nature")).text


async def test_an_alias_learnt_from_a_restricted_prompt_is_not_shown_or_followed(
    es_node: EsNode, tmp_path: Path
) -> None:
    async with world(es_node, tmp_path) as w:
        await ask(w.runtime, ALICE)  # HR's fact of the company records
        await ask(w.runtime, ALICE, TWO)  # reuses it, then learns the alias from a prompt that held it
        await ask(w.runtime, DAVE)  # a public fact of the company records: bob may use the outline
        async with w.client(w.bob()) as client:
            outline = await client.get(f"/_outlines/{ENTITY}")
            by_alias = await client.get(f"/_outlines/{ALIAS}")
            search = await client.post("/_outlines/_search", json={"entity": ALIAS})
        assert outline.status_code == 200 and ALIAS not in outline.text, outline.text
        assert by_alias.status_code == 404 and search.json()["hits"]["total"]["value"] == 0, search.text
        async with w.client(CAROL) as client:
            carol = await client.get(f"/_outlines/{ENTITY}")
        assert ALIAS in carol.text, (await w.api.client.get(f"/_outlines/{ENTITY}")).text


async def test_another_indexs_fact_is_not_used_by_a_key_scoped_to_one_index(es_node: EsNode, tmp_path: Path) -> None:
    async with world(es_node, tmp_path) as w:
        dave = await ask(w.runtime, DAVE, index=w.other)  # public passages of an index bob's key may not use
        assert OTHER in json.dumps(dave.trace.to_document()) and not reused(dave), reused(dave)
        seen = await bob_asks(w)
        assert not forbidden(seen), sorted(forbidden(seen))
        async with w.client(w.bob()) as client:
            assert OTHER not in (await client.get(f"/_outlines/{ENTITY}")).text


async def test_twenty_concurrent_questions_of_both_principals_leak_nothing(es_node: EsNode, tmp_path: Path) -> None:
    async with world(es_node, tmp_path) as w:
        await ask(w.runtime, ALICE)
        jobs = [ask(w.runtime, (ALICE, CAROL)[n % 2]) for n in range(10)]
        done = await asyncio.gather(*jobs, *(bob_asks(w) for _ in range(10)))
        hr, bobs = done[:10], done[10:]
        assert [sorted(forbidden(a)) for a in bobs] == [[]] * 10
        assert all(isinstance(a, Answer) and "SALARY-MARKER-9" in json.dumps(a.trace.to_document()) for a in hr)


async def test_revoking_the_group_or_deleting_the_document_makes_its_facts_unusable(
    es_node: EsNode, tmp_path: Path
) -> None:
    async with world(es_node, tmp_path) as w:
        await ask(w.runtime, ADMIN)  # reads every record
        await ask(w.runtime, ALICE)
        before = reused(await ask(w.runtime, CAROL))
        assert any("SALARY-MARKER-9" in f["summary"] for f in before), before
        changed = [r | {"acl": "group:board"} if r["_id"] == "hr-salary" else r for r in records()]
        assert (await load_jsonl(w.runtime.store, write_corpus(w.tmp_path, changed), LoadOptions())).reconciled
        revoked = await ask(w.runtime, CAROL)
        assert "SALARY-MARKER-9" not in json.dumps(revoked.trace.to_document()), reused(revoked)
        assert any("BOARD-MARKER-7" in f["summary"] for f in reused(await ask(w.runtime, ADMIN)))
        await w.runtime.store.client.delete(index=w.api.alias, id="board-minutes", refresh=True)
        after = await ask(w.runtime, ADMIN)
        assert "BOARD-MARKER-7" not in json.dumps(after.trace.to_document()), reused(after)


async def test_a_restricted_principal_never_receives_a_restricted_marker_anywhere(
    es_node: EsNode, tmp_path: Path
) -> None:
    """Every route bob has, after every privileged question: answer, SSE, trace, viewer, outline routes, MCP."""
    async with world(es_node, tmp_path) as w:
        admin = await ask(w.runtime, ADMIN)  # reads every record: its facts are admins' only
        assert "BOARD-MARKER-7" in json.dumps(admin.trace.to_document())
        await ask(w.runtime, ALICE, TWO)
        await ask(w.runtime, DAVE, index=w.other)
        mine = await ask(w.runtime, CAROL)  # may read HR's: reuses alice's fact, without her question or trace id
        facts = reused(mine)
        assert facts and any("SALARY-MARKER-9" in f["summary"] for f in facts), facts
        assert TWO not in json.dumps(mine.trace.to_document()), facts
        assert all("question" not in f and "trace_id" not in f for f in facts), facts
        async with (
            w.client(w.bob()) as client,
            uvicorn_serving_async(as_caller(create_app(w.api.settings), w.bob())) as mcp_url,
        ):
            views = await bobs_views(client, w.api.alias, mcp_url)
        problems = {name: sorted(found) for name, value in views.items() if (found := forbidden(value))}
        assert problems == {}, problems
        assert "PUBLIC-MARKER-1" in json.dumps(views["trace"]), "bob reads the public handbook"
        assert views["outline"].get("found") is True, views["outline"]  # his own and public facts
