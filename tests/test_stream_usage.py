"""tokens_in of streamed generate steps: a stream closed at its marker carries no usage, so the client
has the server that served it count the prompt (llama-cpp-python ``/extras/tokenize/count``,
llama.cpp ``/tokenize``); a server that can count neither way leaves 0 and says so once."""

from __future__ import annotations

import logging

import pytest

from hopsearch.service.llm import LLMClient, complete_until
from hopsearch.service.strategies import AskOptions, DeepRAG
from hopsearch.service.strategies.deeprag import STOPS
from hopsearch.service.traces.recorder import MemoryTraceSink
from tests.llm_fixtures import PASSAGES, DeepRAGModel, ListRetriever, PlanStep, settings_for
from tests.scopes import asking
from tests.scripted_llm import ScriptedLLM, ScriptRequest, tokens

PROMPT = "Question: When was the director of Jaws born?"
MODEL = DeepRAGModel([PlanStep("Who directed Jaws?", "search", "Steven Spielberg")], final="1946")


def writes(text: str) -> object:
    def script(request: ScriptRequest) -> str:
        return text

    return script


@pytest.mark.parametrize("tokenizer", ["llama-cpp-python", "llama.cpp"])
async def test_a_streamed_step_counts_its_prompt_like_a_plain_request(tokenizer: str) -> None:
    generated = "\nFollow up: Who directed Jaws?\nLet's search the question in Wikipedia. more"
    with ScriptedLLM(writes(generated), report_stop_reason=False, tokenizer=tokenizer) as server:  # type: ignore[arg-type]
        async with LLMClient(settings_for(server, "llamacpp-stream")) as llm:
            streamed = await complete_until(llm, PROMPT, STOPS, fallback="stream")
            plain = await complete_until(llm, PROMPT, STOPS, fallback="cut")  # not streamed: usage
    assert streamed.stop_method == "fallback-stream" and plain.stop_method == "fallback-cut"
    assert streamed.usage.prompt_tokens == plain.usage.prompt_tokens == tokens(PROMPT) > 0
    assert server.counted == [PROMPT]  # only the streamed request needed counting
    assert streamed.calls == 1 and len(server.requests) == 2  # counting is not a generation request


async def test_deeprag_trace_shows_the_prompt_tokens_of_streamed_steps() -> None:
    sink = MemoryTraceSink()
    with ScriptedLLM(MODEL, report_stop_reason=False) as server:
        async with LLMClient(settings_for(server, "llamacpp-stream")) as llm:
            strategy = DeepRAG(llm, ListRetriever(PASSAGES), sink)
            answer = await strategy.answer(asking("When was the director of Jaws born?", AskOptions()))
    answer.raise_for_error()
    steps = [s for s in sink.documents[answer.trace.trace_id]["steps"] if s["llm_calls"]]
    streamed = [r for r in server.requests if r.get("stream")]
    generate = [s for s in steps if s["kind"] == "generate"]
    assert len(generate) == len(streamed) == 2  # the follow-up, then the final marker
    assert [s["tokens_in"] for s in generate] == [tokens(r["_prompt"]) for r in streamed]
    assert all(s["tokens_in"] > 0 for s in steps)
    assert server.counted == [r["_prompt"] for r in streamed]
    totals = sink.documents[answer.trace.trace_id]["totals"]
    assert totals["tokens_in"] == sum(s["tokens_in"] for s in steps)


async def test_a_server_that_cannot_count_leaves_zero_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    generated = "\nSo the final answer is: 1946"
    with ScriptedLLM(writes(generated), report_stop_reason=False, tokenizer=None) as server:
        async with LLMClient(settings_for(server, "llamacpp-stream")) as llm:
            with caplog.at_level(logging.WARNING, logger="hopsearch.service.llm.tokencount"):
                first = await complete_until(llm, PROMPT, STOPS)
                second = await complete_until(llm, PROMPT + " again", STOPS)
    assert (first.stop, second.stop) == (STOPS[2], STOPS[2])
    assert first.usage.prompt_tokens == second.usage.prompt_tokens == 0
    warnings = [r for r in caplog.records if r.name == "hopsearch.service.llm.tokencount"]
    assert len(warnings) == 1 and "tokens_in 0" in warnings[0].getMessage()
