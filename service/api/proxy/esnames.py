"""Which indices a proxied request names, read from its path, query string and body as Elasticsearch
reads them, for the policy that keeps hopsearch's own indices from callers that are not admins
(:mod:`~hopsearch.service.api.proxy.managed`).

A request reaches indices through more than its path: ``?index=`` stands in for the path's index on
every endpoint (Elasticsearch reads path and query parameters from one map), ``?source=`` carries a
whole body, an ``_msearch`` header or an ``_mget`` doc names its own, and a query can read documents
of another index on the cluster's side (a ``terms`` lookup, ``more_like_this`` on documents,
``indexed_shape``, ``percolate`` by id, a ``lookup`` runtime field): the looked-up text then shows in
``profile`` or ``_validate/query?rewrite``. So :func:`names_of` reads every index expression a request
holds: the path's, each ``_msearch`` header's (one without ``index`` takes the path's), each ``_mget``
doc's ``_index``, and the value of every key of a JSON body that ends in ``index`` or ``indices``
(a field that happens to be called so only costs a look-up). Whatever it cannot read as the cluster
would is refused (:class:`~hopsearch.service.errors.AuthorizationError`), never guessed:

- an endpoint outside :data:`PATH_READS`, ``_msearch`` and ``_mget`` (writes, cluster APIs, ...);
- a request that names no index (``/_search``, a header without ``index`` under ``/_msearch``):
  Elasticsearch reads every index then;
- SQL and ES|QL (their ``FROM`` is a query language), search templates (they render into a query only
  the cluster sees), scrolls and points in time (their ids name no index and can come from another
  caller's search: ``search_after`` on named indices is the way to page);
- a body that is not JSON (SMILE, CBOR, YAML), compressed, deeper than the depth limit, with a
  duplicate-tolerant reading that differs from the cluster's, or an ``_msearch`` body that 7.x and
  8.x read differently (a leading empty line).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from hopsearch.service.api.json_depth import too_deep
from hopsearch.service.api.proxy.espath import EsRequest
from hopsearch.service.errors import AuthorizationError

_ANY = "*"
#: Endpoints (the segments after the index expression) that read the indices of their path and
#: nothing else but what their body names; ``*`` is any one segment (a document id, a field).
PATH_READS = frozenset(
    {
        (),
        ("_search",),
        ("_count",),
        ("_knn_search",),
        ("_explain", _ANY),
        ("_validate", "query"),
        ("_terms_enum",),
        ("_field_caps",),
        ("_doc", _ANY),
        ("_source", _ANY),
        ("_mapping",),
        ("_mapping", "field", _ANY),
    }
)
_SCROLL = (
    "a scroll id names no index and may come from another caller's search, so scrolling is for admins "
    "(page with `search_after` on named indices)"
)
_PIT = (
    "a point in time is searched without naming indices and its id may come from another caller, so "
    "points in time are for admins (page with `search_after` on named indices)"
)
_TEMPLATE = (
    "a search template renders into a query only the cluster sees (a terms lookup in it would read other "
    "indices), so templates are for admins"
)
#: Endpoints refused whatever they name, and why (matched on their first segments).
REFUSED: tuple[tuple[tuple[str, ...], str], ...] = (
    (("_sql",), "SQL names its indices inside the query language (FROM), which hopsearch does not parse"),
    (("_query",), "ES|QL names its indices inside the query language (FROM), which hopsearch does not parse"),
    (("_search", "scroll"), _SCROLL),
    (("_pit",), _PIT),
    (("_search", "template"), _TEMPLATE),
    (("_msearch", "template"), _TEMPLATE),
    (("_render",), _TEMPLATE),
)
#: Query parameters refused, and why (Elasticsearch reads ``index`` wherever the path has none).
QUERY_REFUSED = {
    "index": "the query string names indices (`index=`): name them in the path",
    "source": "the query string carries a body (`source=`): send it as the body",
    "scroll": _SCROLL,
}
#: Media types whose bodies are read here as JSON (no Content-Type, or octet-stream, is read as JSON by
#: the front's own routes and the 7.x async client sends bodies so).
_JSON_TYPES = frozenset(
    {
        "",
        "application/json",
        "application/x-ndjson",
        "application/vnd.elasticsearch+json",
        "application/vnd.elasticsearch+x-ndjson",
        "application/octet-stream",
    }
)
_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


@dataclass(frozen=True, slots=True)
class Named:
    """The index expression parts (``a``, ``logs-*``, ``-x``, ``<d-{now/d}>``) one part of a request
    names; ``where`` says which part, for the refusal's reason (``the path``, ``_msearch header 2``,
    ``body key query.terms.text.index``)."""

    where: str
    parts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ProxiedCall:
    """A proxied request as a policy on indices reads it: the checked path, the raw query string, the
    headers (names lowercased) and the whole body."""

    request: EsRequest
    query: bytes = b""
    headers: Mapping[bytes, bytes] | None = None
    body: bytes = b""

    def header(self, name: bytes) -> bytes | None:
        return (self.headers or {}).get(name)


def refusal(call: ProxiedCall, why: str, index: str | None = None) -> AuthorizationError:
    request = call.request
    return AuthorizationError(
        f"action [{request.method} {request.path}] is not passed on for a caller that is not an admin: {why}",
        details={"index": index},
    )


def names_of(call: ProxiedCall) -> Iterator[Named]:
    """Every index expression ``call`` names, the path's first (so that a refusal names the index where
    it can), then the query string's, the endpoint's and the body's; raises the 403 for what cannot be
    decided, as it comes to it."""
    request = call.request
    if request.index is not None:
        yield Named("the path", request.indices)
    _check_query(call)
    endpoint = request.endpoint
    for prefix, why in REFUSED:
        if endpoint[: len(prefix)] == prefix:
            raise refusal(call, why)
    if endpoint == ("_msearch",):
        yield from _msearch(call, _json_lines(call), request.indices)
    elif endpoint == ("_mget",):
        yield from _mget(call, _json_body(call), request.indices)
    elif not any(_shape(endpoint, shape) for shape in PATH_READS):
        raise refusal(call, "hopsearch does not decide on which indices this endpoint reads")
    elif request.index is None:
        raise refusal(call, "it names no index, so Elasticsearch would read every index")
    else:
        yield from _body_keys(call, _json_body(call), "the body")


def _shape(endpoint: tuple[str, ...], shape: tuple[str, ...]) -> bool:
    return len(endpoint) == len(shape) and all(s in (_ANY, e) for e, s in zip(endpoint, shape, strict=True))


def _check_query(call: ProxiedCall) -> None:
    """Check the query string's parameters, decoded as Elasticsearch decodes them (``%XX`` as UTF-8, ``+`` a space)."""
    text = call.query.decode("latin-1")
    for pair in text.split("&"):
        if not pair:
            continue
        name = pair.split("=", 1)[0]
        if _ESCAPE.search(name):
            raise refusal(call, "the query string has a `%` that is not followed by two hex digits")
        try:
            decoded = unquote_plus(name, encoding="utf-8", errors="strict").lower()
        except UnicodeDecodeError as exc:
            raise refusal(call, "the query string does not decode to UTF-8") from exc
        if decoded in QUERY_REFUSED:
            raise refusal(call, QUERY_REFUSED[decoded])


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its pairs in order, duplicates kept: every value a key had is read."""


def _parse(call: ProxiedCall, text: bytes, where: str) -> Any:
    refused = too_deep(text, where=where)
    if refused is not None:
        raise refusal(call, f"{where} nests deeper than hopsearch reads ({refused})")
    try:
        return json.loads(text, object_pairs_hook=_Pairs)
    except (ValueError, RecursionError) as exc:
        raise refusal(call, f"{where} is not JSON that hopsearch can read ({type(exc).__name__})") from exc


def _readable(call: ProxiedCall) -> bool:
    """Whether the body is there and in a form read here (JSON or NDJSON, not compressed)."""
    if not call.body:
        return False
    encoding = (call.header(b"content-encoding") or b"identity").decode("latin-1").strip().lower()
    if encoding not in ("", "identity"):
        raise refusal(call, f"a body in Content-Encoding [{encoding}] is not read by hopsearch")
    kind = (call.header(b"content-type") or b"").decode("latin-1").split(";", 1)[0].strip().lower()
    if kind not in _JSON_TYPES:
        raise refusal(call, f"a body of Content-Type [{kind}] is not read by hopsearch (send JSON)")
    return True


def _json_body(call: ProxiedCall) -> Any:
    return _parse(call, call.body, "the body") if _readable(call) else None


def _json_lines(call: ProxiedCall) -> list[Any]:
    """Return an NDJSON body's lines as Elasticsearch splits them (on ``\\n``; an empty line is an empty header)."""
    if not _readable(call):
        raise refusal(call, "an _msearch without a body names no search")
    body = call.body
    if body.startswith(b"\n"):  # 7.x skips a leading empty line, 8.x reads it as an empty header
        raise refusal(call, "the _msearch body starts with an empty line, which 7.x and 8.x read differently")
    if not body.endswith(b"\n"):
        raise refusal(call, "the _msearch body does not end with a newline")
    lines = body[:-1].split(b"\n")
    return [None if not line else _parse(call, line, f"_msearch line {n}") for n, line in enumerate(lines, 1)]


