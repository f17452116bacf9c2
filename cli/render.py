"""Human-readable output of an answer's trace document: the rich table of ``demo`` and ``traces show``
(:func:`print_answer`), and the plain lines of ``ask`` (:func:`answer_lines`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

EMPTY_ANSWER = "(empty: the model wrote nothing)"


def answer_text(text: str | None) -> str:
    """An answer as shown to a person: ``(none)`` when there is none (a failure), and an explicit note
    when the model wrote nothing, rather than a blank that reads like a display fault."""
    if text is None:
        return "(none)"
    return text if text.strip() else EMPTY_ANSWER


def _short(text: object, width: int = 70) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def steps_table(document: Mapping[str, Any]) -> Table:
    table = Table(title=f"trace {document.get('trace_id')} ({document.get('strategy')}, {document.get('model')})")
    for column in ("#", "kind", "decision", "how", "queries / output", "hits", "ms", "tok in/out"):
        table.add_column(column, overflow="fold")
    for step in document.get("steps", []):
        detail = "; ".join(step.get("queries") or []) or _short(step.get("output"))
        if not detail and step.get("kind") != "retrieve" and not step.get("error"):
            detail = "(empty output)"
        table.add_row(
            str(step.get("index", "")),
            str(step.get("kind", "")),
            str(step.get("decision") or ""),
            str(step.get("decided_by") or ""),
            detail,
            str(len(step.get("hit_ids") or [])) if step.get("kind") == "retrieve" else "",
            f"{float(step.get('latency_ms') or 0):.0f}",
            f"{step.get('tokens_in', 0)}/{step.get('tokens_out', 0)}",
        )
    return table


def print_answer(console: Console, document: Mapping[str, Any]) -> None:
    """The step table, the answer (or the error), the citations and the totals."""
    console.print(steps_table(document))
    error = document.get("error")
    if error:
        console.print(f"[red]error:[/] {error.get('type')}: {error.get('message') or error.get('reason')}")
    console.print(f"[bold]answer:[/] {answer_text(document.get('answer'))}")
    for number, citation in enumerate(document.get("citations") or [], start=1):
        console.print(f"  [{number}] {citation.get('title')} ({citation.get('id')})")
    totals = document.get("totals") or {}
    decisions = [s.get("decision") for s in document.get("steps", []) if s.get("decision")]
    console.print(
        f"decisions: {', '.join(decisions) or '-'} | retrievals {totals.get('retrievals')} | "
        f"LLM calls {totals.get('llm_calls')} | tokens {totals.get('tokens_in')}/{totals.get('tokens_out')} | "
        f"{float(totals.get('wall_ms') or 0) / 1000:.1f} s"
    )


def step_line(step: Mapping[str, Any]) -> str:
    """One readable line per step."""
    head = f"{step['index'] + 1:>3} {step['kind']:<8} d{step['depth']:<2}"
    if step["kind"] == "retrieve":
        body = f"{_short(' | '.join(step['queries']), 50)!r} → {', '.join(step['hit_ids']) or 'no hits'}"
    else:
        decision = f"{step['decision']} by {step['decided_by']}" if step["decision"] else ""
        output = step["output"] or step.get("error")
        body = f"{decision:<34} {_short(output, 50)!r}" if output else f"{decision:<34} (empty output)"
    cost = f"{step['latency_ms']:.0f} ms"
    if step["llm_calls"]:
        cost += f", {step['tokens_in']}→{step['tokens_out']} tok"
    if step["retries"]:
        cost += f", {step['retries']} retr{'y' if step['retries'] == 1 else 'ies'}"
    return f"{head} {body}  [{cost}]"


def answer_lines(question: str, document: Mapping[str, Any], traces_index: str | None) -> list[str]:
    """The question, the answer, its citations, one line per step and the totals, as plain text;
    ``traces_index`` is where the trace was stored (``None``: it was not)."""
    lines = [f"Question: {question}", f"Answer:   {answer_text(document.get('answer'))}"]
    citations = document.get("citations") or []
    if citations:
        lines.append("Citations:")
        for number, citation in enumerate(citations, start=1):
            lines.append(f"  [{number}] {citation['id']}  {citation['title']}  ({float(citation['score']):.2f})")
    lines.append(f"Steps ({document['strategy']}, model {document['model']}):")
    lines += [step_line(step) for step in document["steps"]]
    totals = document["totals"]
    lines.append(
        f"Totals: {totals['retrievals']} retrievals, {totals['llm_calls']} LLM calls, "
        f"{totals['tokens_in']} tokens in, {totals['tokens_out']} out, {totals['wall_ms'] / 1000:.2f} s; "
        f"trace {document['trace_id']} "
        + (f"in {traces_index}" if traces_index is not None else "NOT stored (see the warning)")
    )
    return lines
