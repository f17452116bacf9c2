"""Answer metrics with the HotpotQA evaluation's normalisation (DESIGN §9).

normalise: lowercase, drop punctuation, drop the articles a/an/the, collapse white space.
EM: normalised strings equal. F1: token overlap; a yes/no/noanswer prediction or gold that differs
from the other scores 0. Acc: the normalised gold occurs in the normalised prediction. With several
gold answers (aliases) each metric takes the best. A prediction that is
:data:`~hopsearch.service.strategies.answer_types.NO_ANSWER` (the model's reply was not an answer; 「回答なし」
for a Japanese question) is not graded as one: it scores 0 on every metric, even where the gold is "no".
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from hopsearch.service.strategies.answer_types import NO_ANSWERS

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)
_SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    lowered = text.lower()
    no_punct = "".join(ch for ch in lowered if ch not in _PUNCT)
    no_articles = _ARTICLES.sub(" ", no_punct)
    return " ".join(no_articles.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    pred = normalize_answer(prediction)
    truth = normalize_answer(gold)
    if (pred in _SPECIAL or truth in _SPECIAL) and pred != truth:
        return 0.0
    pred_tokens = pred.split()
    truth_tokens = truth.split()
    same = sum((Counter(pred_tokens) & Counter(truth_tokens)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def accuracy(prediction: str, gold: str) -> float:
    """Gold contained in the prediction (both normalised; an empty gold never counts)."""
    truth = normalize_answer(gold)
    return float(bool(truth) and f" {truth} " in f" {normalize_answer(prediction)} ")


@dataclass(frozen=True, slots=True)
class Scores:
    em: float
    f1: float
    acc: float


def score(prediction: str | None, golds: Sequence[str]) -> Scores:
    """Best EM, F1 and Acc of ``prediction`` over the gold answers; a missing prediction, or one that
    is :data:`NO_ANSWER` (or 「回答なし」), scores 0."""
    if prediction is None or prediction in NO_ANSWERS or not golds:
        return Scores(0.0, 0.0, 0.0)
    return Scores(
        em=max(exact_match(prediction, g) for g in golds),
        f1=max(f1_score(prediction, g) for g in golds),
        acc=max(accuracy(prediction, g) for g in golds),
    )