def _msearch(call: ProxiedCall, lines: list[Any], default: tuple[str, ...]) -> Iterator[Named]:
    """Each search's indices: its header's ``index``/``indices`` (the path's where it has neither), and
    what its body names. A header with no body after it is not run."""
    for n in range(0, len(lines) - 1, 2):
        header, body = lines[n], lines[n + 1]
        where = f"_msearch header on line {n + 1}"
        if header is not None and not isinstance(header, _Pairs):
            raise refusal(call, f"the {where} is not an object")
        named = [value for key, value in header or () if key in ("index", "indices")]
        if named:
            parts = tuple(p for value in named for p in _expression(call, value, where))
            if not parts:
                raise refusal(call, f"the {where} names an empty index list, so Elasticsearch would read every index")
            yield Named(where, parts)
        elif default:
            yield Named(f"the path (for the {where})", default)
        else:
            raise refusal(call, f"the {where} names no index and neither does the path: every index would be read")
        yield from _body_keys(call, body, f"_msearch body on line {n + 2}")


def _mget(call: ProxiedCall, body: Any, default: tuple[str, ...]) -> Iterator[Named]:
    """Each doc's ``_index`` (the path's where it has none); ``ids`` read the path's index."""
    if isinstance(body, _Pairs):
        for key, docs in body:
            if key == "docs" and isinstance(docs, list):
                for n, doc in enumerate(docs):
                    named = isinstance(doc, _Pairs) and any(k == "_index" for k, _ in doc)
                    if not named and not default:
                        raise refusal(call, f"docs[{n}] of the _mget names no `_index` and neither does the path")
            elif key == "ids" and not default:
                raise refusal(call, "the _mget `ids` name no index and neither does the path")
    elif not default:
        raise refusal(call, "the _mget names no index")
    yield from _body_keys(call, body, "the body")


def _index_key(key: str) -> bool:
    lowered = key.lower()
    return lowered.endswith(("index", "indices"))


def _body_keys(call: ProxiedCall, value: Any, where: str) -> Iterator[Named]:
    """Yield the value of every key ending in ``index``/``indices`` anywhere in a parsed body (an object under
    such a key is walked into, not read as names)."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, _Pairs):
            for key, item in node:
                inner = f"{at}.{key}" if at != where else f"{where} key {key}"
                if _index_key(key) and not isinstance(item, _Pairs) and item is not None:
                    yield Named(inner, _expression(call, item, inner))
                stack.append((item, inner))
        elif isinstance(node, list):
            stack.extend((item, f"{at}.{n}") for n, item in enumerate(node))


def _expression(call: ProxiedCall, value: Any, where: str) -> tuple[str, ...]:
    """Return the parts of an index expression given as a string (comma-separated) or a list of strings."""
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(item, str) for item in items):
        raise refusal(call, f"{where} holds a value that is not a string or a list of strings")
    return tuple(part for item in items for part in item.split(","))
