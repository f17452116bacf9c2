"""Evidence recall and answer types in ``hopsearch eval`` rows (issue 19): supporting titles read
from each dataset's own field, recall by title over the cited passages, summary means."""

from __future__ import annotations

from typing import Any

from hopsearch.loaders.questions import parse_record
from hopsearch.service.evaluation.runner import EvalRow, evidence_recall, summarize
from hopsearch.service.strategies.answer_types import NO_ANSWER

CONTEXT = [["Jaws (film)", ["Jaws is a 1975 film."]], ["Alien (film)", ["Alien is a 1979 film."]]]


def test_supporting_titles_of_each_dataset() -> None:
    wiki = {"_id": "w", "type": "comparison", "question": "q?", "answer": "Jaws", "context": CONTEXT}
    wiki["supporting_facts"] = [["Jaws (film)", 0], ["Alien (film)", 0], ["Jaws (film)", 1], "junk"]
    assert parse_record(wiki, source="w.jsonl", position=1).supporting == ("Jaws (film)", "Alien (film)")
    hotpot = {"_id": "h", "level": "easy", "question": "q?", "answer": "x", "context": CONTEXT}
    assert parse_record(hotpot, source="h.jsonl", position=1).supporting == ()
    musique: dict[str, Any] = {"id": "2hop__1", "question": "q?", "answer": "x"}
    musique["paragraphs"] = [
        {"title": "A", "paragraph_text": "a", "is_supporting": True},
        {"title": "B", "paragraph_text": "b", "is_supporting": False},
    ]
    assert parse_record(musique, source="m.jsonl", position=1).supporting == ("A",)


def test_evidence_recall_by_title() -> None:
    assert evidence_recall(["Jaws (film)", "Alien (film)"], ["jaws  (FILM)", "Other"]) == 0.5
    assert evidence_recall(["Jaws (film)"], []) == 0.0
    assert evidence_recall([], ["Jaws (film)"]) is None


def row(prediction: str, recall: float | None, answer_type: str = "text") -> EvalRow:
    return EvalRow(
        id="i", type="comparison", question="q?", prediction=prediction, gold=("no",), em=0.0, f1=0.0, acc=0.0,
        retrievals=1, llm_calls=1, tokens_in=1, tokens_out=1, wall_s=0.1, trace_id="t", error=None,
        answer_type=answer_type, evidence_recall=recall,
    )  # fmt: skip


def test_summary_counts_no_answers_and_averages_recall() -> None:
    summary = summarize([row(NO_ANSWER, 1.0), row("no", 0.0, "yes_no"), row("x", None)])
    assert summary["all"]["no_answer"] == 1.0
    assert summary["all"]["evidence_recall"] == 0.5  # rows without supporting paragraphs left out
    assert "evidence_recall" not in summarize([row("x", None)])["all"]
