"""Human-readable output of an answer's trace document, shared by ``ask``, ``demo`` and ``traces show``:
the step table (:func:`steps_table`), the answer text and :func:`print_answer`."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

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


#: Widths of the fixed columns of the step table; the text column takes what the terminal has left.
COLUMNS = (("#", 3), ("step", 9), ("decision", 14), ("ms", 6), ("tokens", 9))
#: Padding (one each side, none at the edges) and the five separators of six columns in ``SIMPLE_HEAD``.
OVERHEAD = 15


def two_lines(text: str, width: int) -> str:
    """``text`` in at most two lines of ``width`` characters, the second cut with an ellipsis."""
    lines = textwrap.wrap(" ".join(text.split()), width=max(width, 8)) or [""]
    if len(lines) > 2:
        lines = [lines[0], lines[1][: max(width, 8) - 1].rstrip() + "…"]
    return "\n".join(lines)


def step_text(step: Mapping[str, Any]) -> str:
    if step.get("kind") == "retrieve":
        hits = ", ".join(step.get("hit_ids") or []) or "no hits"
        return f"{' | '.join(step.get('queries') or [])} → {hits}"
    text = " ".join(str(step.get("output") or step.get("error") or "").split())
    if not text and step.get("queries"):
        text = " | ".join(step.get("queries") or [])
    return text or "(empty output)"


def steps_table(document: Mapping[str, Any], width: int = 80) -> Table:
    """The steps, one row of at most two lines each at ``width`` columns (long text cut; ``--json`` has it all)."""
    title = f"trace {document.get('trace_id')} ({document.get('strategy')}, {document.get('model')})"
    table = Table(title=_short(title, width), box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    text_width = max(12, width - sum(w for _, w in COLUMNS) - OVERHEAD)
    for name, column_width in COLUMNS[:3]:
        table.add_column(
            name, width=column_width, no_wrap=True, overflow="ellipsis", justify="right" if name == "#" else "left"
        )
    table.add_column("queries / output", width=text_width, no_wrap=True, overflow="ellipsis")
    for name, column_width in COLUMNS[3:]:
        table.add_column(name, width=column_width, no_wrap=True, overflow="ellipsis", justify="right")
    for step in document.get("steps", []):
        decision = step.get("decision") or ""
        if decision:
            decision += f"\nby {step.get('decided_by') or (step.get('details') or {}).get('role') or '-'}"
        tokens = f"{step.get('tokens_in', 0)}→{step.get('tokens_out', 0)}" if step.get("llm_calls") else ""
        retries = int(step.get("retries") or 0)
        if retries:
            tokens += f"\n{retries} retr{'y' if retries == 1 else 'ies'}"
        table.add_row(
            str(int(step.get("index", 0)) + 1),
            str(step.get("kind", "")),
            decision,
            Text(two_lines(step_text(step), text_width)),
            f"{float(step.get('latency_ms') or 0):.0f}",
            tokens,
        )
    return table


def print_answer(console: Console, document: Mapping[str, Any]) -> None:
    """The step table, the answer (or the error), the citations and the totals."""
    console.print(steps_table(document, console.width))
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
