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
import json
import re
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hopsearch.loaders.api import load_jsonl
from hopsearch.loaders.model import LoadOptions
from hopsearch.service import usecases
from hopsearch.service.access import ADMIN, Caller
from hopsearch.service.api import create_app
from hopsearch.service.runtime import Runtime
from hopsearch.service.strategies import Answer
from tests.api_fixtures import API_KEY, serving, uvicorn_serving_async
from tests.callers import as_caller
from tests.conftest import EsNode
from tests.dual_fixtures import entities, reason, role_of
from tests.permissions_corpus import QUERY, records, squash, write_corpus
from tests.scripted_llm import ScriptRequest

ALICE = Caller.of(["group:hr", "public"], subject="alice", key="hr-backend")
CAROL = Caller.of(["group:hr", "public"], subject="carol", key="hr-backend")
DAVE = Caller.of(["public"], subject="dave", key="every-index")
ENTITY = "Company records"
ALIAS = "ALIAS-MARKER-8 Holdings"
OTHER = "OTHER-MARKER-4"
#: What bob may never see (HR's, the board's, admins', the alias learnt from HR's prompt, the other index's).
FORBIDDEN = ("SALARY-MARKER-9", "BOARD-MARKER-7", "PRIVATE-MARKER-5", "NOACL-MARKER-3", "ALIAS-MARKER-8", OTHER)
ASK = "What do the company records say about the salary handbook minutes?"
TWO = "What do the company records and nature notes say about the salary handbook minutes?"


def bob(prefix: str) -> Caller:
    return Caller.of(["public"], subject="bob", key="public-backend", indices=(f"{prefix}-passages*",))


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
    return squash(prompt)


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


async def test_a_restricted_principal_never_receives_a_restricted_fact(es_node: EsNode, tmp_path: Path) -> None:
    async with serving(
        es_node.url, script=model, load=False, outline_max_age_s=3600, api_max_concurrent_asks=32
    ) as api:
        runtime = await api.state.runtime()
        prefix = api.settings.index_prefix
        report = await load_jsonl(runtime.store, write_corpus(tmp_path), LoadOptions(batch_size=50))
        assert report.reconciled
        other = f"{prefix}-other"
        rows = [{"_id": "o-1", "title": "Other", "text": f"The salary handbook minutes say: {OTHER}.", "acl": "public"}]
        (tmp_path / "other").mkdir()
        other_file = write_corpus(tmp_path / "other", rows)
        assert (await load_jsonl(runtime.store, other_file, LoadOptions(index=other))).reconciled

        admin_answer = await ask(runtime, ADMIN)  # reads every record: its facts are admins' only
        assert "BOARD-MARKER-7" in json.dumps(admin_answer.trace.to_document())
        first = await ask(runtime, ALICE, TWO)  # Company records (HR's salary), then Nature and the alias
        nature = [s for s in first.trace.steps if s.kind == "summarize" and (s.details or {}).get("entity") == "Nature"]
        assert nature and "SALARY-MARKER-9" in (nature[0].output or ""), "the echo shows the prompt's outline"
        assert set(nature[0].hit_ids) <= {"filler-0", "filler-1", "filler-2"}, nature[0].hit_ids  # public hits
        dave = await ask(runtime, DAVE, index=other)  # public passages of another index: bob's key may not use it
        assert OTHER in json.dumps(dave.trace.to_document()) and not reused(dave), reused(dave)
        mine = await ask(runtime, CAROL)  # may read HR's: reuses alice's fact, without her question or trace id
        facts = reused(mine)
        assert facts and any("SALARY-MARKER-9" in f["summary"] for f in facts), facts
        assert first.trace.trace_id not in json.dumps(mine.trace.to_document()) and TWO not in json.dumps(facts)
        assert all("question" not in f and "trace_id" not in f for f in facts), facts

        bobs = as_caller(api.app, bob(prefix))
        transport = httpx.ASGITransport(app=bobs)
        headers = {"Authorization": f"ApiKey {API_KEY}"}
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://hopsearch", headers=headers, timeout=60) as client,
            uvicorn_serving_async(as_caller(create_app(api.settings), bob(prefix))) as mcp_url,
        ):
            views = await bobs_views(client, api.alias, mcp_url)
            problems = {name: sorted(found) for name, value in views.items() if (found := forbidden(value))}
            assert problems == {}, problems
            assert "PUBLIC-MARKER-1" in json.dumps(views["trace"]), "bob reads the public handbook"
            assert views["outline"].get("found") is True, views["outline"]  # his own and public facts

            # 20 concurrent questions, half from HR, half from bob: none of bob's gets a restricted marker
            async def bobs_question() -> dict[str, Any]:
                sent = await client.post(f"/{api.alias}/_ask", json={"question": ASK, "strategy": "dualrag"})
                answer: dict[str, Any] = sent.json()
                assert "trace_id" in answer, answer
                return answer | {"trace": (await client.get(f"/_traces/{answer['trace_id']}")).json()}

            jobs = [ask(runtime, (ALICE, CAROL)[n % 2]) for n in range(10)]
            done = await asyncio.gather(*jobs, *(bobs_question() for _ in range(10)))
            hr_answers, bob_answers = done[:10], done[10:]
            assert [sorted(forbidden(a)) for a in bob_answers] == [[]] * 10
            assert all(
                "SALARY-MARKER-9" in json.dumps(a.trace.to_document()) for a in hr_answers if isinstance(a, Answer)
            )

        # revoking the group: carol's next question reuses no fact derived from the salary record
        changed = [r | {"acl": "group:board"} if r["_id"] == "hr-salary" else r for r in records()]
        assert (await load_jsonl(runtime.store, write_corpus(tmp_path, changed), LoadOptions())).reconciled
        revoked = await ask(runtime, CAROL)
        assert "SALARY-MARKER-9" not in json.dumps(revoked.trace.to_document()), reused(revoked)
        # deleting the document: the admin's next question reuses nothing derived from it
        assert any("BOARD-MARKER-7" in f["summary"] for f in reused(await ask(runtime, ADMIN))), admin_answer.text
        await runtime.store.client.delete(index=api.alias, id="board-minutes", refresh=True)
        after = await ask(runtime, ADMIN)
        assert "BOARD-MARKER-7" not in json.dumps(after.trace.to_document()), reused(after)
        assert re.search("PUBLIC-MARKER-1", json.dumps(after.trace.to_document()))
