"""The LLM client over real HTTP (the scripted server): retries, deadline, spreading, usage, stops."""

from __future__ import annotations

import asyncio
import random
import socket
import time

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopsearch.service.errors import LLMError, LLMTimeout, LLMUnavailable
from hopsearch.service.llm import LLMClient, backoff_delay, complete_until, cut_at_first, identify_marker
from hopsearch.service.strategies.deeprag import STOPS
from tests.llm_fixtures import settings_for
from tests.scripted_llm import ScriptedLLM, ScriptRequest


def echo(request: ScriptRequest) -> str:
    if request.prompt.endswith("three"):  # a stop follow-up: the model writes the marker again
        return "\nIntermediate answer: four"
    return " one two three\nIntermediate answer: four"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_completion_reports_usage_and_stop_reason() -> None:
    with ScriptedLLM(echo) as server:
        async with LLMClient(settings_for(server)) as llm:
            done = await llm.complete("a b c", stop=list(STOPS), max_tokens=20)
    assert done.text == " one two three"
    assert (done.stop, done.stop_method, done.finish_reason) == (
        "\nIntermediate answer:",
        "stop_reason",
        "stop",
    )
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (3, 3)
    assert len(done.attempts) == 1 and done.attempts[0].status == 200 and done.retries == 0


@pytest.mark.parametrize("fallback", ["stream", "followup", "cut"])
async def test_servers_without_stop_reason_still_tell_the_stops_apart(fallback: str) -> None:
    with ScriptedLLM(echo, report_stop_reason=False) as server:
        async with LLMClient(settings_for(server, llm_stop_fallback=fallback)) as llm:
            done = await complete_until(llm, "a b c", STOPS, max_tokens=20, fallback=fallback)
            assert await llm.engine() == "llamacpp"
    assert done.text == " one two three" and done.stop == "\nIntermediate answer:"
    assert done.stop_method == f"fallback-{fallback}"
    if fallback == "followup":  # one short extra request, its usage summed in
        assert done.calls == 2 and len(server.requests) == 2
        assert server.requests[1]["prompt"] == "a b c one two three" and "stop" not in server.requests[1]
        assert done.usage.completion_tokens == 3 + 3
    else:  # one request without stop strings, cut client-side
        assert done.calls == 1 and "stop" not in server.requests[0]


async def test_length_and_end_of_sequence_name_no_stop() -> None:
    with ScriptedLLM(lambda r: " a b c d e f") as server:
        async with LLMClient(settings_for(server)) as llm:
            cut = await llm.complete("x", stop=list(STOPS), max_tokens=3)
            eos = await llm.complete("x", stop=list(STOPS), max_tokens=30)
    assert (cut.text, cut.finish_reason, cut.stop) == (" a b c", "length", None)
    assert (eos.finish_reason, eos.stop, eos.stop_method) == ("stop", None, "stop_reason")


async def test_exhausted_retries_raise_unavailable_with_every_attempt() -> None:
    with ScriptedLLM(echo, fail_first=10, fail_status=503) as server:
        async with LLMClient(settings_for(server, llm_retries=2)) as llm:
            with pytest.raises(LLMUnavailable) as caught:
                await llm.complete("x")
    assert [a["status"] for a in caught.value.details["attempts"]] == [503, 503, 503]
    assert server.generation_requests == 3


async def test_429_is_retried_and_400_is_not() -> None:
    with ScriptedLLM(echo, fail_first=1, fail_status=429) as server:
        async with LLMClient(settings_for(server)) as llm:
            done = await llm.complete("x")
    assert [a.status for a in done.attempts] == [429, 200]
    with ScriptedLLM(echo, fail_first=1, fail_status=400) as server:
        async with LLMClient(settings_for(server)) as llm:
            with pytest.raises(LLMError) as caught:
                await llm.complete("x")
    assert type(caught.value) is LLMError and server.generation_requests == 1


async def test_connect_errors_fail_over_to_another_base_url() -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with ScriptedLLM(echo) as server:
        settings = settings_for(server, llm_base_url=[dead, server.base_url], llm_balance="round-robin")
        async with LLMClient(settings) as llm:
            results = [await llm.complete("x") for _ in range(4)]
    failed = [a for done in results for a in done.attempts if not a.ok]
    assert failed and all(a.url.startswith(dead) and "connect" in (a.error or "") for a in failed)
    assert all(done.attempts[-1].url.startswith(server.base_url) for done in results)


async def test_calls_are_spread_over_base_urls() -> None:
    servers = [ScriptedLLM(echo, delay_first=100, delay_s=0.05) for _ in range(2)]
    for server in servers:
        server.start()
    try:
        async with LLMClient(settings_for(servers, llm_max_concurrency=3)) as llm:
            await asyncio.gather(*(llm.complete(f"q{i}") for i in range(12)))
    finally:
        for server in servers:
            server.stop()
    counts = [server.generation_requests for server in servers]
    assert sum(counts) == 12 and min(counts) >= 4, counts


