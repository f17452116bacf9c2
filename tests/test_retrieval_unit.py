"""Pure functions of retrieval: RRF and cosine (property tests)."""

from __future__ import annotations

import itertools
from operator import itemgetter

from hypothesis import given
from hypothesis import strategies as st

from hopsearch.service.retrieval import cosine, rrf
from hopsearch.service.retrieval.fusion import rrf_groups, rrf_order
from hopsearch.service.types import Hit


def hits(ids: list[str]) -> list[Hit]:
    return [Hit(id=i, score=0.0, title=i, text=i) for i in ids]


def test_rrf_matches_the_formula() -> None:
    fused = rrf([hits(["a", "b", "c"]), hits(["c", "a"])])
    scores = {h.id: h.score for h in fused}
    assert scores["a"] == 1 / 61 + 1 / 62
    assert scores["c"] == 1 / 63 + 1 / 61
    assert scores["b"] == 1 / 62
    assert [h.id for h in fused] == ["a", "c", "b"]


@given(st.lists(st.lists(st.sampled_from("abcdefgh"), unique=True), max_size=4), st.integers(1, 8))
def test_rrf_has_no_duplicates_and_respects_size(lists: list[list[str]], size: int) -> None:
    fused = rrf([hits(ids) for ids in lists], size=size)
    ids = [h.id for h in fused]
    assert len(ids) == len(set(ids)) <= size
    assert set(ids) <= {i for ids_ in lists for i in ids_}
    assert all(a.score >= b.score for a, b in itertools.pairwise(fused))


@given(
    st.lists(st.lists(st.sampled_from("abcdefgh"), unique=True), max_size=4),
    st.integers(1, 8),
    st.lists(st.floats(0, 2), min_size=4, max_size=4),
)
def test_rrf_over_raw_hits_orders_as_over_hits(lists: list[list[str]], size: int, weights: list[float]) -> None:
    """The same fusion over Elasticsearch's raw hits (by ``_id``): the same ids, scores and order."""
    raw = [[{"_id": i, "_score": 1.0} for i in ids] for ids in lists]
    over_raw = rrf_order(raw, itemgetter("_id"), size=size, weights=weights)
    fused = rrf([hits(ids) for ids in lists], size=size, weights=weights)
    assert [(item["_id"], score) for item, score in over_raw] == [(h.id, h.score) for h in fused]
    plain, half = [hits(ids) for ids in lists], len(lists) // 2
    expected = [rrf(plain[:half], size=size), rrf(plain[half:], size=size)]
    assert rrf_groups([half, len(lists) - half], plain, size=size) == expected


@given(st.lists(st.floats(-10, 10), min_size=1, max_size=8))
def test_cosine_of_a_vector_with_itself(v: list[float]) -> None:
    c = cosine(v, v)
    assert c == 0.0 or abs(c - 1.0) < 1e-9
