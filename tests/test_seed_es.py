"""Strategies hop, and a seeded run starts with the question's own hop retrieval (issue 41), on real
Elasticsearch with a scripted model: the seed's linked passage (one no word of the question reaches) is in
the trace's seed step, in the citations and in the final answer's prompt; DeepRAG's ``never`` policy and a
retrieval budget of 0 are never seeded; DeepRAG's decisions after a seed are the model's, recorded as
without it; every strategy's sub-query steps hop (linked ids in ``hit_ids``, the names in
``details.links``); DualRAG's facts carry the linked passages they were built from in their lineage, and
the titles a hop linked to are named to its Entity Identifier."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from click.testing import CliRunner
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hopsearch.cli.ask import ask as cli_ask
from hopsearch.service.access import ADMIN
from hopsearch.service.api import create_app
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.outlines.lineage import source
from hopsearch.service.outlines.store import EsOutlineStore
from hopsearch.service.requests import Budget
from hopsearch.service.strategies import Answer
from tests.api_fixtures import API_KEY, api_settings, uvicorn_serving_async
from tests.conftest import EsNode
from tests.dual_fixtures import ChatModel, entities, reason
from tests.llm_fixtures import DeepRAGModel, PlanStep, server_for
from tests.scripted_llm import ScriptedLLM, ScriptRequest
from tests.test_hops_es import LINKED, PASSAGES, QUESTION, _load

#: Who directed the film: its passage names the director, whose passage only the hop reaches.
DIRECTED = "Who directed the film Baby Face Morgan?"
LINKED_TEXT = "Frankfurt am Main"  # only in the linked passage
LINK = {"name": "Arthur Dreifuss", "from": "p-morgan", "passage": "p-dreifuss", "how": "title"}


class Script:
    """DeepRAG's format from a plan, the chat roles from a :class:`ChatModel`, every final answer "Frankfurt"."""

    def __init__(self, plan: Sequence[PlanStep] = (), chat: ChatModel | None = None) -> None:
        self.deep = DeepRAGModel(plan, final="Frankfurt")
        self.chat = chat or ChatModel(defaults={"decompose": {"sub_queries": [DIRECTED]}})

    def __call__(self, request: ScriptRequest) -> str:
        if request.prompt.endswith("\nAnswer:"):
            return " Frankfurt\nmore"
        if request.endpoint == "completions" or request.body.get("continue_final_message"):
            return self.deep(request)
        return self.chat(request)


@asynccontextmanager
async def corpus(es_node: EsNode, script: Script, **settings: Any) -> AsyncIterator[tuple[Runtime, ScriptedLLM]]:
    """A runtime over the hop corpus (a film's paragraph, the director's only a link reaches) and the model."""
    with server_for("vllm", script) as llm:
        async with await Runtime.open(api_settings(es_node.url, llm, **settings)) as runtime:
            try:
                await _load(runtime.store, [*PASSAGES, LINKED], {})
                yield runtime, llm
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{runtime.settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )


async def ask(runtime: Runtime, strategy: str, **options: Any) -> Answer:
    request = await usecases.ask_request(runtime, QUESTION, caller=ADMIN, strategy=strategy, k=3, **options)
    answer = await usecases.ask(runtime, request)
    answer.raise_for_error()
    return answer


def final_prompt(llm: ScriptedLLM) -> str:
    return next(p for p in reversed(llm.prompts) if p.endswith(("\nAnswer:", "So the final answer is:")))


@pytest.mark.parametrize("strategy", ["deeprag", "iterative", "hyde", "dualrag"])
async def test_a_seeded_run_holds_the_questions_hop_passages_in_trace_citations_and_answer(
    es_node: EsNode, strategy: str
) -> None:
    async with corpus(es_node, Script()) as (runtime, llm):
        seeded = await ask(runtime, strategy, hops=1, seed=True)
        prompt = final_prompt(llm)
        plain = await ask(runtime, strategy, hops=1, seed=False)
    first = seeded.trace.steps[0]
    assert (first.kind, first.depth, first.queries, first.retrievals) == ("retrieve", 0, (QUESTION,), 1)
    assert first.details is not None and first.details["seed"] is True and LINK in first.details["links"]
    assert "p-dreifuss" in first.hit_ids and len(first.hit_ids) == 5  # at least single's k of 5
    assert "p-dreifuss" in [c.id for c in seeded.citations]
    assert LINKED_TEXT in prompt  # the final answer read the linked passage
    assert seeded.trace.totals()["retrievals"] == plain.trace.totals()["retrievals"] + (strategy != "iterative")
    assert not any((s.details or {}).get("seed") for s in plain.trace.steps)
    if strategy in ("deeprag", "dualrag"):  # their models asked for no retrieval: only the seed found it
        assert "p-dreifuss" not in [c.id for c in plain.citations]


