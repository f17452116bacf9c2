"""Dify's ``metadata_condition`` as hopsearch filters (:mod:`~hopsearch.service.retrieval.filters`).

A condition names a field (``name``): one of the filterable passage fields (``source``, ``path``, ``doc_id``,
``lang``, ``url``, ``title.keyword``, ``chunk``, ``indexed_at``…) as it is, ``metadata.<x>`` as it is, any
other name as ``metadata.<name>``. Operators: ``is`` / ``=`` (term), ``is not`` / ``≠`` (not term), ``in`` /
``not in`` (terms), ``empty`` / ``not empty`` (exists), ``>`` ``<`` ``≥`` ``≤`` and ``before`` / ``after``
(range: gt, lt, gte, lte; lt, gt). ``contains``, ``not contains``, ``start with`` and ``end with`` are
refused (400, naming the condition): hopsearch's filters are literal clauses, never patterns. The
conditions join with ``logical_operator`` (``and``, the default, or ``or``). The filters are then checked
as every request's are (fields, hidden fields, sizes).
"""

from __future__ import annotations

from typing import Any

from hopsearch.service.errors import RequestInvalid
from hopsearch.service.retrieval.filters import FIELDS

_RANGES = {">": "gt", "<": "lt", "≥": "gte", ">=": "gte", "≤": "lte", "<=": "lte", "before": "lt", "after": "gt"}
_REFUSED = ("contains", "not contains", "start with", "end with")


def field_of(name: str) -> str:
    """Return the passage field a condition's ``name`` filters on."""
    return name if name in FIELDS or name.startswith("metadata.") else f"metadata.{name}"


def condition_filter(condition: Any, where: str) -> dict[str, Any]:
    """One condition (``name``, ``comparison_operator``, ``value``) as one filter."""
    field = field_of(condition.name)
    operator = condition.comparison_operator.strip()
    value = condition.value
    if operator in ("empty", "not empty"):
        exists = {"exists": {"field": field}}
        return exists if operator == "not empty" else {"not": exists}
    if operator in _REFUSED:
        raise RequestInvalid(
            f"comparison_operator [{operator}] cannot be a hopsearch filter (literal values only: is, is not, "
            "in, not in, empty, not empty, =, ≠, >, <, ≥, ≤, before, after)",
            field=f"{where}.comparison_operator",
        )
    if value is None:
        raise RequestInvalid(f"comparison_operator [{operator}] needs a value", field=f"{where}.value")
    if operator in ("in", "not in"):
        values = value if isinstance(value, list) else [value]
        terms = {"terms": {field: values}}
        return terms if operator == "in" else {"not": terms}
    if operator in ("is", "=", "is not", "≠", "!="):
        term = {"term": {field: value}}
        return term if operator in ("is", "=") else {"not": term}
    if operator in _RANGES:
        return {"range": {field: {_RANGES[operator]: value}}}
    raise RequestInvalid(f"unknown comparison_operator [{operator}]", field=f"{where}.comparison_operator")


def dify_filters(metadata_condition: Any) -> list[dict[str, Any]]:
    """Return the filters of a request's ``metadata_condition`` (None: none)."""
    if metadata_condition is None or not metadata_condition.conditions:
        return []
    where = "body.metadata_condition.conditions"
    clauses = [condition_filter(c, f"{where}.{n}") for n, c in enumerate(metadata_condition.conditions)]
    if len(clauses) == 1:
        return clauses
    return [{metadata_condition.logical_operator: clauses}]
