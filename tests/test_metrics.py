"""Metrics agree with the official HotpotQA evaluation normalisation on fixed pairs.

The expected values below were worked out by hand from the HotpotQA script's rules (lowercase, strip
punctuation, drop a/an/the, collapse spaces; yes/no/noanswer mismatch → F1 0)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopsearch.service.evaluation.metrics import (
    accuracy,
    exact_match,
    f1_score,
    normalize_answer,
    score,
)

NORMALISED = [
    ("The Beatles", "beatles"),
    ("  An   apple a day ", "apple day"),
    ("U.S.A.", "usa"),
    ("Hello, World!", "hello world"),
    ("theatre", "theatre"),  # article only as a whole word
    ("Anne of the Island", "anne of island"),
    ("Zürich", "zürich"),  # unicode letters stay; only ASCII punctuation goes
    ("“quoted”", "“quoted”"),  # typographic quotes are not string.punctuation
    ("rock-n-roll", "rocknroll"),
    ("A", ""),
]


@pytest.mark.parametrize(("raw", "expected"), NORMALISED)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


PAIRS = [
    # prediction, gold, EM, F1, Acc
    ("The Beatles", "beatles", 1.0, 1.0, 1.0),
    ("yes", "Yes.", 1.0, 1.0, 1.0),
    ("yes", "no", 0.0, 0.0, 0.0),
    ("no, it is not", "no", 0.0, 0.0, 1.0),  # yes/no gold vs a longer prediction: F1 0
    ("noanswer", "Paris", 0.0, 0.0, 0.0),
    ("Paris France", "Paris", 0.0, 2 * 0.5 * 1.0 / 1.5, 1.0),
    ("the city of Paris", "Paris, France", 0.0, 2 * (1 / 3) * 0.5 / (1 / 3 + 0.5), 0.0),
    ("1943", "1943", 1.0, 1.0, 1.0),
    ("Mark Robson", "Mark  Robson (film director)", 0.0, 2 * 1.0 * 0.5 / 1.5, 0.0),
    ("Zürich", "zürich", 1.0, 1.0, 1.0),
    ("", "Paris", 0.0, 0.0, 0.0),
    ("an American", "American", 1.0, 1.0, 1.0),
]


@pytest.mark.parametrize(("pred", "gold", "em", "f1", "acc"), PAIRS)
def test_metrics_on_fixed_pairs(pred: str, gold: str, em: float, f1: float, acc: float) -> None:
    assert exact_match(pred, gold) == em
    assert f1_score(pred, gold) == pytest.approx(f1)
    assert accuracy(pred, gold) == acc


def test_acc_needs_whole_tokens() -> None:
    assert accuracy("Parisian cafes", "Paris") == 0.0
    assert accuracy("in Paris today", "Paris") == 1.0


def test_score_takes_the_best_alias_and_handles_missing() -> None:
    s = score("NYC", ["New York City", "NYC"])
    assert (s.em, s.f1, s.acc) == (1.0, 1.0, 1.0)
    assert score(None, ["x"]).f1 == 0.0
    assert score("x", []).em == 0.0


@given(st.text(max_size=40))
def test_self_match_is_perfect_unless_empty(text: str) -> None:
    if normalize_answer(text):
        assert exact_match(text, text) == 1.0
        assert f1_score(text, text) == 1.0
        assert accuracy(text, text) == 1.0


@given(st.text(max_size=30), st.text(max_size=30))
def test_scores_are_bounded_and_em_implies_f1(pred: str, gold: str) -> None:
    f1 = f1_score(pred, gold)
    assert 0.0 <= f1 <= 1.0
    if exact_match(pred, gold) and normalize_answer(gold):
        assert f1 == 1.0
