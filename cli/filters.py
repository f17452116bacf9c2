"""``--source`` and ``--filter`` for ``search``, ``ask`` and ``eval``: filters on every retrieval, so company
documents (``source: docs``) and DPR passages (``source: dpr``) need not mix. ``--filter FIELD=VALUE`` is
a term filter; ``--filter JSON`` any filter of :mod:`hopsearch.service.retrieval.filters` (and/or/not, range…).
Both go through that one filter model, so a bad field is refused here with its name."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import click

from hopsearch.service.errors import RequestInvalid
from hopsearch.service.retrieval.filters import parse_filters

SOURCES = ("docs", "dpr", "jsonl", "qa")


def filter_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--filter",
        "filters",
        multiple=True,
        metavar="FIELD=VALUE|JSON",
        help="Only passages whose FIELD equals VALUE, or matching a JSON filter such as "
        '\'{"range": {"indexed_at": {"gte": "now-7d"}}}\' (repeatable, all must hold).',
    )(f)
    f = click.option(
        "--source",
        "sources",
        multiple=True,
        type=click.Choice(SOURCES),
        help="Only passages of this loader (repeatable).",
    )(f)
    return f


def filter_clauses(sources: Sequence[str], filters: Sequence[str]) -> list[dict[str, Any]]:
    """Return the filters of the options (:mod:`hopsearch.service.retrieval.filters`' JSON; literal terms, never query
    syntax), checked here so that a bad one is a usage error naming the option."""
    clauses: list[dict[str, Any]] = []
    if sources:
        clauses.append({"terms": {"source": sorted(set(sources))}})
    for item in filters:
        if item.lstrip().startswith("{"):
            try:
                clauses.append(json.loads(item))
            except json.JSONDecodeError as exc:
                raise click.BadParameter(f"{item!r} is not JSON ({exc.msg})", param_hint="--filter") from exc
            continue
        field, sep, value = item.partition("=")
        if not sep or not field.strip():
            raise click.BadParameter(f"{item!r} is not FIELD=VALUE or a JSON filter", param_hint="--filter")
        clauses.append({"term": {field.strip(): value}})
    try:
        parse_filters(clauses, "filter")
    except RequestInvalid as exc:
        raise click.BadParameter(str(exc), param_hint="--filter/--source") from exc
    return clauses
