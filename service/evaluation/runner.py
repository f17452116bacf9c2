"""Drive a strategy over benchmark questions with bounded concurrency; one row per question.

The runner takes questions as plain data (:class:`EvalItem`) and the ask use case as a function of the
question (the front end builds each question's request), so it stays independent of file formats
(``hopsearch.loaders.questions`` reads those), of requests and of presentation (the CLI prints).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from hopsearch.service.evaluation.documents import files_found
from hopsearch.service.evaluation.metrics import score
from hopsearch.service.strategies.answer_types import NO_ANSWERS
from hopsearch.service.strategies.base import Answer

#: Answers one question (the ask use case over a request the front end built for it).
Ask = Callable[[str], Awaitable[Answer]]


@dataclass(frozen=True, slots=True)
class EvalItem:
    id: str
    question: str
    answers: tuple[str, ...]
    type: str
    #: Titles of the supporting paragraphs (2Wiki / HotpotQA ``supporting_facts``, MuSiQue
    #: ``is_supporting``); empty where the file gives none. Of a question over indexed documents, the
    #: file names, and ``gold_files`` the passage ids of each (:func:`.documents.file_passages`).
    supporting: tuple[str, ...] = ()
    gold_files: tuple[frozenset[str], ...] = ()


@dataclass(frozen=True, slots=True)
class EvalRow:
    id: str
    type: str
    question: str
    prediction: str | None
    gold: tuple[str, ...]
    em: float
    f1: float
    acc: float
    retrievals: int
    llm_calls: int
    tokens_in: int
    tokens_out: int
    wall_s: float
    trace_id: str
    error: str | None
    #: The final answer's type (choice, yes_no, date, number, text) as the trace recorded it.
    answer_type: str | None = None
    #: Share of the supporting paragraphs among the passages the strategy cited over the whole
    #: question (by title; documents by any cited passage of theirs); ``None`` where the question names
    #: no supporting paragraphs.
    evidence_recall: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def evidence_recall(supporting: Sequence[str], cited_titles: Sequence[str]) -> float | None:
    """Return the share of ``supporting`` titles found among ``cited_titles`` (case and spacing ignored);
    ``None`` when there are no supporting titles."""

    def key(title: str) -> str:
        return " ".join(title.casefold().split())

    wanted = {key(title) for title in supporting if title.strip()}
    if not wanted:
        return None
    return len(wanted & {key(title) for title in cited_titles}) / len(wanted)


def final_answer_type(answer: Answer) -> str | None:
    """Return the ``answer_type`` of the last step that recorded one (the final answer)."""
    return next((s.answer_type for s in reversed(answer.trace.steps) if s.answer_type is not None), None)


async def evaluate_one(ask: Ask, item: EvalItem) -> EvalRow:
    started = time.monotonic()
    answer = await ask(item.question)
    totals = answer.trace.totals()
    scores = score(answer.text, item.answers)
    return EvalRow(
        id=item.id,
        type=item.type,
        question=item.question,
        prediction=answer.text,
        gold=item.answers,
        em=scores.em,
        f1=scores.f1,
        acc=scores.acc,
        retrievals=int(totals["retrievals"]),
        llm_calls=int(totals["llm_calls"]),
        tokens_in=int(totals["tokens_in"]),
        tokens_out=int(totals["tokens_out"]),
        wall_s=round(time.monotonic() - started, 3),
        trace_id=answer.trace.trace_id,
        error=str(answer.error) if answer.error else None,
        answer_type=final_answer_type(answer),
        evidence_recall=(
            files_found(item.gold_files, [c.id for c in answer.citations])
            if item.gold_files
            else evidence_recall(item.supporting, [c.title for c in answer.citations])
        ),
    )


async def run_eval(
    ask: Ask,
    items: Sequence[EvalItem],
    *,
    concurrency: int = 4,
    on_row: Callable[[EvalRow], None] | None = None,
) -> list[EvalRow]:
    """Answer every item (at most ``concurrency`` at once); rows come back in input order.
    ``on_row`` is called as each question finishes (progress, streaming JSONL)."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(item: EvalItem) -> EvalRow:
        async with gate:
            row = await evaluate_one(ask, item)
        if on_row is not None:
            on_row(row)
        return row

    return list(await asyncio.gather(*(one(item) for item in items)))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize(rows: Sequence[EvalRow]) -> dict[str, dict[str, float]]:
    """Averages overall (key ``"all"``) and per question type."""
    groups: dict[str, list[EvalRow]] = defaultdict(list)
    for row in rows:
        groups["all"].append(row)
        groups[row.type or "-"].append(row)
    out: dict[str, dict[str, float]] = {}
    for name, group in groups.items():
        out[name] = {
            "n": float(len(group)),
            "em": _mean([r.em for r in group]),
            "f1": _mean([r.f1 for r in group]),
            "acc": _mean([r.acc for r in group]),
            "retrievals": _mean([float(r.retrievals) for r in group]),
            "llm_calls": _mean([float(r.llm_calls) for r in group]),
            "tokens_in": _mean([float(r.tokens_in) for r in group]),
            "tokens_out": _mean([float(r.tokens_out) for r in group]),
            "wall_s": _mean([r.wall_s for r in group]),
            "errors": float(sum(1 for r in group if r.error)),
            "no_answer": float(sum(1 for r in group if r.prediction in NO_ANSWERS)),
        }
        recalls = [r.evidence_recall for r in group if r.evidence_recall is not None]
        if recalls:
            out[name]["evidence_recall"] = _mean(recalls)
    return out
