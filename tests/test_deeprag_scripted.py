"""DeepRAG and the single baseline against the scripted server: decisions follow the stop string,
on a vLLM-like server (``stop_reason``) and on a llama.cpp-like one (each fallback)."""

from __future__ import annotations

import time

import pytest

from hopsearch.service.errors import LLMTimeout, LLMUnavailable
from hopsearch.service.llm import LLMClient
from hopsearch.service.strategies import AskOptions, Budget, DeepRAG, SingleRetrieval, depth_for
from hopsearch.service.strategies.answer_types import NO_ANSWER
from hopsearch.service.strategies.deeprag import STOPS
from hopsearch.service.traces.recorder import MemoryTraceSink
from tests.llm_fixtures import (
    EXPECTED_METHOD,
    FLAVOURS,
    PASSAGES,
    DeepRAGModel,
    ListRetriever,
    PlanStep,
    fallback_for,
    server_for,
    settings_for,
)
from tests.scopes import asking
from tests.scripted_llm import ScriptedLLM, apply_limits

JAWS = DeepRAGModel(
    [
        PlanStep("Who directed Jaws?", "search", "Steven Spielberg"),
        PlanStep("When was Steven Spielberg born?", "intermediate", "1946"),
    ],
    final="1946",
)
QUESTION = "When was the director of Jaws born?"


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def decisions(doc: dict[str, object]) -> list[tuple[object, object]]:
    steps = doc["steps"]
    assert isinstance(steps, list)
    return [(s["decision"], s["decided_by"]) for s in steps if s["kind"] == "generate"]


async def run(
    flavour: str, model: DeepRAGModel, options: AskOptions, **faults: object
) -> tuple[object, ListRetriever, ScriptedLLM, MemoryTraceSink]:
    retriever = ListRetriever(PASSAGES)
    sink = MemoryTraceSink()
    with server_for(flavour, model, **faults) as server:
        async with LLMClient(settings_for(server, flavour)) as llm:
            answer = await DeepRAG(llm, retriever, sink, stop_fallback=fallback_for(flavour)).answer(
                asking(QUESTION, options)
            )
    return answer, retriever, server, sink


async def test_decisions_follow_the_stop_string(flavour: str) -> None:
    answer, retriever, server, sink = await run(flavour, JAWS, AskOptions())
    answer.raise_for_error()  # type: ignore[attr-defined]
    doc = sink.documents[answer.trace.trace_id]  # type: ignore[attr-defined]
    method = EXPECTED_METHOD[flavour]
    assert decisions(dict(doc)) == [("retrieve", method), ("parametric", method), ("final", method)]
    assert retriever.queries == ["Who directed Jaws?"]
    assert answer.text == "1946"  # type: ignore[attr-defined]
    assert [c.id for c in answer.citations][:1] == ["p-jaws"]  # type: ignore[attr-defined]
    generate = [s for s in doc["steps"] if s["kind"] == "generate"]
    assert [s["stop"] for s in generate] == list(STOPS)
    if flavour == "vllm":  # DeepRAG checkpoints continue their own turn in the chat template
        assert all(r["continue_final_message"] and not r["add_generation_prompt"] for r in server.requests)
    else:
        assert all("prompt" in r for r in server.requests)


async def test_the_context_line_carries_the_retrieved_passages(flavour: str) -> None:
    _, _, server, _ = await run(flavour, JAWS, AskOptions())
    after_context = [p for p in server.prompts if p.endswith("Intermediate answer:") and "Context:" in p]
    assert after_context, server.prompts
    prompt = after_context[0]
    expected = "\nLet's search the question in Wikipedia.\nContext: [1] Title: Jaws (film) Text: Jaws is"
    assert expected in prompt
    assert prompt.count("] Title: ") == 3


async def test_a_sub_query_with_lethal_does_not_trigger_retrieval(flavour: str) -> None:
    lethal = PlanStep("Who directed Lethal Weapon?", "intermediate", "Richard Donner")
    model = DeepRAGModel([lethal], "Richard Donner")
    answer, retriever, _, sink = await run(flavour, model, AskOptions(), constrain=False)  # not a date
    doc = dict(sink.documents[answer.trace.trace_id])  # type: ignore[attr-defined]
    assert [d for d, _ in decisions(doc)] == ["parametric", "final"]
    assert retriever.queries == []
    assert doc["totals"]["retrievals"] == 0
    assert answer.text == "Richard Donner"  # type: ignore[attr-defined]
    # The official bare "Let" stop would have fired inside the word.
    cut = apply_limits("\nFollow up: Who directed Lethal Weapon?", ["Let"], 50)
    assert cut == ("\nFollow up: Who directed ", "stop", "Let")


