"""Which stop string ended a completion — on every kind of server.

vLLM names it in the non-standard ``stop_reason`` field of a choice. llama.cpp's OpenAI endpoint and
OpenAI do not, and ``finish_reason == "stop"`` alone cannot tell several stop strings apart (nor a
stop string from end-of-sequence). Three fallbacks, chosen by the caller's ``fallback`` (the
``llm_stop_fallback`` setting, passed in by the strategy registry):

``stream``    (default) one streamed request without the stop strings, read until the first
              marker, cut there client-side and closed (:mod:`~hopsearch.service.llm.sse`): exact,
              one request, and the server stops generating when the stream closes.
``followup``  ask with the stop strings, then continue the prompt plus the text with a few tokens and
              no stop strings; the marker the model writes next is taken for the one that stopped
              it. One extra, short request. NOT exact on llama-cpp-python: its server applies
              ``repeat_penalty`` 1.1 by default to the tokens generated within a request, and the
              follow-up starts with an empty history, so greedy decoding may write something else
              there (measured on 2Wiki with Gemma 3 270M: the model wrote ``\nLet's search`` because
              ``Follow`` was penalised; the follow-up, unpenalised, wrote ``\nFollow up: …`` and the
              step was taken for "no marker" — see ``benchmarks/bench_answer_speed.py``). Kept for
              servers without streaming.
``cut``       ask without the stop strings and cut the text at the earliest marker client-side.
              Exact, but the model keeps generating up to ``max_tokens``.

A single stop string needs no fallback (``fallback-single``). Every result says how its stop was
determined (:data:`~hopsearch.service.llm.types.StopMethod`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from hopsearch.service.llm.client import LLMClient, Message
from hopsearch.service.llm.sse import cut_at_first
from hopsearch.service.llm.types import Completion, StopFallback

#: Tokens a follow-up may generate: enough for the longest DeepRAG marker.
FOLLOWUP_TOKENS = 12
#: A truncated continuation must show at least this many characters of a marker to name it.
_MIN_MARKER_PREFIX = 4

#: ``call(suffix, stops, max_tokens, stream_cut)``: generate after the prompt plus ``suffix``
#: (``stream_cut``: streamed, read until one of those strings; see ``LLMClient.complete``).
Call = Callable[[str, Sequence[str], int, Sequence[str]], Awaitable[Completion]]


def identify_marker(continuation: str, stops: Sequence[str]) -> str | None:
    """Return the stop string that ``continuation`` starts with (leading whitespace ignored), or None.

    A continuation cut short by the token limit may show only a prefix of a marker; it names the marker when at least
    four characters match and exactly one marker fits.
    """
    text = continuation.lstrip()
    if not text:
        return None
    full = [stop for stop in stops if stop.strip() and text.startswith(stop.lstrip())]
    if full:
        return max(full, key=len)
    partial = [
        stop
        for stop in stops
        if len(text) >= _MIN_MARKER_PREFIX and stop.lstrip().startswith(text) and len(text) < len(stop.lstrip())
    ]
    return partial[0] if len(partial) == 1 else None


async def generate_until(
    client: LLMClient, call: Call, stops: Sequence[str], *, max_tokens: int, fallback: StopFallback = "stream"
) -> Completion:
    """Generate until one of ``stops`` and say which one ended it (``stop``, ``stop_method``)."""
    if not stops:
        return await call("", (), max_tokens, ())
    engine = await client.engine()
    if engine != "vllm" and fallback == "stream" and len(stops) > 1:
        return await call("", (), max_tokens, stops)
    if engine != "vllm" and fallback == "cut":
        raw = await call("", (), max_tokens, ())
        text, found = cut_at_first(raw.text, stops)
        finish = "stop" if found is not None else raw.finish_reason
        return replace(raw, text=text, stop=found, finish_reason=finish, stop_method="fallback-cut")
    first = await call("", stops, max_tokens, ())
    if first.stop_method == "stop_reason" or first.finish_reason != "stop":
        return first
    if len(stops) == 1:
        return replace(first, stop=stops[0], stop_method="fallback-single")
    follow = await call(first.text, (), FOLLOWUP_TOKENS, ())
    return replace(
        first,
        stop=identify_marker(follow.text, stops),
        stop_method="fallback-followup",
        usage=first.usage + follow.usage,
        attempts=first.attempts + follow.attempts,
        latency_ms=round(first.latency_ms + follow.latency_ms, 3),
        calls=first.calls + follow.calls,
    )


async def complete_until(
    client: LLMClient,
    prompt: str,
    stops: Sequence[str],
    *,
    max_tokens: int = 128,
    deadline: float | None = None,
    fallback: StopFallback = "stream",
    extra: Mapping[str, Any] | None = None,
) -> Completion:
    """Plain completion of ``prompt`` until a stop string (any server); ``extra``: more request fields
    (a constraint, :mod:`~hopsearch.service.llm.guided`) for the generation, not for a stop follow-up."""

    async def call(suffix: str, stop: Sequence[str], tokens: int, cut: Sequence[str]) -> Completion:
        fields = extra if not suffix else None
        return await client.complete(
            prompt + suffix, stop=stop, max_tokens=tokens, deadline=deadline, stream_cut=cut, extra=fields
        )

    return await generate_until(client, call, stops, max_tokens=max_tokens, fallback=fallback)


async def continue_until(
    client: LLMClient,
    messages: Sequence[Message],
    stops: Sequence[str],
    *,
    max_tokens: int = 128,
    deadline: float | None = None,
    fallback: StopFallback = "stream",
    extra: Mapping[str, Any] | None = None,
) -> Completion:
    """Continue the final (assistant) message inside the chat template (vLLM
    ``continue_final_message``) until a stop string; ``extra`` as in :func:`complete_until`."""
    *head, last = messages

    async def call(suffix: str, stop: Sequence[str], tokens: int, cut: Sequence[str]) -> Completion:
        turn = {"role": last["role"], "content": last["content"] + suffix}
        return await client.chat(
            [*head, turn],
            stop=stop,
            max_tokens=tokens,
            continue_final_message=True,
            deadline=deadline,
            stream_cut=cut,
            extra=extra if not suffix else None,
        )

    return await generate_until(client, call, stops, max_tokens=max_tokens, fallback=fallback)
