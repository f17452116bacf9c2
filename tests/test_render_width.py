"""The step table of ``ask``, ``demo`` and ``traces show`` fits an 80-column terminal: no line is wider,
and no step takes more than two lines, however long its queries, passages and output (``--json`` has
the full text)."""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console

from hopsearch.cli.render import ask_head, print_answer, steps_table, totals_lines

LONG = "a rather long passage of model output that goes on and on " * 8


def step(index: int, kind: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "index": index,
        "kind": kind,
        "depth": 1,
        "output": "",
        "decision": None,
        "decided_by": None,
        "queries": [],
        "hit_ids": [],
        "latency_ms": 123456.7,
        "tokens_in": 123456,
        "tokens_out": 98765,
        "llm_calls": 1,
        "retries": 0,
        "error": None,
        "details": None,
    }
    return {**base, **fields}


DOCUMENT: dict[str, Any] = {
    "trace_id": "f" * 32,
    "strategy": "dualrag",
    "model": "a-model-with-a-very-long-name-indeed-Qwen2.5-72B-Instruct-AWQ",
    "steps": [
        step(0, "generate", output=LONG, decision="retrieve", decided_by="stop_reason_after_followup_completion"),
        step(
            1, "retrieve", queries=[LONG[:80], "Who directed Lethal Weapon?"], hit_ids=[f"p-{i:04}" for i in range(40)]
        ),
        step(2, "summarize", output="x" * 500, queries=["Richard Donner"], retries=3),
        step(3, "identify", output='{"entities": [' + '{"entity": "Lethal Weapon"}, ' * 30 + "]}"),
        step(4, "failed", output="", error="LLMUnavailable: " + LONG, retries=1),
        step(5, "answer", output="", decision="final", decided_by="reasoner"),
        step(6, "outline_reuse", output=LONG, decision="parametric", decided_by="outline"),
    ],
    "answer": "2021",
    "citations": [{"id": "p-lethal", "title": "Lethal Weapon", "score": 1.0}],
    "totals": {"retrievals": 1, "llm_calls": 6, "tokens_in": 10, "tokens_out": 5, "wall_ms": 1000.0},
    "error": None,
}
ROW_START = re.compile(r"^\s{0,2}\d+\s")


def table_lines(width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None, force_terminal=False)
    console.print(steps_table(DOCUMENT, console.width))
    return console.export_text().splitlines()


def rows_of(lines: list[str]) -> list[list[str]]:
    body = lines[lines.index(next(line for line in lines if set(line.strip()) == {"─"})) + 1 :]
    rows: list[list[str]] = []
    for line in body:
        if not line.strip():
            continue
        if ROW_START.match(line):
            rows.append([line])
        else:
            rows[-1].append(line)
    return rows


def test_no_step_takes_more_than_two_lines_at_80_columns() -> None:
    lines = table_lines(80)
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    rows = rows_of(lines)
    assert [row[0].split()[0] for row in rows] == [str(n) for n in range(1, 8)]
    assert all(len(row) <= 2 for row in rows), [row for row in rows if len(row) > 2]
    text = "\n".join(lines)
    assert "retrieve" in text and "by stop_reas" in text and "3 retries" in text and "…" in text


def test_wider_terminals_show_more_and_still_two_lines() -> None:
    narrow, wide = table_lines(80), table_lines(160)
    assert all(len(line) <= 160 for line in wide) and all(len(row) <= 2 for row in rows_of(wide))
    assert sum(len(line.strip()) for line in wide) > sum(len(line.strip()) for line in narrow)


def test_the_whole_answer_fits_80_columns() -> None:
    console = Console(width=80, record=True, color_system=None)
    print_answer(console, DOCUMENT)
    assert all(len(line) <= 80 for line in console.export_text().splitlines())


#: Passage ids as the loaders make them: hyphenated, long, never to be split across two lines.
IDS = ["p-lethal-0", "p-jaws-12", *(f"2wiki-5a8b57f25542995d1e6f13{i:02}-chunk-{i}" for i in range(12))]
IDS_DOCUMENT: dict[str, Any] = {
    **DOCUMENT,
    "steps": [
        step(0, "retrieve", queries=["Who directed Lethal Weapon?"], hit_ids=IDS),
        step(1, "retrieve", queries=["q"], hit_ids=IDS[2:3]),
        step(2, "retrieve", queries=["Richard Donner"], hit_ids=["x" * 120, *IDS[3:5]]),
        step(3, "outline_reuse", output=f"reused facts of {IDS[5]} and {IDS[6]} " * 3),
    ],
}


def test_no_id_is_broken_across_lines_at_80_columns() -> None:
    console = Console(width=80, record=True, color_system=None, force_terminal=False)
    console.print(steps_table(IDS_DOCUMENT, console.width))
    lines = console.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    header = next(line for line in lines if "queries / output" in line)
    start = header.index("queries / output")
    end = start + max(12, 80 - 41 - 15)  # the text column (render.COLUMNS, render.OVERHEAD)
    rows = rows_of(lines)
    assert len(rows) == 4
    for row in rows:
        texts = [line[start:end].strip() for line in row]
        words = [word.rstrip(",") for text in texts for word in text.split()]
        for word in words:
            # every id shown is whole, or visibly shortened: never its head on one line, its tail on the next
            assert word in IDS or word.endswith("…") or not word.startswith(("2wiki", "p-", "xxx")), (word, texts)
        for id_ in IDS:
            assert not (id_ in "".join(texts) and not any(id_ in text for text in texts)), (id_, texts)
    shown = [w for row in rows for line in row for w in line[start:end].split() if w.rstrip(",") in IDS]
    assert shown  # whole ids do show where they fit


def test_ask_summary_lines_fit_80_columns_with_ids_whole() -> None:
    trace_id = "8c1e0f6ad2b94f0e9d7b3a5c4e2f1a0b"
    document = {**DOCUMENT, "trace_id": trace_id}
    citations = [("2wiki-5a8b57f25542995d1e6f1371-chunk-3", "A very long title " * 8, 0.87654)]
    head = ask_head(
        "When did the director of the film that won the most awards at the 1987 festival die, and where? " * 2,
        "Richard Donner died on 5 July 2021 in West Hollywood, California, aged 91. " * 2,
        citations,
        80,
    )
    tail = totals_lines(document, "a-rather-long-index-prefix-hopsearch-traces", 80)
    lines = [*head, *tail]
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert lines[0].startswith("Question: ") and any(line.startswith("Answer:   ") for line in lines)
    assert any(citations[0][0] in line for line in head)  # the passage id whole on its line
    assert any(trace_id in line for line in tail) and tail[0].startswith("Totals: ")
    assert any("a-rather-long-index-prefix-hopsearch-traces" in line for line in tail)
    assert totals_lines(document, "hopsearch-traces", 80)[-1] == f"Trace:  {trace_id} in hopsearch-traces"
