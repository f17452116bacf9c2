"""Fewer calls, no loops: the streamed stop fallback decides exactly as ``stop_reason`` does, in one
request; a model that repeats its follow-up (DeepRAG), its next query (iterative) or its keywords
(DualRAG) gets one retrieval, and the trace shows the ``repeat`` decision."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from hopsearch.service.llm import Completion, LLMClient, complete_until
from hopsearch.service.strategies import AskOptions, Budget, DeepRAG
from hopsearch.service.strategies.deeprag import STOPS, decide
from hopsearch.service.strategies.dualrag import DualRAG
from hopsearch.service.strategies.iterative import Iterative
from hopsearch.service.strategies.steps import normalise_query
from hopsearch.service.traces.recorder import MemoryTraceSink
from tests.dual_fixtures import ChatModel, entities, reason
from tests.llm_fixtures import (
    PASSAGES,
    DeepRAGModel,
    ListRetriever,
    PlanStep,
    fallback_for,
    server_for,
    settings_for,
)
from tests.scopes import asking
from tests.scripted_llm import ScriptRequest

PROMPT = "Question: When was the director of Jaws born?"
SEARCH = "\nLet's search the question in Wikipedia."

#: (what the model writes after the prompt, max_tokens): every marker, two markers (the earliest
#: wins), a marker word inside a line, end of sequence, the token limit before, inside and right
#: after a marker.
CASES: list[tuple[str, int]] = [
    ("\nFollow up: Who directed Jaws?" + SEARCH + "\nContext: [1] Title: Jaws", 40),
    ("\nFollow up: Who directed Lethal Weapon?\nIntermediate answer: Richard Donner\nFollow up: x", 40),
    ("\nSo the final answer is: 1946\nQuestion: something else", 40),
    ("\nFollow up: Who directed Jaws?\nIntermediate answer: Spielberg" + SEARCH, 40),
    ("\nFollow up: Let's search the question? and more", 40),
    (" 1946", 40),
    ("", 40),
    ("\nFollow up: " + " ".join(f"w{i}" for i in range(60)) + SEARCH, 20),
    ("\nFollow up: a" + SEARCH + " more words", 4),  # the limit falls inside the marker
    ("\nFollow up: a" + SEARCH + " more words", 5),  # ... right after "search"
    ("\nFollow up: a" + SEARCH + " more words", 6),
]


def continuing(generated: str) -> Any:
    """A greedy "model": whatever prompt extends ``PROMPT``, it writes the rest of ``PROMPT + generated``."""
    full = PROMPT + generated

    def script(request: ScriptRequest) -> str:
        return full[len(request.prompt) :] if full.startswith(request.prompt) else ""

    return script


async def decided(flavour: str, generated: str, max_tokens: int) -> tuple[Any, ...]:
    with server_for(flavour, continuing(generated)) as server:
        async with LLMClient(settings_for(server, flavour)) as llm:
            done: Completion = await complete_until(
                llm, PROMPT, STOPS, max_tokens=max_tokens, fallback=fallback_for(flavour)
            )
    decision, _ = decide(done, AskOptions(), may_retrieve=True)
    return decision, done.text, done.stop, done.finish_reason, done.calls, len(server.requests)


@pytest.mark.parametrize(("generated", "max_tokens"), CASES)
@pytest.mark.parametrize("flavour", ["llamacpp-stream", "llamacpp-followup", "llamacpp-cut"])
async def test_the_llamacpp_fallbacks_decide_as_stop_reason_does(flavour: str, generated: str, max_tokens: int) -> None:
    expected = await decided("vllm", generated, max_tokens)
    got = await decided(flavour, generated, max_tokens)
    assert got[:4] == expected[:4]
    if flavour == "llamacpp-stream":  # and in one request, like vLLM
        assert got[4:] == (1, 1)


async def test_the_stream_is_closed_at_the_marker() -> None:
    generated = "\nFollow up: Who directed Jaws?" + SEARCH + " " + " ".join(["ramble"] * 200)
    with server_for("llamacpp-stream", continuing(generated)) as server:
        async with LLMClient(settings_for(server, "llamacpp-stream")) as llm:
            done = await complete_until(llm, PROMPT, STOPS, max_tokens=300)
    assert (done.text, done.stop, done.stop_method) == ("\nFollow up: Who directed Jaws?", STOPS[0], "fallback-stream")
    request = server.requests[0]
    assert request["stream"] is True and "stop" not in request
    assert server.streamed[0] < 20  # of 210 events: the server saw the client go


def test_normalise_query() -> None:
    assert normalise_query("  Who directed  Jaws? ") == normalise_query("who directed jaws") == "who directed jaws"
    assert normalise_query("Jaws (film)") != normalise_query("Jaws 2")


class RepeatingModel:
    """A DeepRAG "model" that asks the same follow-up after every intermediate answer."""

    def __call__(self, request: ScriptRequest) -> str:
        prompt = request.prompt
        if prompt.endswith("So the final answer is:"):
            return " Steven Spielberg\nQuestion: next"
        if prompt.endswith("Intermediate answer:"):
            return " Steven Spielberg\nFollow up: again"
        return "\nFollow up: Who directed Jaws?" + SEARCH + " and more"


@pytest.mark.parametrize("flavour", ["vllm", "llamacpp-stream"])
async def test_a_repeated_follow_up_is_retrieved_once(flavour: str) -> None:
    results = {}
    for guard in (True, False):
        retriever = ListRetriever(PASSAGES)
        sink = MemoryTraceSink()
        options = AskOptions(max_depth=4, repeat_guard=guard, budget=Budget(max_llm_calls=100))
        with server_for(flavour, RepeatingModel()) as server:
            async with LLMClient(settings_for(server, flavour)) as llm:
                answer = await DeepRAG(llm, retriever, sink).answer(asking("Who directed Jaws?", options))
        answer.raise_for_error()
        doc = sink.documents[answer.trace.trace_id]
        steps = [(s["kind"], s["decision"], s["decided_by"]) for s in doc["steps"]]
        results[guard] = (retriever.queries, steps, len(server.requests), answer.text)
    queries, steps, requests, text = results[True]
    assert queries == ["Who directed Jaws?"] and text == "Steven Spielberg"
    assert [s for s in steps if s[0] == "generate"][1][1:] == ("repeat", "repeat-of-depth-1")
    assert steps[-1] == ("answer", "final", "repeat")
    assert requests == 4  # generate, answer, generate (the repeat), final answer
    old_queries, old_steps, old_requests, _ = results[False]
    assert old_queries == ["Who directed Jaws?"] * 4 and old_steps[-1] == ("answer", "final", "depth-limit")
    assert old_requests == 9


async def test_iterative_does_not_search_a_repeated_query_again() -> None:
    retriever = ListRetriever(PASSAGES)
    sink = MemoryTraceSink()
    assess = {"confidence": 0.3, "reasoning": "", "missing_info": "the director", "next_query": "who directed Jaws"}
    model = ChatModel({"assess": [assess, {**assess, "confidence": 0.5, "next_query": "Who directed  Jaws?"}]})
    with server_for("vllm", model) as server:
        async with LLMClient(settings_for(server)) as llm:
            answer = await Iterative(llm, retriever, sink).answer(
                asking("When was the director of Jaws born?", AskOptions())
            )
    doc = sink.documents[answer.trace.trace_id]
    assert retriever.queries == ["When was the director of Jaws born?", "who directed Jaws"]
    assessed = [(s["decision"], s["decided_by"]) for s in doc["steps"] if s["kind"] == "assess"]
    assert assessed == [("retrieve", "assessor"), ("repeat", "repeat")]


async def test_dualrag_does_not_search_repeated_keywords_again() -> None:
    again = entities(("Jaws", ["Jaws director", "jaws DIRECTOR?"]))
    model = ChatModel(
        {
            "reasoner": [reason("Find who directed Jaws.", True)] * 3,
            "identifier": [entities(("Jaws", ["Jaws director"])), again],
        },
        summaries={"Jaws": "Jaws (1975) was directed by Steven Spielberg."},
        answer="1946",
    )
    retriever = ListRetriever(PASSAGES)
    sink = MemoryTraceSink()
    with server_for("vllm", model) as server:
        async with LLMClient(settings_for(server)) as llm:
            answer = await DualRAG(llm, retriever, sink).answer(
                asking("When was the director of Jaws born?", AskOptions())
            )
    answer.raise_for_error()
    doc = sink.documents[answer.trace.trace_id]
    assert retriever.queries == ["Jaws director"]
    repeats = [s for s in doc["steps"] if s["decision"] == "repeat"]
    assert [(s["kind"], s["queries"], s["retrievals"]) for s in repeats] == [
        ("retrieve", ["Jaws director", "jaws DIRECTOR?"], 0)
    ]
    assert (doc["steps"][-1]["kind"], doc["steps"][-1]["decided_by"]) == ("answer", "repeat")


@pytest.mark.parametrize("flavour", ["vllm", "llamacpp-stream"])
async def test_questions_take_turns_on_a_one_slot_server(flavour: str) -> None:
    """On llama.cpp (one slot) one question's calls follow one another, so each prompt extends the
    last one in the slot's cache; vLLM batches and caches prefixes itself, so questions interleave."""
    model = DeepRAGModel([PlanStep("Who directed Jaws?", "search", "Steven Spielberg")], "1946")
    questions = ["When was the director of Jaws born?", "Who was born first, Spielberg or Donner?"]
    with server_for(flavour, model, delay_first=4, delay_s=0.3) as server:
        async with LLMClient(settings_for(server, flavour)) as llm:
            strategy = DeepRAG(llm, ListRetriever(PASSAGES), MemoryTraceSink(), stop_fallback=fallback_for(flavour))
            answers = await asyncio.gather(*(strategy.answer(asking(q, AskOptions())) for q in questions))
    for answer in answers:
        answer.raise_for_error()
    owners = [0 if questions[0] in prompt else 1 for prompt in server.prompts]
    if flavour == "vllm":
        assert server.max_in_flight == 2
    else:
        assert server.max_in_flight == 1
        assert owners == sorted(owners) or owners == sorted(owners, reverse=True), owners


