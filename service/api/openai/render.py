"""OpenAI's response shapes of an answer (pure functions): the completion, the stream's chunks, the steps
as reasoning text and the answer's numbered references.

- ``content``: the answer, then ``References:`` with one line per citation, ``[n] <title> — <path or URL>``
  (the relative path or URL as ``_retrieve``'s hits show it; neither where the hit shows none).
- ``reasoning_content``: one line per step (kind, decision, queries, passages found, a short output), the
  field several chat front ends show as the model's thinking; streamed as the steps happen.
- ``hopsearch``: the extension field — ``trace_id``, ``strategy``, ``index``, ``citations``, ``passages``
  (``_retrieve``-shaped hits of the cited passages), ``totals``, ``ignored`` fields and ``notes``.
- ``usage``: the tokens of every LLM call of the run (``prompt_tokens``: in, ``completion_tokens``: out).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hopsearch.service.traces.recorder import Step

_OUTPUT_CHARS = 160


def step_line(step: Step, index: int) -> str:
    """One step as a line of reasoning text."""
    line = f"{index + 1}. {step.kind}"
    if step.decision:
        line += f" → {step.decision}"
    if step.queries:
        line += ": " + " | ".join(f"“{q}”" for q in step.queries)
    if step.kind == "retrieve" or step.hit_ids:
        line += f" ({len(step.hit_ids)} passages)"
    output = " ".join(step.output.split())
    if output and step.kind != "retrieve":
        line += " — " + (output[:_OUTPUT_CHARS] + "…" if len(output) > _OUTPUT_CHARS else output)
    if step.error:
        line += f" [error: {step.error[:_OUTPUT_CHARS]}]"
    return line + "\n"


def location(source: Mapping[str, Any], url_field: str | None) -> str:
    """Where a shown passage lies: its relative path, else its URL (as the hit shows them)."""
    for name in ("path", url_field or "url"):
        value = source.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def references(cited: Sequence[Mapping[str, Any]]) -> str:
    """Return the numbered references block of the content (empty without citations)."""
    lines = []
    for number, cite in enumerate(cited, start=1):
        where = cite.get("location") or ""
        lines.append(f"[{number}] {cite.get('title') or cite.get('_id')}" + (f" — {where}" if where else ""))
    return "\n\nReferences:\n" + "\n".join(lines) if lines else ""


def content_of(answer: str | None, cited: Sequence[Mapping[str, Any]]) -> str:
    return (answer or "") + references(cited)


def usage_of(totals: Mapping[str, Any]) -> dict[str, int]:
    tokens_in, tokens_out = int(totals.get("tokens_in", 0)), int(totals.get("tokens_out", 0))
    return {"prompt_tokens": tokens_in, "completion_tokens": tokens_out, "total_tokens": tokens_in + tokens_out}


def completion(
    ident: str, created: int, model: str, message: Mapping[str, Any], usage: Mapping[str, int], extension: Any
) -> dict[str, Any]:
    """Return a ``chat.completion`` object."""
    return {
        "id": ident,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": dict(message), "finish_reason": "stop", "logprobs": None}],
        "usage": dict(usage),
        "hopsearch": extension,
    }


def chunk(
    ident: str, created: int, model: str, delta: Mapping[str, Any] | None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    """Return a ``chat.completion.chunk`` (no choices where ``delta`` is None: the usage chunk)."""
    choices = [] if delta is None else [{"index": 0, "delta": dict(delta), "finish_reason": finish, "logprobs": None}]
    head = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model}
    return head | {"choices": choices} | extra
