"""A streamed completion read until a stop string: the client-side cut, in one request.

Servers that do not say which stop string ended a completion (llama.cpp) are asked WITHOUT the stop
strings and with ``stream: true``; :func:`read_until` reads the server-sent events, cuts the text at
the earliest stop string as soon as one is complete and closes the stream there, which ends the
generation on the server (llama-cpp-python checks for a disconnected client after every token). The
model writes the marker's tokens either way — a server cuts at a stop string only after generating
it — so this costs no more tokens than a request with stop strings, and no second request.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx


def cut_at_first(text: str, stops: Sequence[str]) -> tuple[str, str | None]:
    """Cut ``text`` at the earliest stop string (the longest one where several start there)."""
    best: tuple[int, int, str] | None = None
    for stop in stops:
        position = text.find(stop) if stop else -1
        if position >= 0 and (best is None or (position, -len(stop)) < (best[0], best[1])):
            best = (position, -len(stop), stop)
    if best is None:
        return text, None
    return text[: best[0]], best[2]


@dataclass(frozen=True, slots=True)
class Streamed:
    """What a streamed completion came to: the text cut at ``stop`` (None: no stop string seen)."""

    text: str
    stop: str | None
    finish_reason: str | None
    usage: dict[str, Any]
    model: str | None
    chunks: int
    #: False where the server ignored ``stream: true`` and sent the whole completion.
    streamed: bool = True

    @property
    def complete(self) -> bool:
        """Whether the stream ended as a completion ends: at a stop string or with a finish reason.
        A stream that stops without either was cut by the server (llama-cpp-python ends a stream with
        ``[DONE]`` as soon as another request waits, unless started with ``--interrupt_requests
        false``): its text is not the model's whole reply."""
        return not self.streamed or self.stop is not None or self.finish_reason is not None

    def to_body(self) -> dict[str, Any]:
        """Return the non-streaming response shape, so the client reads both the same way."""
        usage = dict(self.usage)
        usage.setdefault("completion_tokens", self.chunks)
        choice = {"index": 0, "text": self.text, "finish_reason": "stop" if self.stop else self.finish_reason}
        return {"choices": [choice], "usage": usage, "model": self.model, "_streamed_stop": self.stop}


def _piece(choice: dict[str, Any]) -> str:
    if "text" in choice:
        return str(choice.get("text") or "")
    delta = choice.get("delta") or {}
    return str(delta.get("content") or "") if isinstance(delta, dict) else ""


def from_body(data: dict[str, Any], stops: Sequence[str]) -> Streamed:
    """Cut the whole completion of a server that ignored ``stream: true`` the same way."""
    choice = (data.get("choices") or [{}])[0]
    text = str(choice.get("text") or "") if "text" in choice else _piece({"delta": choice.get("message")})
    cut, found = cut_at_first(text, stops)
    finish = "stop" if found is not None else choice.get("finish_reason")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return Streamed(cut, found, finish, dict(usage or {}), data.get("model"), 1, streamed=False)


async def read_until(response: httpx.Response, stops: Sequence[str]) -> Streamed:
    """Read ``data:`` events until ``[DONE]``, the end of the body, or a complete stop string.

    Raises ``ValueError`` for an event (or a whole body) that is not a JSON object."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        data = json.loads(await response.aread())
        if not isinstance(data, dict):
            raise ValueError("the response is not a JSON object")
        return from_body(data, stops)
    text = ""
    finish: str | None = None
    usage: dict[str, Any] = {}
    model: str | None = None
    chunks = 0
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            break
        chunk = json.loads(payload)
        if not isinstance(chunk, dict):
            raise ValueError("a stream event is not a JSON object")
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        model = str(chunk.get("model") or model or "") or None
        for choice in chunk.get("choices") or []:
            piece = _piece(choice)
            if piece:
                text += piece
                chunks += 1
            finish = choice.get("finish_reason") or finish
        if stops:
            cut, found = cut_at_first(text, stops)
            if found is not None:
                return Streamed(cut, found, "stop", usage, model, chunks)
    return Streamed(text, None, finish, usage, model, chunks)