async def test_the_four_strategies_are_seeded_by_default_and_the_setting_turns_it_off(es8_node: EsNode) -> None:
    strategies = ("deeprag", "iterative", "hyde", "dualrag", "single")

    def seeded(answer: Answer) -> bool:
        return any((s.details or {}).get("seed") for s in answer.trace.steps)

    async with corpus(es8_node, Script(), seed=None) as (runtime, _):  # HOPSEARCH_SEED unset
        by_default = {name: seeded(await ask(runtime, name, hops=1)) for name in strategies}
    async with corpus(es8_node, Script(), seed=False) as (runtime, _):
        off = {name: seeded(await ask(runtime, name, hops=1)) for name in strategies}
        asked = {name: seeded(await ask(runtime, name, hops=1, seed=True)) for name in strategies}
    assert by_default == asked == {"deeprag": True, "iterative": True, "hyde": True, "dualrag": True, "single": False}
    assert not any(off.values())


async def test_never_and_a_retrieval_budget_of_0_are_never_seeded(es8_node: EsNode) -> None:
    async with corpus(es8_node, Script()) as (runtime, _):
        never = await ask(runtime, "deeprag", hops=1, seed=True, mode="never")
        broke = [
            await ask(runtime, name, hops=1, seed=True, budget=Budget(max_retrievals=0))
            for name in ("deeprag", "iterative", "hyde", "dualrag")
        ]
        single = await ask(runtime, "single", hops=1, seed=True)
    for answer in (never, *broke):
        assert not any((s.details or {}).get("seed") for s in answer.trace.steps), answer.trace.strategy
    for answer in (never, *broke[:2], broke[3]):  # HyDE's one retrieval is its fixed pipeline's, budget or not
        assert answer.trace.totals()["retrievals"] == 0 and answer.citations == (), answer.trace.strategy
    assert [s.kind for s in single.trace.steps].count("retrieve") == 1  # its one retrieval is the question's


async def test_deeprag_decides_after_a_seed_as_without_it_and_its_sub_queries_hop(es8_node: EsNode) -> None:
    search = PlanStep(DIRECTED, "search", "Arthur Dreifuss")
    # The seed is written as the question's searched follow-up: the plan's first step answers it.
    seeded_plan = [PlanStep(QUESTION, "intermediate", "the film's director"), search]
    async with corpus(es8_node, Script(seeded_plan)) as (runtime, _):
        seeded = await ask(runtime, "deeprag", hops=1, seed=True)
    async with corpus(es8_node, Script([search])) as (runtime, _):
        plain = await ask(runtime, "deeprag", hops=1, seed=False)

    def decisions(answer: Answer) -> list[tuple[Any, ...]]:
        return [(s.depth, s.decision, s.decided_by, s.queries) for s in answer.trace.steps if s.kind == "generate"]

    assert (
        decisions(seeded)
        == decisions(plain)
        == [(1, "retrieve", "stop_reason", (DIRECTED,)), (2, "final", "stop_reason", ())]
    )
    for answer in (seeded, plain):
        [sub] = [s for s in answer.trace.steps if s.kind == "retrieve" and s.depth == 1]
        assert sub.hit_ids[:2] == ("p-morgan", "p-dreifuss") and sub.details is not None
        assert sub.details["links"] == [LINK]
    assert [s.depth for s in seeded.trace.steps if s.kind == "retrieve"] == [0, 1]


def _hop_chat() -> ChatModel:
    return ChatModel(
        {
            "decompose": [{"sub_queries": [DIRECTED]}],
            "reasoner": [reason("Find who directed it.", True)],
            "identifier": [entities(("Baby Face Morgan", ["Baby Face Morgan film"]))],
        },
        summaries={"Baby Face Morgan": "Baby Face Morgan was directed by Arthur Dreifuss, who grew up in Frankfurt."},
    )


@pytest.mark.parametrize("strategy", ["hyde", "dualrag"])
async def test_hyde_and_dualrag_sub_query_steps_hop_and_record_their_links(es8_node: EsNode, strategy: str) -> None:
    async with corpus(es8_node, Script(chat=_hop_chat())) as (runtime, _):
        answer = await ask(runtime, strategy, hops=1)
    [step] = [s for s in answer.trace.steps if s.kind == "retrieve"]
    assert "p-dreifuss" in step.hit_ids and step.details is not None
    assert LINK in step.details["links"]
    assert "p-dreifuss" in [c.id for c in answer.citations]


