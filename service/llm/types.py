"""Plain data of the LLM client: usage, attempts, completions, JSON replies."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

#: The kind of server behind the base URLs. ``auto`` is resolved by probing ``/v1/models``.
Engine = Literal["vllm", "llamacpp", "openai"]

#: How the stop string that ended a completion was determined:
#: ``stop_reason``        vLLM's non-standard ``stop_reason`` field named it;
#: ``fallback-followup``  the server does not report it; a short follow-up completion read the marker;
#: ``fallback-stream``    the server does not report it; a streamed completion without the stop
#:                        strings was read until the first marker, cut there and closed;
#: ``fallback-cut``       the server does not report it; the completion ran without the stop strings
#:                        and was cut client-side at the first marker;
#: ``fallback-single``    only one stop string was asked for and ``finish_reason`` was ``stop``
#:                        (indistinguishable from end-of-sequence on such servers);
#: ``finish_reason``      no stop string ended it (``length``, end-of-sequence, or no stops asked).
StopMethod = Literal[
    "stop_reason", "fallback-stream", "fallback-followup", "fallback-cut", "fallback-single", "finish_reason"
]

#: Where the server does not report ``stop_reason``: stream and stop reading at the first marker (one
#: request), read the marker with a short follow-up completion, or generate without the stop strings
#: and cut client-side (``settings.llm_stop_fallback``; see :mod:`~hopsearch.service.llm.stops`).
StopFallback = Literal["stream", "followup", "cut"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as the server reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One HTTP request of a call. ``status`` is None when no response came (connect error, timeout)."""

    url: str
    status: int | None
    latency_ms: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "status": self.status, "latency_ms": self.latency_ms, "error": self.error}


@dataclass(frozen=True, slots=True)
class Completion:
    """The result of one logical call (possibly several HTTP requests: retries, a stop follow-up).

    ``calls`` counts the requests that produced an answer (1, or 2 with a stop follow-up);
    ``attempts`` lists every request, failed ones included, in order.
    """

    text: str
    finish_reason: str | None
    stop: str | None
    stop_method: StopMethod
    usage: Usage
    attempts: tuple[Attempt, ...]
    latency_ms: float
    model: str
    calls: int = 1

    @property
    def retries(self) -> int:
        return sum(1 for attempt in self.attempts if not attempt.ok)

    @classmethod
    def decided(
        cls, text: str, *, usage: Usage, attempts: tuple[Attempt, ...], started: float, model: str, calls: int
    ) -> Completion:
        """Build an answer hopsearch decided from several requests (candidates scored, two sub-answers compared). It
        ends as a plain stop; ``started`` is the ``time.monotonic()`` of the first request."""
        latency_ms = round((time.monotonic() - started) * 1000, 3)
        return cls(text, "stop", None, "finish_reason", usage, attempts, latency_ms, model, calls)


@dataclass(frozen=True, slots=True)
class JsonReply:
    """A parsed JSON object from the model and the completions it took (two after a repair)."""

    value: Mapping[str, Any]
    completions: tuple[Completion, ...] = field(default_factory=tuple)
    repaired: bool = False
    constrained: bool = False

    @property
    def usage(self) -> Usage:
        total = Usage()
        for completion in self.completions:
            total = total + completion.usage
        return total
