"""Constrained generation per server kind: the request fields that restrict a completion to a list
of strings, a regular expression or a grammar; and, where a server has none of these, the
likelihood of each candidate read from its logprobs.

- vLLM: guided decoding. Releases before 0.10.2 read ``guided_choice`` / ``guided_regex``; 0.10.2
  added ``structured_outputs: {"choice": …, "regex": …}`` and 0.12 removed the ``guided_*`` fields.
  vLLM ignores request fields it does not know (it only logs them), so a field of the wrong
  release would silently leave the output unconstrained: the release is read once from vLLM's
  ``GET /version``. Where that fails, both forms are sent (each release ignores the other form).
- llama.cpp (llama-cpp-python's server, ``hopsearch llm up``): a GBNF ``grammar`` on
  ``/v1/completions`` and ``/v1/chat/completions``.
- Any other OpenAI-compatible server: no constraint fields; :func:`score_candidates` scores each
  candidate as a continuation of the prompt (``echo`` + ``logprobs``, nothing generated), where the
  server gives prompt logprobs.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hopsearch.service.errors import LLMError, LLMTimeout
from hopsearch.service.llm.client import LLMClient
from hopsearch.service.llm.types import Attempt, Completion, Usage

log = logging.getLogger(__name__)

#: How a final answer was constrained (recorded in the trace).
Method = Literal["structured_outputs", "guided", "guided+structured_outputs", "grammar", "logprobs", "none"]

#: The first vLLM release that reads ``structured_outputs`` and the first that no longer reads ``guided_*``.
STRUCTURED_SINCE = (0, 10, 2)
GUIDED_UNTIL = (0, 12, 0)
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True, slots=True)
class Guide:
    """One constraint in the forms servers take: a list of strings (``choice``) or a regular
    expression (``regex``) for vLLM, and the equivalent GBNF ``grammar`` for llama.cpp."""

    grammar: str
    choice: tuple[str, ...] = ()
    regex: str | None = None


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``"0.10.2"`` / ``"0.11.0rc1"`` / ``"0.6.6.post1"`` → (0, 10, 2) …; None when unreadable."""
    found = _VERSION.search(text)
    if not found:
        return None
    return int(found[1]), int(found[2]), int(found[3] or 0)


def vllm_fields(guide: Guide, version: tuple[int, int, int] | None) -> tuple[dict[str, Any], Method]:
    """Return the guided-decoding fields for a vLLM server of ``version`` (None: unknown, send both forms)."""
    new: dict[str, Any] = {"choice": list(guide.choice)} if guide.choice else {"regex": guide.regex}
    old: dict[str, Any] = {"guided_choice": list(guide.choice)} if guide.choice else {"guided_regex": guide.regex}
    if version is None:
        return {**old, "structured_outputs": new}, "guided+structured_outputs"
    if version >= STRUCTURED_SINCE:
        return {"structured_outputs": new}, "structured_outputs"
    return old, "guided"


async def guided_fields(client: LLMClient, guide: Guide) -> tuple[dict[str, Any], Method]:
    """Return the request fields that constrain a completion to ``guide`` on the client's server kind; ({}, "none")
    where the server has no such fields (plain OpenAI-compatible)."""
    engine = await client.engine()
    if engine == "vllm":
        release = await client.server_version()
        return vllm_fields(guide, parse_version(release) if release else None)
    if engine == "llamacpp":
        return {"grammar": guide.grammar}, "grammar"
    return {}, "none"


#: The methods of vLLM's guided decoding: a release that does not know the field ignores it (HTTP 200,
#: unconstrained output; vLLM 0.32 only logs it), so their outputs are checked (:func:`check_obeyed`).
VLLM_METHODS = frozenset({"structured_outputs", "guided", "guided+structured_outputs"})


def obeys(text: str, guide: Guide) -> bool:
    """Whether ``text`` is in the language of ``guide`` (one of its strings, or a full match of its regex)."""
    if guide.choice:
        return text in guide.choice
    return guide.regex is not None and re.fullmatch(guide.regex, text) is not None


def check_obeyed(done: Completion, guide: Guide, method: Method, release: str | None) -> Completion:
    """``done`` where vLLM honoured the constraint; an :class:`LLMError` where its output is outside it —
    a release that ignores the field sent would otherwise change the answer silently. A generation a
    stop string or the token limit cut is not judged (it may end inside the language's strings)."""
    if method not in VLLM_METHODS or done.finish_reason != "stop" or done.stop is not None:
        return done
    if obeys(done.text, guide):
        return done
    raise LLMError(
        f"vLLM {release or '(release unknown)'} answered {done.text[:80]!r}, outside the {method} constraint "
        f"sent ({'choice' if guide.choice else 'regex'}): it ignored the field (vLLM ignores request fields it does "
        "not know). hopsearch sends `structured_outputs` from vLLM 0.10.2 on and `guided_*` before 0.12.",
        details={"attempts": [attempt.to_dict() for attempt in done.attempts]},
    )


async def score_candidates(
    client: LLMClient, prompt: str, candidates: Sequence[str], *, deadline: float | None = None
) -> tuple[Completion, dict[str, float]] | None:
    """Return the candidate most likely as the continuation of ``prompt`` (as a completion whose text is that candidate)
    and every candidate's log-likelihood. The log-likelihood is the server's prompt logprobs of ``prompt + " " +
    candidate`` (``echo: true``, ``logprobs``; one token generated and ignored), summed over the candidate's tokens.
    None when the server gives no prompt logprobs (a refusal, no ``logprobs``, no offsets): the caller then generates
    unconstrained."""
    scores: dict[str, float] = {}
    attempts: list[Attempt] = []
    usage = Usage()
    started = time.monotonic()
    for candidate in candidates:
        text = f"{prompt} {candidate}"
        body = {"model": client.model, "prompt": text, "max_tokens": 1, "temperature": 0.0, "echo": True, "logprobs": 1}
        try:
            data, tried = await client.request("POST", "/completions", body, deadline=deadline)
        except LLMTimeout:
            raise
        except LLMError as exc:
            log.info("no prompt logprobs from the server (%s): the answer is generated unconstrained", exc)
            return None
        attempts += tried
        reported = data.get("usage")
        counted: Mapping[str, Any] = reported if isinstance(reported, Mapping) else {}
        usage = usage + Usage(int(counted.get("prompt_tokens") or 0), int(counted.get("completion_tokens") or 0))
        choices = data.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else {}
        score = continuation_logprob(choice, len(prompt), len(text))
        if score is None:
            return None
        scores[candidate] = score
    best = max(candidates, key=lambda c: scores[c])
    done = Completion.decided(
        best, usage=usage, attempts=tuple(attempts), started=started, model=client.model, calls=len(candidates)
    )
    return done, scores


def continuation_logprob(choice: Mapping[str, Any], start: int, end: int) -> float | None:
    """Return the summed logprobs of the echoed tokens that start in ``[start, end)`` of the prompt; None when the
    choice carries no token logprobs with offsets."""
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, Mapping):
        return None
    values, offsets = logprobs.get("token_logprobs"), logprobs.get("text_offset")
    if not isinstance(values, list) or not isinstance(offsets, list) or len(values) != len(offsets):
        return None
    picked = [
        float(value)
        for value, at in zip(values, offsets, strict=True)
        if isinstance(at, int) and start <= at < end and isinstance(value, (int, float))
    ]
    return sum(picked) if picked else None