@pytest.mark.parametrize("flavour", ["vllm", "llamacpp-stream"])
async def test_each_prompt_of_a_question_extends_the_previous_one(flavour: str) -> None:
    """Prefix caching (vLLM) and the one slot of llama.cpp reuse a question's previous prompt only if
    nothing before the transcript varies between calls: every prompt extends the one before."""
    model = DeepRAGModel(
        [
            PlanStep("Who directed Jaws?", "search", "Steven Spielberg"),
            PlanStep("When was Steven Spielberg born?", "intermediate", "1946"),
        ],
        "1946",
    )
    with server_for(flavour, model) as server:
        async with LLMClient(settings_for(server, flavour)) as llm:
            strategy = DeepRAG(llm, ListRetriever(PASSAGES), MemoryTraceSink(), stop_fallback=fallback_for(flavour))
            answer = await strategy.answer(
                asking("When was the director of Jaws born?", AskOptions(demonstrations="Q: x"))
            )
    answer.raise_for_error()
    prompts = server.prompts
    assert len(prompts) == 6  # three generate steps, two intermediate answers, the final answer
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(prompts))
    if flavour == "vllm":  # the turn before the transcript is the same in every request
        assert len({str(r["messages"][:-1]) for r in server.requests}) == 1


async def test_question_turns_follow_the_servers_slot_count() -> None:
    """A llama.cpp server with two slots (``/props``) takes two questions at once."""
    model = DeepRAGModel([PlanStep("Who directed Jaws?", "search", "Steven Spielberg")], "1946")
    questions = ["When was the director of Jaws born?", "Who was born first, Spielberg or Donner?", "Who is Donner?"]
    with server_for("llamacpp-stream", model, slots=2, work_s=0.05) as server:
        async with LLMClient(settings_for(server, "llamacpp-stream")) as llm:
            strategy = DeepRAG(llm, ListRetriever(PASSAGES), MemoryTraceSink())
            answers = await asyncio.gather(*(strategy.answer(asking(q, AskOptions())) for q in questions))
    for answer in answers:
        answer.raise_for_error()
    running = set()
    most = 0
    for prompt in server.prompts:  # which questions had started and not yet finished, request by request
        running.add(next(q for q in questions if q in prompt))
        most = max(most, len(running))
        if prompt.endswith("So the final answer is:"):
            running.discard(next(q for q in questions if q in prompt))
    assert most == 2