@pytest.mark.parametrize("dataset", ["hotpotqa", "2wikimultihopqa"])
async def test_depth_limit_holds(flavour: str, dataset: str) -> None:
    endless = DeepRAGModel([], "forever", endless=True)
    depth = depth_for(dataset)
    options = AskOptions(max_depth=depth, budget=Budget(max_retrievals=100, max_llm_calls=100))
    answer, retriever, _, sink = await run(flavour, endless, options, constrain=False)  # "forever": not a date
    doc = dict(sink.documents[answer.trace.trace_id])  # type: ignore[attr-defined]
    assert len(decisions(doc)) == depth == (6 if dataset == "hotpotqa" else 10)
    assert len(retriever.queries) == depth
    last = doc["steps"][-1]
    assert (last["kind"], last["decision"], last["decided_by"]) == ("answer", "final", "depth-limit")
    assert answer.text == "forever"  # type: ignore[attr-defined]


async def test_modes_always_and_never(flavour: str) -> None:
    always, retriever, _, sink = await run(flavour, JAWS, AskOptions(mode="always"))
    doc = dict(sink.documents[always.trace.trace_id])  # type: ignore[attr-defined]
    assert [d for d, _ in decisions(doc)] == ["retrieve", "retrieve", "final"]
    assert decisions(doc)[1][1] == "mode=always"
    assert len(retriever.queries) == 2
    never, retriever, _, sink = await run(flavour, JAWS, AskOptions(mode="never"))
    doc = dict(sink.documents[never.trace.trace_id])  # type: ignore[attr-defined]
    assert decisions(doc)[0] == ("parametric", "mode=never")
    assert retriever.queries == []


async def test_query_is_cut_to_its_last_64_tokens(flavour: str) -> None:
    long_query = " ".join(f"w{i}" for i in range(100))
    model = DeepRAGModel([PlanStep(long_query, "search", "x")], "x")
    _, retriever, _, _ = await run(flavour, model, AskOptions(max_tokens=200))
    assert retriever.queries == [" ".join(f"w{i}" for i in range(36, 100))]


async def test_totals_equal_the_sum_of_the_steps(flavour: str) -> None:
    answer, _, server, sink = await run(flavour, JAWS, AskOptions())
    doc = dict(sink.documents[answer.trace.trace_id])  # type: ignore[attr-defined]
    steps, totals = doc["steps"], doc["totals"]
    for key in ("retrievals", "llm_calls", "tokens_in", "tokens_out", "retries"):
        assert totals[key] == sum(s[key] for s in steps), key
    assert totals["llm_calls"] == len(server.requests) - 0  # every request answered is counted
    assert totals["tokens_in"] > 0 and totals["tokens_out"] > 0
    assert totals["wall_ms"] >= sum(s["latency_ms"] for s in steps)
    assert doc["status"] == "ok" and doc["error"] is None


async def test_500_twice_then_success_answers_with_the_retries_in_the_trace(flavour: str) -> None:
    answer, _, _, sink = await run(flavour, JAWS, AskOptions(), fail_first=2)
    answer.raise_for_error()  # type: ignore[attr-defined]
    assert answer.text == "1946"  # type: ignore[attr-defined]
    doc = dict(sink.documents[answer.trace.trace_id])  # type: ignore[attr-defined]
    first = doc["steps"][0]
    assert [a["status"] for a in first["attempts"]][:3] == [500, 500, 200]
    assert first["retries"] == 2 and doc["totals"]["retries"] == 2


async def test_a_timeout_then_success_is_retried(flavour: str) -> None:
    retriever, sink = ListRetriever(PASSAGES), MemoryTraceSink()
    with server_for(flavour, JAWS, delay_first=1, delay_s=2.0) as server:
        async with LLMClient(settings_for(server, flavour, llm_timeout=0.4)) as llm:
            strategy = DeepRAG(llm, retriever, sink, stop_fallback=fallback_for(flavour))
            answer = await strategy.answer(asking(QUESTION, AskOptions()))
    answer.raise_for_error()
    first = sink.documents[answer.trace.trace_id]["steps"][0]
    assert first["attempts"][0]["status"] is None and "timeout" in first["attempts"][0]["error"]
    assert first["retries"] == 1 and answer.text == "1946"


