"""Output of the commands: an answer's trace document for people, shared by ``ask``, ``demo`` and ``traces
show`` (the step table, :func:`steps_table`, the answer text and :func:`print_answer`), and every
command's ``--json`` (:func:`echo_json`)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

EMPTY_ANSWER = "(empty: the model wrote nothing)"


def echo_json(value: Any, *, indent: int | None = 2) -> None:
    """``value`` printed as JSON, the one way every ``--json`` prints: UTF-8, text as it is (Japanese
    stays Japanese, never ``\\uXXXX``)."""
    click.echo(json.dumps(value, indent=indent, ensure_ascii=False))


def answer_text(text: str | None) -> str:
    """Return an answer as shown to a person: ``(none)`` when there is none (a failure), and an explicit note when the
    model wrote nothing, rather than a blank that reads like a display fault."""
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


def fit(line: str, width: int) -> str:
    """``line`` cut to ``width`` with an ellipsis."""
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def _more(line: str, width: int) -> str:
    """``line`` ending in `` …`` (more follows), cut between words; one word too long shortened."""
    words = line.split(" ")
    while len(words) > 1 and len(" ".join(words)) + 2 > width:
        words.pop()
    kept = " ".join(words)
    return kept + " …" if len(kept) + 2 <= width else fit(kept, width)


def two_lines(text: str, width: int) -> str:
    """``text`` in at most two lines of ``width`` characters, broken between words only (an id is never
    split over two lines): a word longer than a line is shortened, the second line cut where more is left."""
    width = max(width, 8)
    lines = textwrap.wrap(" ".join(text.split()), width=width, break_long_words=False, break_on_hyphens=False)
    if len(lines) > 2:
        lines = [lines[0], _more(lines[1], width)]
    return "\n".join(fit(line, width) for line in lines or [""])


def ids_line(ids: Sequence[str], width: int) -> str:
    """``→ id, id +N``: the hit ids that fit whole in ``width``, then how many more (the first one
    shortened where not even it fits)."""
    if not ids:
        return "→ no hits"
    for count in range(len(ids), 0, -1):
        more = f" +{len(ids) - count}" if count < len(ids) else ""
        line = f"→ {', '.join(ids[:count])}{more}"
        if len(line) <= width:
            return line
    more = f" +{len(ids) - 1}" if len(ids) > 1 else ""
    return f"→ {fit(ids[0], width - 2 - len(more))}{more}"


def step_text(step: Mapping[str, Any]) -> str:
    if step.get("kind") == "retrieve":
        hits = ", ".join(step.get("hit_ids") or []) or "no hits"
        return f"{' | '.join(step.get('queries') or [])} → {hits}"
    text = " ".join(str(step.get("output") or step.get("error") or "").split())
    if not text and step.get("queries"):
        text = " | ".join(step.get("queries") or [])
    return text or "(empty output)"


def step_cell(step: Mapping[str, Any], width: int) -> str:
    """Return a step's text column: a retrieve step's queries on one line and its hit ids (whole) on the next; any other
    step's text in two lines."""
    if step.get("kind") == "retrieve":
        queries = " ".join(" | ".join(step.get("queries") or []).split())
        return f"{fit(queries, width)}\n{ids_line(list(step.get('hit_ids') or []), width)}"
    return two_lines(step_text(step), width)


def steps_table(document: Mapping[str, Any], width: int = 80) -> Table:
    """Build the steps table, one row of at most two lines each at ``width`` columns (long text cut; ``--json`` has it
    all)."""
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
            Text(step_cell(step, text_width)),
            f"{float(step.get('latency_ms') or 0):.0f}",
            tokens,
        )
    return table


def print_answer(console: Console, document: Mapping[str, Any]) -> None:
    """Print the step table, the answer (or the error), the citations and the totals."""
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


def ask_head(question: str, answer: str, citations: Sequence[tuple[str, str, float]], width: int) -> list[str]:
    """Return what ``hopsearch ask`` prints above the step table, each line at most ``width`` wide: the question and the
    answer wrapped between words, one citation a line (its id whole, its title shortened)."""
    lines = _labelled("Question: ", question, width) + _labelled("Answer:   ", answer, width)
    if citations:
        lines.append("Citations:")
    for number, (doc_id, title, score) in enumerate(citations, start=1):
        head, tail = f"  [{number}] {doc_id}", f"  ({score:.2f})"
        room = width - len(head) - len(tail) - 2
        lines.append(fit(f"{head}  {fit(title, room)}{tail}" if room >= 4 else head + tail, width))
    return lines


def _labelled(label: str, text: str, width: int) -> list[str]:
    lines = textwrap.wrap(
        " ".join(text.split()),
        width=width,
        initial_indent=label,
        subsequent_indent=" " * len(label),
        break_on_hyphens=False,
    )
    return lines or [label.rstrip()]


def totals_lines(document: Mapping[str, Any], stored_in: str | None, width: int) -> list[str]:
    """``Totals:`` and the trace's id and where it is stored, each line at most ``width`` wide (the id on a
    line of its own where both do not fit)."""
    totals = document.get("totals") or {}
    first = (
        f"Totals: {totals.get('retrievals')} retrievals, {totals.get('llm_calls')} LLM calls, "
        f"{totals.get('tokens_in')} tokens in, {totals.get('tokens_out')} out, "
        f"{float(totals.get('wall_ms') or 0) / 1000:.2f} s"
    )
    where = f"in {stored_in}" if stored_in is not None else "NOT stored (see the warning)"
    trace = f"Trace:  {document.get('trace_id')}"
    if len(f"{trace} {where}") <= width:
        return [*_labelled("", first, width), f"{trace} {where}"]
    return [*_labelled("", first, width), trace, fit(f"        {where}", width)]
