"""The iterative and HyDE strategies against the scripted server: every stopping rule of the
iterative loop, malformed JSON, decomposition and HyDE switches, one batch for every list, RRF."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from hopsearch.service.errors import ConfigError, LLMOutputError
from hopsearch.service.llm import LLMClient
from hopsearch.service.retrieval import rrf
from hopsearch.service.strategies import STRATEGIES, AskOptions, Budget, HyDE, Iterative, build_strategy
from hopsearch.service.strategies.base import Answer, Strategy
from hopsearch.service.strategies.iterative import Assessment, read_assessment, stop_rule
from hopsearch.service.traces.recorder import MemoryTraceSink
from hopsearch.service.types import Hit, RetrievalQuery, SearchResult
from tests.dual_fixtures import ChatModel
from tests.llm_fixtures import PASSAGES, ListRetriever, server_for, settings_for
from tests.scopes import asking
from tests.scripted_llm import ScriptedLLM


class BatchRetriever(ListRetriever):
    def __init__(self) -> None:
        super().__init__(PASSAGES)
        self.batches: list[list[tuple[str, str]]] = []

    async def search_many(self, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        self.batches.append([(q.text, q.mode) for q in queries])
        return await super().search_many(queries)


def assess(confidence: float | str, next_query: str = "") -> dict[str, Any]:
    return {"confidence": confidence, "reasoning": "r", "missing_info": "m", "next_query": next_query}


async def run(
    strategy: type[Iterative] | type[HyDE],
    model: ChatModel,
    question: str,
    options: AskOptions | None = None,
    **kw: Any,
) -> tuple[Answer, dict[str, Any], BatchRetriever, ScriptedLLM]:
    retriever = BatchRetriever()
    sink = MemoryTraceSink()
    with server_for("vllm", model) as server:
        async with LLMClient(settings_for(server)) as llm:
            answer = await strategy(llm, retriever, sink, **kw).answer(asking(question, options or AskOptions(k=3)))
    return answer, dict(sink.documents[answer.trace.trace_id]), retriever, server


def stop_of(doc: dict[str, Any]) -> str:
    last = doc["steps"][-1]
    assert last["kind"] == "answer" and last["decision"] == "final"
    assert last["decided_by"] == last["details"]["stop"]
    return str(last["decided_by"])


def test_stop_rule_order_and_thresholds() -> None:
    def a(confidence: float, query: str | None = "next") -> Assessment:
        return Assessment(confidence, "", "", query)

    assert stop_rule(1, 5, a(0.85), None, ["q"]) == "confidence"
    assert stop_rule(1, 5, a(0.84), None, ["q"]) is None
    assert stop_rule(2, 5, a(0.6), 0.55, ["q"]) is None  # rose by exactly 0.05: not "less than 0.05"
    assert stop_rule(2, 5, a(0.59), 0.55, ["q"]) == "no-improvement"
    assert stop_rule(2, 5, a(0.5), 0.6, ["q"]) == "no-improvement"
    assert stop_rule(1, 5, a(0.3, None), None, ["q"]) == "no-next-query"
    assert stop_rule(1, 5, a(0.3, "Q"), None, ["q"]) == "repeat"  # already searched
    assert stop_rule(1, 5, a(0.3, "Who directed  Jaws"), None, ["who directed Jaws?"]) == "repeat"
    assert stop_rule(5, 5, a(0.3), 0.1, ["q"]) == "iteration-limit"
    assert read_assessment(assess("85%", "none")) == Assessment(0.85, "r", "m", None)
    assert read_assessment(assess(0.5, "...")).next_query is None  # a placeholder is no query
    assert read_assessment(assess(1.7)).confidence == 0.017
    with pytest.raises(LLMOutputError):
        read_assessment(assess("very"))


@pytest.mark.parametrize(
    ("replies", "stop", "retrievals"),
    [
        ([assess(0.3, "Jaws director"), assess(0.9, "x")], "confidence", 2),
        ([assess(0.3, "Jaws director"), assess(0.32, "Spielberg birth")], "no-improvement", 2),
        ([assess(0.3, "")], "no-next-query", 1),
        ([assess(0.3, "When was the director of Jaws born?")], "repeat", 1),
        ([assess(0.1 * (n + 1), f"query {n}") for n in range(6)], "iteration-limit", 5),
    ],
)
async def test_iterative_stopping_rules(replies: list[dict[str, Any]], stop: str, retrievals: int) -> None:
    model = ChatModel({"assess": replies}, answer="December 18, 1946")
    answer, doc, retriever, _ = await run(Iterative, model, "When was the director of Jaws born?")
    answer.raise_for_error()
    assert answer.text == "December 18, 1946" and stop_of(doc) == stop
    assert len(retriever.batches) == doc["totals"]["retrievals"] == retrievals
    assessed = [s for s in doc["steps"] if s["kind"] == "assess"]
    assert [s["decided_by"] for s in assessed] == ["assessor"] * (retrievals - 1) + [stop]
    searched = [batch[0][0] for batch in retriever.batches]
    assert searched[0] == "When was the director of Jaws born?"
    assert searched[1:] == [r["next_query"] for r in replies[: retrievals - 1]]


async def test_iterative_retrieval_budget_and_malformed_json() -> None:
    model = ChatModel({"assess": [assess(0.2, "a"), assess(0.4, "b"), assess(0.6, "c")]})
    _, doc, retriever, _ = await run(Iterative, model, "q?", AskOptions(budget=Budget(max_retrievals=2)))
    assert stop_of(doc) == "retrieval-budget" and len(retriever.batches) == 2
    broken = ChatModel({"assess": ['{"confidence": "high"', '{"confidence": "high", "reasoning": "", '
                                   '"missing_info": "", "next_query": ""}']})  # fmt: skip
    answer, doc, _, server = await run(Iterative, broken, "q?")
    assert isinstance(answer.error, LLMOutputError) and doc["status"] == "error"
    failed = doc["steps"][-1]
    assert failed["kind"] == "assess" and "confidence must be a number" in failed["error"]
    assert failed["llm_calls"] == 2 and failed["details"]["repaired"] is True
    assert len([r for r in server.requests if "response_format" in r]) == 2
    repaired = ChatModel({"assess": ["nope", assess(0.9)]}, answer="ok")
    answer, doc, _, _ = await run(Iterative, repaired, "q?")
    assert answer.text == "ok" and doc["steps"][1]["details"]["repaired"] is True


QUESTION = "Who was born first, the director of Jaws or the director of Lethal Weapon?"
SUBS = ["Who directed Jaws?", "Who directed Lethal Weapon?"]


async def test_hyde_decomposes_writes_passages_and_fuses_one_batch() -> None:
    model = ChatModel({"decompose": [{"sub_queries": [*SUBS, "who directed jaws?"]}]}, answer="Steven Spielberg")
    answer, doc, retriever, _ = await run(HyDE, model, QUESTION)
    answer.raise_for_error()
    assert [s["kind"] for s in doc["steps"]] == ["decompose", "hyde", "hyde", "retrieve", "answer"]
    assert [s["queries"] for s in doc["steps"] if s["kind"] == "hyde"] == [[SUBS[0]], [SUBS[1]]]
    # Dense over each hypothetical passage and BM25 over each sub-query: one batch, 4 lists.
    assert retriever.batches == [
        [
            (f"A passage about {SUBS[0]}", "dense"),
            (SUBS[0], "bm25"),
            (f"A passage about {SUBS[1]}", "dense"),
            (SUBS[1], "bm25"),
        ]
    ]
    retrieve = doc["steps"][3]
    lists = [[Hit(i, 0.0, "", "") for i in item["hit_ids"]] for item in retrieve["details"]["lists"]]
    assert retrieve["hit_ids"] == [h.id for h in rrf(lists, k=60, size=3)]
    assert [c.id for c in answer.citations] == retrieve["hit_ids"] and len(answer.citations) == 3


async def test_hyde_simple_question_stays_one_and_switches_turn_steps_off() -> None:
    placeholder = ChatModel({"decompose": [{"sub_queries": ["...", "…"]}]})
    _, _, retriever, _ = await run(HyDE, placeholder, QUESTION, hypothetical=False)
    assert retriever.batches == [[(QUESTION, "dense"), (QUESTION, "bm25")]]  # the question itself
    simple = ChatModel({"decompose": [{"sub_queries": ["Who directed Jaws?"]}]})
    _, doc, retriever, _ = await run(HyDE, simple, "Who directed Jaws?")
    assert len(retriever.batches[0]) == 2 and [s["kind"] for s in doc["steps"]].count("hyde") == 1
    _, doc, retriever, _ = await run(HyDE, ChatModel(), QUESTION, decompose=False)
    assert [s["kind"] for s in doc["steps"]] == ["hyde", "retrieve", "answer"]
    assert retriever.batches[0][1] == (QUESTION, "bm25")
    _, doc, retriever, _ = await run(HyDE, ChatModel(), QUESTION, decompose=False, hypothetical=False)
    assert [s["kind"] for s in doc["steps"]] == ["retrieve", "answer"]
    assert retriever.batches == [[(QUESTION, "dense"), (QUESTION, "bm25")]]
    _, _, retriever, _ = await run(HyDE, ChatModel(), QUESTION, decompose=False, dense=False)
    assert [mode for _, mode in retriever.batches[0]] == ["bm25", "bm25"]


async def test_registry_builds_every_strategy_by_name() -> None:
    with ScriptedLLM(lambda r: "x") as server:
        settings = settings_for(server, hyde_decompose=False)
        async with LLMClient(settings) as llm:
            built: dict[str, Strategy] = {
                name: build_strategy(name, llm=llm, retriever=ListRetriever(PASSAGES), sink=None, settings=settings)
                for name in STRATEGIES
            }
            with pytest.raises(ConfigError, match="unknown strategy"):
                build_strategy("flare", llm=llm, retriever=ListRetriever(PASSAGES), sink=None, settings=settings)
    assert {name: s.name for name, s in built.items()} == {name: name for name in STRATEGIES}
    hyde = built["hyde"]
    assert isinstance(hyde, HyDE) and hyde.decompose is False and hyde.dense is False


@pytest.mark.parametrize("strategy", [Iterative, HyDE])
async def test_a_final_answer_that_starts_with_a_line_break_is_still_read(
    strategy: type[Iterative] | type[HyDE],
) -> None:
    # Seen with the 270M model: a newline before the answer. With a newline stop the answer was "".
    model = ChatModel({"assess": [assess(0.9)]}, answer="\n\nDecember 18, 1946")
    answer, doc, _, _ = await run(strategy, model, "When was the director of Jaws born?")
    answer.raise_for_error()
    assert answer.text == "December 18, 1946"
    assert doc["answer"] == "December 18, 1946"


@pytest.mark.parametrize("strategy", [Iterative, HyDE])
async def test_the_shared_final_answer_is_typed_and_fitted_to_a_choice(
    strategy: type[Iterative] | type[HyDE],
) -> None:
    model = ChatModel({"assess": [assess(0.9)]}, answer='[2] Title: "Jaws"')
    answer, doc, _, _ = await run(strategy, model, "Which film came out first, Jaws or Alien?")
    answer.raise_for_error()
    assert answer.text == doc["answer"] == "Jaws"
    last = doc["steps"][-1]
    assert last["kind"] == "answer" and last["answer_type"] == "choice"
    assert last["details"]["candidates"] == ["Jaws", "Alien"]
    # The free reply, cleaned, names a candidate: it stands (a grammar would commit by the first token).
    assert last["details"]["constrained"] == "free" and last["details"]["raw_answer"] == '[2] Title: "Jaws"'
    assert last["llm_calls"] == 1
