"""``--source`` and ``--filter FIELD=VALUE`` for ``search``, ``ask`` and ``eval``: term filters on every
retrieval, so company documents (``source: docs``) and DPR passages (``source: dpr``) need not mix."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

SOURCES = ("docs", "dpr", "jsonl", "qa")


def filter_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--filter",
        "filters",
        multiple=True,
        metavar="FIELD=VALUE",
        help="Only passages whose FIELD equals VALUE (a term filter; repeatable, all must hold).",
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
    """Elasticsearch filter clauses of the options (literal terms: never query syntax)."""
    clauses: list[dict[str, Any]] = []
    if sources:
        clauses.append({"terms": {"source": sorted(set(sources))}})
    for item in filters:
        field, sep, value = item.partition("=")
        if not sep or not field.strip():
            raise click.BadParameter(f"{item!r} is not FIELD=VALUE", param_hint="--filter")
        clauses.append({"term": {field.strip(): value}})
    return clauses
