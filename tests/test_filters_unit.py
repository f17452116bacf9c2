"""The filter model (pure): what each filter becomes, and every bad filter a 400 naming its field."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopsearch.service.errors import RequestInvalid
from hopsearch.service.retrieval.filters import parse_filters
from hopsearch.service.retrieval.path_filters import ROOT_FIELD, names_relative_path, relative_paths


def test_each_kind_becomes_its_clause() -> None:
    given_filters = [
        {"term": {"source": "wiki"}},
        {"term": {"lang": {"value": "ja"}}},
        {"terms": {"metadata.team": ["a", "b"]}},
        {"range": {"indexed_at": {"gte": "now-7d", "lt": "2030-01-01T00:00:00+00:00"}}},
        {"range": {"chunk": {"lte": 3}}},
        {"exists": {"field": "path"}},
        {"or": [{"term": {"doc_id": "x"}}, {"not": {"term": {"source": "web"}}}]},
        {"and": [{"exists": {"field": "metadata.author"}}, {"not": [{"term": {"lang": "en"}}]}]},
    ]
    assert parse_filters(given_filters) == [
        {"term": {"source": "wiki"}},
        {"term": {"lang": "ja"}},
        {"terms": {"metadata.team": ["a", "b"]}},
        {"range": {"indexed_at": {"gte": "now-7d", "lt": "2030-01-01T00:00:00+00:00"}}},
        {"range": {"chunk": {"lte": 3}}},
        {"exists": {"field": "path"}},
        {
            "bool": {
                "should": [{"term": {"doc_id": "x"}}, {"bool": {"must_not": [{"term": {"source": "web"}}]}}],
                "minimum_should_match": 1,
            }
        },
        {
            "bool": {
                "filter": [{"exists": {"field": "metadata.author"}}, {"bool": {"must_not": [{"term": {"lang": "en"}}]}}]
            }
        },
    ]


@pytest.mark.parametrize(
    ("bad", "field", "words"),
    [
        ({"term": {"embedding": 1}}, "body.filters.0.term.embedding", "cannot filter on field [embedding]"),
        ({"term": {"text": "x"}}, "body.filters.0.term.text", "cannot filter on field [text]"),
        ({"range": {"indexed_at": {"gte": "last tuesday"}}}, "body.filters.0.range.indexed_at.gte", "is a date"),
        ({"range": {"indexed_at": {"since": "now"}}}, "body.filters.0.range.indexed_at.since", "unknown range bound"),
        ({"range": {"chunk": {"gte": "three"}}}, "body.filters.0.range.chunk.gte", "holds numbers"),
        ({"range": {"chunk": {}}}, "body.filters.0.range.chunk", "object of bounds"),
        ({"terms": {"source": []}}, "body.filters.0.terms.source", "list of 1 to"),
        ({"terms": {"source": [{"a": 1}]}}, "body.filters.0.terms.source.0", "must be text"),
        ({"exists": {"field": "metadata."}}, "body.filters.0.exists.field", "cannot filter on field"),
        ({"match": {"text": "x"}}, "body.filters.0", "unknown filter [match]"),
        ({"or": []}, "body.filters.0.or", "non-empty list"),
        ({"and": [{"term": {"source": "a"}}, {"term": {"x y": 1}}]}, "body.filters.0.and.1.term.x y", "cannot filter"),
        ({"not": {"range": {"indexed_at": {"lt": "yesterday"}}}}, "body.filters.0.not.0.range.indexed_at.lt", "date"),
        ({"term": {"source": "a"}, "terms": {"source": ["b"]}}, "body.filters.0", "one key"),
        ({"term": {"source": None}}, "body.filters.0.term.source", "null"),
    ],
)
def test_a_bad_filter_is_a_400_naming_the_field(bad: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(RequestInvalid) as caught:
        parse_filters([bad], "body.filters")
    assert caught.value.status == 400 and caught.value.field == field
    assert words in str(caught.value) and f"[{field}]" in str(caught.value)


def test_nesting_and_size_are_bounded() -> None:
    deep: dict[str, Any] = {"term": {"source": "a"}}
    for _ in range(12):
        deep = {"not": deep}
    with pytest.raises(RequestInvalid, match="nest deeper"):
        parse_filters([deep])
    with pytest.raises(RequestInvalid, match="more than 64"):
        parse_filters([{"term": {"source": str(n)}} for n in range(65)])
    with pytest.raises(RequestInvalid, match="list of filters"):
        parse_filters("term: source a")  # one object is a list of one (issue 42 item 10); text is not


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=12,
)


@given(json_values)
def test_any_json_is_clauses_or_a_400(value: Any) -> None:
    try:
        parse_filters([value], "f")
    except RequestInvalid as exc:
        assert exc.field is not None and exc.field.startswith("f")


def test_only_relative_path_values_are_read_under_the_folders() -> None:
    clauses = parse_filters([{"and": [{"term": {"source": "docs"}}, {"term": {"path": "/srv/docs/a.md"}}]}])
    assert not names_relative_path(clauses)  # absolute only: no roots to look up, the clause as given
    assert relative_paths(clauses[0], ["/srv/docs"]) == clauses[0]
    [relative] = parse_filters([{"not": {"term": {"path": "guide//a.md"}}}])
    assert names_relative_path([relative])
    assert relative_paths(relative, ["/srv/docs"]) == {
        "bool": {
            "must_not": [
                {
                    "bool": {
                        "should": [
                            {"term": {"path": "guide//a.md"}},
                            {
                                "bool": {
                                    "filter": [
                                        {"term": {ROOT_FIELD: "/srv/docs"}},
                                        {"term": {"path": "/srv/docs/guide/a.md"}},
                                    ]
                                }
                            },
                        ],
                        "minimum_should_match": 1,
                    }
                }
            ]
        }
    }


def test_one_filter_object_is_a_list_of_one() -> None:
    """The README writes a filter as one object; it is read as a list of one (issue 42 item 10)."""
    example = {"and": [{"term": {"source": "wiki"}}, {"range": {"indexed_at": {"gte": "now-30d"}}}]}
    assert parse_filters(example) == parse_filters([example])
    with pytest.raises(RequestInvalid) as refused:
        parse_filters({"term": {"text": "free text"}}, "filters")
    assert refused.value.field is not None and refused.value.field.startswith("filters.0")