async def test_concurrency_is_bounded_by_the_semaphore() -> None:
    with ScriptedLLM(echo, delay_first=100, delay_s=0.1) as server:
        async with LLMClient(settings_for(server, llm_max_concurrency=3)) as llm:
            await asyncio.gather(*(llm.complete(f"q{i}") for i in range(10)))
    assert server.max_in_flight == 3


async def test_a_hanging_server_fails_by_the_deadline() -> None:
    with ScriptedLLM(echo, hang=True) as server:
        async with LLMClient(settings_for(server, llm_timeout=0.3, llm_retries=10)) as llm:
            started = time.monotonic()
            with pytest.raises(LLMTimeout) as caught:
                await llm.complete("x", deadline=llm.deadline_in(1.0))
            elapsed = time.monotonic() - started
    assert elapsed < 1.5
    assert all(a["status"] is None for a in caught.value.details["attempts"])


async def test_injectable_transport() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        choice = {"text": " ok", "finish_reason": "stop"}
        return httpx.Response(200, json={"choices": [choice], "usage": {"prompt_tokens": 1}})

    settings = settings_for([], llm_base_url=["http://llm.invalid/v1"], llm_engine="openai")
    async with LLMClient(settings, transport=httpx.MockTransport(handler)) as llm:
        done = await complete_until(llm, "x", STOPS)
    assert (done.text, done.stop, done.stop_method, done.calls) == (" ok", None, "fallback-stream", 1)


def test_identify_marker() -> None:
    assert identify_marker("\nLet's search the question", STOPS) == "\nLet's search"
    assert identify_marker(" \nSo the final answer is: 42", STOPS) == "\nSo the final answer is:"
    assert identify_marker("\nInterm", STOPS) == "\nIntermediate answer:"  # cut short by the token limit
    assert identify_marker("\nLethal Weapon", STOPS) is None
    assert identify_marker("\nLet's go", STOPS) is None
    assert identify_marker("", STOPS) is None


def test_cut_at_first() -> None:
    text = "\nFollow up: Lethal Weapon?\nIntermediate answer: x\nSo the final answer is: y"
    assert cut_at_first(text, STOPS) == ("\nFollow up: Lethal Weapon?", "\nIntermediate answer:")
    assert cut_at_first("no marker", STOPS) == ("no marker", None)


@given(st.integers(0, 20), st.floats(0.001, 2.0), st.floats(0.0, 10.0), st.integers(0, 2**32))
def test_backoff_is_bounded(retry: int, base: float, cap: float, seed: int) -> None:
    delay = backoff_delay(retry, base, cap, random.Random(seed))
    assert 0.0 <= delay <= min(cap, base * 2**retry)


async def test_credentials_in_a_base_url_become_basic_auth_and_never_reach_attempts() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 1:
            return httpx.Response(503, json={"error": "busy"})
        body = {
            "choices": [{"text": "ok", "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        }
        return httpx.Response(200, json=body)

    url = "http://alice:pa55word@llm.internal:8000/v1"
    settings = settings_for([], llm_base_url=[url], llm_engine="openai", llm_retries=2, llm_backoff_base=0.0)
    async with LLMClient(settings, transport=httpx.MockTransport(handler)) as llm:
        done = await llm.complete("hi", max_tokens=2)
    assert done.text == "ok" and done.retries == 1
    assert all(r.headers["authorization"].startswith("Basic ") for r in seen)
    assert all("pa55word" not in str(r.url) for r in seen)
    assert all("pa55word" not in a.url and "alice" not in a.url for a in done.attempts)
    assert done.attempts[0].url == "http://llm.internal:8000/v1/completions"


async def test_a_stream_cut_by_the_server_is_retried_not_read_as_no_marker() -> None:
    """llama-cpp-python ends a stream with ``[DONE]`` and no finish reason when another request waits
    (``interrupt_requests``): that is a failed attempt, not a completion without a marker."""
    with ScriptedLLM(echo, report_stop_reason=False, interrupt_first=1) as server:
        async with LLMClient(settings_for(server)) as llm:
            done = await complete_until(llm, "a b c", STOPS, max_tokens=20)
    assert (done.text, done.stop, done.stop_method) == (" one two three", "\nIntermediate answer:", "fallback-stream")
    assert [a.ok for a in done.attempts] == [False, True]
    assert "without a finish reason" in (done.attempts[0].error or "")
    assert "--interrupt_requests false" in (done.attempts[0].error or "")


async def test_streams_cut_on_every_attempt_end_in_a_clear_error() -> None:
    with ScriptedLLM(echo, report_stop_reason=False, interrupt_first=10) as server:
        async with LLMClient(settings_for(server, llm_retries=2)) as llm:
            with pytest.raises(LLMUnavailable) as caught:
                await complete_until(llm, "a b c", STOPS, max_tokens=20)
    assert "without a finish reason" in str(caught.value) and server.streamed == [1, 1, 1]
    assert len(caught.value.details["attempts"]) == 3