async def test_dualrag_facts_carry_linked_passages_in_their_lineage_and_it_learns_linked_titles(
    es8_node: EsNode,
) -> None:
    chat = ChatModel(
        {
            "reasoner": [reason("Find who directed it.", True), reason("Find where he was born.", True)],
            "identifier": [
                entities(("Baby Face Morgan", ["Baby Face Morgan film"])),
                entities(("Arthur Dreifuss", ["Arthur Dreifuss"])),
            ],
        },
        summaries={
            "Baby Face Morgan": "Baby Face Morgan was directed by Arthur Dreifuss, who grew up in Frankfurt.",
            "Arthur Dreifuss": "Arthur Dreifuss grew up in Frankfurt am Main.",
        },
    )
    async with corpus(es8_node, Script(chat=chat)) as (runtime, llm):
        answer = await ask(runtime, "dualrag", hops=1, seed=True)
        stored = await EsOutlineStore(runtime.store).get("default", "Baby Face Morgan")
        index = runtime.settings.passages_alias  # what a run's scope names, as its lineage does
    identify = [p for p in llm.prompts if "Find the entities" in p]
    assert "Known entities: Baby Face Morgan; Arthur Dreifuss" in identify[1]  # the linked title, named
    assert "Known entities: Arthur Dreifuss" in identify[0]  # the seed's link, before any search
    assert stored is not None
    [fact] = stored.facts
    assert "p-dreifuss" in fact.passage_ids
    assert fact.lineage is not None
    assert {source(index, "p-dreifuss"), source(index, "p-morgan")} <= set(fact.lineage)
    seed = answer.trace.steps[0]
    assert {source(index, hit) for hit in seed.hit_ids} <= set(fact.lineage)  # the seed entered its prompts


async def test_every_front_end_takes_seed(es8_node: EsNode, tmp_path: Path) -> None:
    """``_ask``'s options, ``/v1/chat/completions``' ``hopsearch`` extension, the MCP ``ask`` tool and
    ``hopsearch ask --seed`` each seed iterative's run; ``seed: false`` does not."""
    async with corpus(es8_node, Script()) as (runtime, llm):
        settings = runtime.settings
        traces: dict[str, dict[str, Any]] = {}
        async with uvicorn_serving_async(create_app(settings)) as url:
            head = {"Authorization": f"ApiKey {API_KEY}"}
            async with httpx.AsyncClient(base_url=url, timeout=60, headers=head) as http:
                for seed in (True, False):
                    options = {"k": 3, "hops": 1, "seed": seed}
                    body = {"question": QUESTION, "strategy": "iterative", "options": options}
                    asked = await http.post(f"/{settings.passages_alias}/_ask", json=body)
                    assert asked.status_code == 200, asked.text
                    traces[f"_ask {seed}"] = (await http.get(f"/_traces/{asked.json()['trace_id']}")).json()
                chat = {"model": "hopsearch-iterative", "messages": [{"role": "user", "content": QUESTION}]}
                chatted = await http.post("/v1/chat/completions", json={**chat, "hopsearch": {"seed": True}})
                assert chatted.status_code == 200, chatted.text
                traced = await http.get(f"/_traces/{chatted.json()['hopsearch']['trace_id']}")
                traces["/v1"] = traced.json()
                keyed = httpx2.AsyncClient(headers=head, timeout=60)
                async with keyed, Client(streamable_http_client(f"{url}/_mcp/", http_client=keyed)) as client:
                    tool = {"question": QUESTION, "strategy": "iterative", "hops": 1, "seed": True}
                    called = await client.call_tool("ask", tool)
                trace_id = json.loads(called.content[0].text)["trace_id"]  # type: ignore[union-attr]
                traces["mcp"] = (await http.get(f"/_traces/{trace_id}")).json()
        env = {
            "HOPSEARCH_ES_URL": es8_node.url,
            "HOPSEARCH_EMBEDDER": "none",
            "HOPSEARCH_LLM_BASE_URL": llm.base_url,
            "HOPSEARCH_LLM_MODEL": "scripted",
            "HOPSEARCH_STATE_DIR": str(tmp_path),
        }
        args = [QUESTION, "--prefix", settings.index_prefix, "--strategy", "iterative", "--hops", "1", "--json"]
        for flag in ("--seed", "--no-seed"):
            result = await asyncio.to_thread(CliRunner().invoke, cli_ask, [*args, flag], env=env)
            assert result.exit_code == 0, result.output
            traces[f"cli {flag}"] = json.loads(result.output)
    documents = {name: doc.get("_source", doc) for name, doc in traces.items()}  # GET /_traces: as _doc
    seeded = {name: bool((doc["steps"][0].get("details") or {}).get("seed")) for name, doc in documents.items()}
    assert seeded == {
        "_ask True": True,
        "_ask False": False,
        "/v1": True,
        "mcp": True,
        "cli --seed": True,
        "cli --no-seed": False,
    }
