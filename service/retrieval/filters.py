"""Metadata filters: one model for ``_retrieve``, ``_ask`` and ``hopsearch search``.

A filter is JSON in Elasticsearch's spelling, restricted to literal clauses over an allow-list of
passage fields (user text never reaches Elasticsearch as query syntax)::

    {"term":   {"source": "wiki"}}                       {"terms": {"lang": ["en", "ja"]}}
    {"range":  {"indexed_at": {"gte": "now-7d"}}}        {"exists": {"field": "metadata.author"}}
    {"and": [f, ...]}   {"or": [f, ...]}   {"not": f}    (nest as deep as 8)

Fields: ``source``, ``path``, ``doc_id``, ``lang``, ``url``, ``title.keyword``, ``content_sha``, ``chunk``,
``indexed_at`` and ``metadata.<name>``. :func:`parse_filters` turns a list of filters into Elasticsearch
filter clauses or raises :class:`~hopsearch.service.errors.RequestInvalid` whose ``field`` names the
offending part (``body.filters.0.range.indexed_at.gte``), as data and in the message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from hopsearch.service.errors import RequestInvalid

FIELDS = frozenset({"source", "path", "doc_id", "lang", "url", "title.keyword", "content_sha", "chunk", "indexed_at"})
METADATA = re.compile(r"^metadata\.[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
DATE_FIELDS = frozenset({"indexed_at"})
NUMBER_FIELDS = frozenset({"chunk"})
BOUNDS = ("gte", "gt", "lte", "lt")
DATE_MATH = re.compile(r"^now([+-]\d+[yMwdhHms])*(/[yMwdhHms])?$")
MAX_DEPTH = 8
MAX_CLAUSES = 64
MAX_TERMS = 1024
MAX_TEXT = 512
KINDS = ("term", "terms", "range", "exists", "and", "or", "not")


def parse_filters(items: Any, where: str = "filters") -> list[dict[str, Any]]:
    """Return validated Elasticsearch filter clauses for a list of filters (see the module docstring)."""
    if items is None:
        return []
    if isinstance(items, Mapping):  # one filter object is a list of one
        items = [items]
    if not isinstance(items, list | tuple):
        raise RequestInvalid("must be a list of filters (or one filter object)", field=where)
    counter = [0]
    return [_parse(item, f"{where}.{n}", 0, counter) for n, item in enumerate(items)]


def _parse(item: Any, where: str, depth: int, counter: list[int]) -> dict[str, Any]:
    counter[0] += 1
    if counter[0] > MAX_CLAUSES:
        raise RequestInvalid(f"more than {MAX_CLAUSES} filter clauses", field=where)
    if depth > MAX_DEPTH:
        raise RequestInvalid(f"filters nest deeper than {MAX_DEPTH}", field=where)
    if not isinstance(item, Mapping) or len(item) != 1:
        raise RequestInvalid(f"a filter is an object with one key of {', '.join(KINDS)}", field=where)
    kind, value = next(iter(item.items()))
    here = f"{where}.{kind}"
    if kind in ("and", "or"):
        if not isinstance(value, list | tuple) or not value:
            raise RequestInvalid("must be a non-empty list of filters", field=here)
        parts = [_parse(sub, f"{here}.{n}", depth + 1, counter) for n, sub in enumerate(value)]
        if kind == "and":
            return {"bool": {"filter": parts}}
        return {"bool": {"should": parts, "minimum_should_match": 1}}
    if kind == "not":
        subs = value if isinstance(value, list | tuple) else [value]
        if not subs:
            raise RequestInvalid("must be a filter or a non-empty list of filters", field=here)
        return {"bool": {"must_not": [_parse(sub, f"{here}.{n}", depth + 1, counter) for n, sub in enumerate(subs)]}}
    if kind == "exists":
        name = value.get("field") if isinstance(value, Mapping) and len(value) == 1 else None
        _field(name, f"{here}.field")
        return {"exists": {"field": name}}
    if kind not in ("term", "terms", "range"):
        raise RequestInvalid(f"unknown filter [{kind}]; one of {', '.join(KINDS)}", field=where)
    if not isinstance(value, Mapping) or len(value) != 1:
        raise RequestInvalid("must name exactly one field", field=here)
    name, arg = next(iter(value.items()))
    at = f"{here}.{name}"
    _field(name, at)
    if kind == "term":
        if isinstance(arg, Mapping) and set(arg) == {"value"}:
            arg = arg["value"]
        return {"term": {name: _scalar(name, arg, at)}}
    if kind == "terms":
        if not isinstance(arg, list | tuple) or not arg or len(arg) > MAX_TERMS:
            raise RequestInvalid(f"must be a list of 1 to {MAX_TERMS} values", field=at)
        return {"terms": {name: [_scalar(name, v, f"{at}.{n}") for n, v in enumerate(arg)]}}
    if not isinstance(arg, Mapping) or not arg:
        raise RequestInvalid(f"a range is an object of bounds ({', '.join(BOUNDS)})", field=at)
    bounds: dict[str, Any] = {}
    for bound, limit in arg.items():
        if bound not in BOUNDS:
            raise RequestInvalid(f"unknown range bound [{bound}]; one of {', '.join(BOUNDS)}", field=f"{at}.{bound}")
        bounds[bound] = _bound(name, limit, f"{at}.{bound}")
    return {"range": {name: bounds}}


def _field(name: Any, where: str) -> None:
    if not isinstance(name, str) or not (name in FIELDS or METADATA.match(name)):
        allowed = ", ".join(sorted(FIELDS))
        raise RequestInvalid(f"cannot filter on field [{name}]; fields: {allowed}, metadata.<name>", field=where)


def _scalar(name: str, value: Any, where: str) -> Any:
    if isinstance(value, bool) or value is None:
        if value is None:
            raise RequestInvalid("a value is required (null given)", field=where)
        return value
    if isinstance(value, int | float):
        if isinstance(value, float) and value != value:  # NaN
            raise RequestInvalid("not a number", field=where)
        if isinstance(value, int) and not -(2**63) <= value < 2**63:
            raise RequestInvalid("out of the 64-bit range", field=where)
        return value
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise RequestInvalid(f"longer than {MAX_TEXT} characters", field=where)
        if name in NUMBER_FIELDS:
            raise RequestInvalid(f"[{name}] holds numbers; got text {value!r}", field=where)
        return value
    raise RequestInvalid(f"must be text, a number or a boolean, not {type(value).__name__}", field=where)


def _bound(name: str, value: Any, where: str) -> Any:
    value = _scalar(name, value, where)
    if isinstance(value, bool):
        raise RequestInvalid("a range bound must be a number, a date or text", field=where)
    if name in DATE_FIELDS and isinstance(value, str) and not DATE_MATH.match(value):
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise RequestInvalid(
                f"[{name}] is a date: give ISO 8601 (2024-05-01, 2024-05-01T12:00:00Z), date math (now-7d) "
                f"or epoch milliseconds; got {value!r}",
                field=where,
            ) from None
    return value


def refused_filter(clauses: Sequence[Mapping[str, Any]], reason: str, where: str = "body.filters") -> RequestInvalid:
    """Elasticsearch refused a search with these (validated) filter clauses, say a value a date field
    cannot parse: a 400 naming the filter whose value the refusal quotes (else all of them)."""
    for number, clause in enumerate(clauses):
        if any(f'"{value}"' in reason or f"[{value}]" in reason for value in _values(clause)):
            return RequestInvalid(f"filter refused by Elasticsearch: {reason}", field=f"{where}.{number}")
    return RequestInvalid(f"a filter was refused by Elasticsearch: {reason}", field=where)


def _values(node: Any) -> list[Any]:
    if isinstance(node, Mapping):
        return [v for key, item in node.items() if key != "field" for v in _values(item)]
    if isinstance(node, list | tuple):
        return [v for item in node for v in _values(item)]
    return [node]
