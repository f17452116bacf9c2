"""What a proxied request names, read without a cluster (the pure parts of the managed-indices policy):
index patterns compared as patterns, date math read as the pattern of every date, each body kind's
index expressions, what is refused before any look-up, and the spellings of a hopsearch key in a
credentials header. The policy against real nodes is tests/test_proxy_managed.py."""

from __future__ import annotations

import json

import pytest

from hopsearch.service.api.proxy.esnames import Named, ProxiedCall, names_of
from hopsearch.service.api.proxy.espath import parse_request
from hopsearch.service.api.proxy.forwarder import carries_key
from hopsearch.service.api.proxy.managed import date_math_pattern, overlap, reached
from hopsearch.service.errors import AuthorizationError


def call(method: str, path: str, body: bytes = b"", query: str = "", kind: str = "application/json") -> ProxiedCall:
    return ProxiedCall(parse_request(method, path.encode()), query.encode(), {b"content-type": kind.encode()}, body)


def names(method: str, path: str, body: bytes = b"", **more: str) -> list[tuple[str, tuple[str, ...]]]:
    return [(n.where, n.parts) for n in names_of(call(method, path, body, **more))]


def refused(method: str, path: str, body: bytes = b"", **more: str) -> str:
    with pytest.raises(AuthorizationError) as caught:
        list(names_of(call(method, path, body, **more)))
    assert caught.value.status == 403
    return str(caught.value)


def nd(*lines: object) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("t1-secret", "t1-*", True),
        ("T1-Secret", "t1-*", True),
        ("*", "t1-*", True),
        ("t*", "t1-*", True),
        ("*-passages", "t1-*", True),
        ("t1*x", "t1-*", True),
        ("a*b*c", "*d*", True),
        ("t1", "t1-*", False),
        ("t1x*", "t1-*", False),
        ("logs-*", "t1-*", False),
        ("abc", "a*d", False),
        ("t1", "t1", True),
    ],
)
def test_patterns_overlap_when_some_name_matches_both(a: str, b: str, expected: bool) -> None:
    assert overlap(a, b) is expected and overlap(b, a) is expected


def test_date_math_is_read_as_the_pattern_of_every_date() -> None:
    assert date_math_pattern("<logs-{now/d{yyyy.MM.dd|+12:00}}>") == "logs-*"
    assert date_math_pattern("<t1-secret>") == "t1-secret"
    assert date_math_pattern("<a-{now}-b-{now-1d}>") == "a-*-b-*"
    assert date_math_pattern("<a{b>") is None and date_math_pattern("<a}b>") is None
    assert date_math_pattern("<a\\{b>") is None  # an escaped brace: not read, refused


def test_every_name_a_resolution_reaches_is_read() -> None:
    answer = {
        "indices": [
            {"name": "i1", "aliases": ["al1"], "attributes": ["open"]},
            {"name": ".ds-s-1", "data_stream": "s"},
        ],
        "aliases": [{"name": "al2", "indices": ["i2", "i3"]}],
        "data_streams": [{"name": "s2", "backing_indices": [".ds-s2-1"], "timestamp_field": "@timestamp"}],
    }
    assert reached(answer) == {"i1", "al1", ".ds-s-1", "s", "al2", "i2", "i3", "s2", ".ds-s2-1"}


def test_the_path_and_every_body_kind_name_their_indices() -> None:
    assert names("GET", "/a,b*,-c/_search") == [("the path", ("a", "b*", "-c"))]
    lookup = {"query": {"terms": {"tag": {"index": "s", "id": "1", "path": "tag"}}}}
    assert names("POST", "/a/_search", json.dumps(lookup).encode()) == [
        ("the path", ("a",)),
        ("the body key query.terms.tag.index", ("s",)),
    ]
    assert names("POST", "/_msearch", nd({"index": ["a", "b,c"]}, {}, {"indices": "d"}, {})) == [
        ("_msearch header on line 1", ("a", "b", "c")),
        ("_msearch header on line 3", ("d",)),
    ]
    assert names("POST", "/p/_msearch", nd({}, {}), kind="application/x-ndjson") == [
        ("the path", ("p",)),
        ("the path (for the _msearch header on line 1)", ("p",)),
    ]
    mget = {"docs": [{"_index": "a", "_id": "1"}, {"_id": "2"}]}
    assert names("POST", "/p/_mget", json.dumps(mget).encode()) == [
        ("the path", ("p",)),
        ("the body key docs.0._index", ("a",)),
    ]
    duplicate = b'{"query": {"terms": {"t": {"index": "a"}}}, "query": {"terms": {"t": {"index": "b"}}}}'
    assert {n[1] for n in names("POST", "/p/_search", duplicate)} == {("p",), ("a",), ("b",)}  # every value read