async def test_a_server_that_never_answers_fails_cleanly_within_the_deadline(flavour: str) -> None:
    retriever, sink = ListRetriever(PASSAGES), MemoryTraceSink()
    deadline = 2.0
    with server_for(flavour, JAWS, hang=True) as server:
        settings = settings_for(server, flavour, llm_timeout=0.5, llm_retries=10)
        async with LLMClient(settings) as llm:
            started = time.monotonic()
            answer = await DeepRAG(llm, retriever, sink, stop_fallback=fallback_for(flavour)).answer(
                asking(QUESTION, AskOptions(budget=Budget(timeout_s=deadline)))
            )
            elapsed = time.monotonic() - started
    assert elapsed < deadline + 1.0
    assert isinstance(answer.error, LLMTimeout | LLMUnavailable)
    assert answer.text is None
    doc = sink.documents[answer.trace.trace_id]
    assert doc["status"] == "error" and doc["error"]["type"] in {"LLMTimeout", "LLMUnavailable"}
    failed = doc["steps"][-1]
    assert failed["kind"] == "failed" and failed["attempts"] and failed["retries"] == len(failed["attempts"])
    with pytest.raises((LLMTimeout, LLMUnavailable)):
        answer.raise_for_error()


async def test_single_retrieves_once_and_answers(flavour: str) -> None:
    retriever, sink = ListRetriever(PASSAGES), MemoryTraceSink()

    def script(request: object) -> str:
        return " Steven Spielberg\nQuestion: and more"

    with server_for(flavour, script) as server:
        async with LLMClient(settings_for(server, flavour)) as llm:
            single = SingleRetrieval(llm, retriever, sink, stop_fallback=fallback_for(flavour))
            answer = await single.answer(asking("Who directed Jaws?", AskOptions(k=2)))
    answer.raise_for_error()
    assert answer.text == "Steven Spielberg"
    assert retriever.queries == ["Who directed Jaws?"]
    assert answer.citations[0].id == "p-jaws" and len(answer.citations) == 2
    assert "Context: [1] Title: Jaws (film)" in server.prompts[0]
    doc = sink.documents[answer.trace.trace_id]
    assert [s["kind"] for s in doc["steps"]] == ["retrieve", "answer"]
    assert doc["totals"]["retrievals"] == 1 and doc["totals"]["llm_calls"] == 1


async def test_single_final_answer_is_typed_and_cleaned(flavour: str) -> None:
    retriever, sink = ListRetriever(PASSAGES), MemoryTraceSink()

    def script(request: object) -> str:
        return ' 1. "Jaws was released first."\n'

    with server_for(flavour, script) as server:
        async with LLMClient(settings_for(server, flavour)) as llm:
            single = SingleRetrieval(llm, retriever, sink, stop_fallback=fallback_for(flavour))
            answer = await single.answer(asking("Which film came out first, Jaws or Alien?", AskOptions(k=2)))
    answer.raise_for_error()
    assert answer.text == "Jaws"
    step = sink.documents[answer.trace.trace_id]["steps"][-1]
    assert step["answer_type"] == "choice"
    # The free reply names one candidate: it stands, cleaned and fitted, and nothing is constrained.
    raw = '1. "Jaws was released first."'
    assert step["details"] == {"candidates": ["Jaws", "Alien"], "constrained": "free", "raw_answer": raw}
    assert server.constrained == [] and step["llm_calls"] == 1


async def test_deeprag_final_answer_that_is_not_an_answer_is_recorded_as_none(flavour: str) -> None:
    model = DeepRAGModel([PlanStep("Who directed Jaws?", "search", "Steven Spielberg")], final="need_retrieve")
    # A server that cannot constrain the answer (a date here): the cleaning is what is left.
    answer, _, _, sink = await run(flavour, model, AskOptions(), constrain=False)
    answer.raise_for_error()  # type: ignore[attr-defined]
    assert answer.text == NO_ANSWER  # type: ignore[attr-defined]
    steps = sink.documents[answer.trace.trace_id]["steps"]  # type: ignore[attr-defined]
    answers = [s for s in steps if s["kind"] == "answer"]
    assert [s["answer_type"] for s in answers] == [None] * (len(answers) - 1) + ["date"]