def test_what_cannot_be_decided_is_refused_before_any_look_up() -> None:
    assert "names no index" in refused("GET", "/_search")
    assert "names no index" in refused("POST", "/_count")
    assert "`index=`" in refused("GET", "/a/_search", query="ind%65x=secret")
    assert "`index=`" in refused("GET", "/_search", query="q=x&index")
    assert "`source=`" in refused("GET", "/a/_search", query="source=%7B%7D")
    assert "scroll" in refused("GET", "/a/_search", query="scroll=1m")
    assert "scroll" in refused("POST", "/_search/scroll", b'{"scroll_id": "x"}')
    assert "point in time" in refused("POST", "/a/_pit")
    assert "SQL" in refused("POST", "/_sql", b'{"query": "SELECT 1"}')
    assert "ES|QL" in refused("POST", "/_query", b'{"query": "FROM a"}')
    assert "template" in refused("POST", "/a/_search/template", b"{}")
    assert "template" in refused("POST", "/_msearch/template", nd({"index": "a"}, {}))
    assert "does not decide" in refused("POST", "/a/_update_by_query", b"{}")
    assert "does not decide" in refused("GET", "/_cat/indices")
    assert "Content-Type [application/yaml]" in refused("POST", "/a/_search", b"query: {}", kind="application/yaml")
    assert "not JSON" in refused("POST", "/a/_search", b'{/* x */"query": {}}')
    assert "deeper" in refused("POST", "/a/_search", b"[" * 100 + b"]" * 100)
    assert "empty line" in refused("POST", "/p/_msearch", b"\n{}\n")
    assert "newline" in refused("POST", "/p/_msearch", b"{}\n{}")
    assert "neither does the path" in refused("POST", "/_msearch", nd({"index": "a"}, {}, {}, {}))
    assert "empty index list" in refused("POST", "/_msearch", nd({"index": []}, {}))
    assert "neither does the path" in refused(
        "POST", "/_mget", b'{"docs": [{"_index": "a", "_id": "1"}, {"_id": "2"}]}'
    )
    assert "`ids`" in refused("POST", "/_mget", b'{"ids": ["1"]}')
    assert "not a string" in refused("POST", "/a/_search", b'{"query": {"terms": {"t": {"index": 5}}}}')


def test_a_path_index_is_named_before_the_endpoint_is_refused() -> None:
    """So the 403 of ``/<managed>/_search/template`` names the index, not the template."""
    found = names_of(call("POST", "/secret/_search/template", b"{}"))
    assert next(found) == Named("the path", ("secret",))
    with pytest.raises(AuthorizationError, match="template"):
        next(found)


@pytest.mark.parametrize(
    "header",
    [b"ApiKey k1", b"apikey\tk1", b"APIKEY   k1  ", b"Bearer k2", b"ApiKey k1, Basic eDp5", b"Basic eDp5, Bearer k2"],
)
def test_a_hopsearch_key_is_found_in_any_spelling_of_a_credentials_header(header: bytes) -> None:
    assert carries_key(header, [b"k1", b"k2"])


def test_other_credentials_are_not_mistaken_for_a_key() -> None:
    for header in (b"Basic eDp5", b"ApiKey k10", b"Bearer xk1", b"ApiKey"):
        assert not carries_key(header, [b"k1", b"k2"]), header
