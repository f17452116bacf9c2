"""``hopsearch outlines show ENTITY``, ``hopsearch outlines search QUERY`` and ``hopsearch outlines rebuild``:
DualRAG's stored outlines. The command line reads as an admin: the facts and aliases still usable (every
passage they were derived from still there), each with its provenance and lineage."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import click

from hopsearch.cli.options import caller_options, cli_caller
from hopsearch.cli.render import echo_json
from hopsearch.service.config.settings import Settings, load_settings
from hopsearch.service.errors import HopsearchError
from hopsearch.service.outlines.lineage import bound_namespace, reader_for
from hopsearch.service.outlines.model import EntityOutline
from hopsearch.service.outlines.purge import rebuild_outlines
from hopsearch.service.outlines.store import OUTLINES_SCHEMA, EsOutlineStore, OutlinesConfig
from hopsearch.service.store import Store


def _settings(namespace: str | None) -> tuple[Settings, str]:
    settings = load_settings()
    return settings, namespace or settings.outline_namespace


def _print(outlines: Sequence[EntityOutline], max_age_s: float, as_json: bool) -> None:
    if as_json:
        echo_json([o.to_document() for o in outlines])
        return
    cutoff = datetime.now(UTC) - timedelta(seconds=max_age_s)
    for number, outline in enumerate(outlines):
        if number:
            click.echo("")
        also = f"  (also: {', '.join(outline.aliases)})" if outline.aliases else ""
        click.echo(f"## {outline.entity}{also}  [namespace {outline.namespace}, {len(outline.facts)} facts]")
        for fact in outline.facts:
            stale = "" if fact.created_at >= cutoff else "  (stale)"
            click.echo(f"- {fact.summary}{stale}")
            click.echo(
                f"    passages {', '.join(fact.passage_ids) or '-'}; {fact.created_at:%Y-%m-%d %H:%M} UTC; "
                f"model {fact.model}; trace {fact.trace_id or _LOST.get(fact.trace_status, '-')}"
            )
            click.echo(f"    from: {fact.question!r} / {fact.sub_query!r}; written by {fact.key or '-'}")
            lineage = "no lineage (admins only)" if fact.lineage is None else f"{len(fact.lineage)} passages"
            click.echo(f"    lineage: {lineage}; readers {', '.join(fact.readers or ()) or 'admins only'}")


_LOST = {"lost": "lost (never written: the service stopped during its question)", "pending": "not written yet"}


def _note(note: str) -> None:
    if note:
        click.echo(f"note: {note}", err=True)


namespace_option = click.option(
    "--namespace", default=None, help="Outline namespace (default: settings.outline_namespace)."
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print the outline documents as JSON.")


@click.group("outlines")
def outlines() -> None:
    """Read the per-entity knowledge outlines DualRAG stores (with their provenance)."""


@outlines.command("show")
@click.argument("entity")
@namespace_option
@json_option
@caller_options
def show(entity: str, namespace: str | None, as_json: bool, key: str | None, principals: tuple[str, ...]) -> None:
    """Print the outline of ENTITY (its name or any alias, normalised)."""
    settings, space = _settings(namespace)

    async def go() -> EntityOutline | None:
        nonlocal space
        async with await Store.connect(settings) as store:
            caller = await cli_caller(store, key, principals, "outlines")
            space = bound_namespace(caller, namespace, settings.outline_namespace) or space
            outlines = EsOutlineStore(store, config=OutlinesConfig.of(settings))
            _note(await outlines.note())
            return await outlines.get(space, entity, reader_for(caller, settings.acl_default))

    try:
        found = asyncio.run(go())
    except HopsearchError as exc:
        raise click.ClickException(str(exc)) from exc
    if found is None:
        raise click.ClickException(f"no outline for {entity!r} in namespace {space!r}")
    _print([found], settings.outline_max_age_s, as_json)


@outlines.command("search")
@click.argument("query")
@namespace_option
@click.option("-n", "size", type=click.IntRange(1, 100), default=10, show_default=True)
@json_option
@caller_options
def search(
    query: str, namespace: str | None, size: int, as_json: bool, key: str | None, principals: tuple[str, ...]
) -> None:
    """Full-text search over entity names, aliases and facts."""
    settings, space = _settings(namespace)

    async def go() -> list[EntityOutline]:
        nonlocal space
        async with await Store.connect(settings) as store:
            caller = await cli_caller(store, key, principals, "outlines")
            space = bound_namespace(caller, namespace, settings.outline_namespace) or space
            outlines = EsOutlineStore(store, config=OutlinesConfig.of(settings))
            _note(await outlines.note())
            return await outlines.search(space, query, size=size, reader=reader_for(caller, settings.acl_default))

    try:
        found = asyncio.run(go())
    except HopsearchError as exc:
        raise click.ClickException(str(exc)) from exc
    if not found:
        raise click.ClickException(f"no outline matches {query!r} in namespace {space!r}")
    _print(found, settings.outline_max_age_s, as_json)


@outlines.command("rebuild")
def rebuild() -> None:
    """Move an outlines index made under an older schema to the current one, keeping every outline."""
    settings = load_settings()

    async def go() -> tuple[int, int]:
        async with await Store.connect(settings) as store:
            return await rebuild_outlines(store)

    try:
        before, moved = asyncio.run(go())
    except HopsearchError as exc:
        raise click.ClickException(str(exc)) from exc
    if moved == 0 and before in (0, OUTLINES_SCHEMA):
        click.echo(f"[{settings.outlines_index}] is {'missing' if before == 0 else 'current'}: nothing to rebuild")
        return
    click.echo(f"rebuilt [{settings.outlines_index}]: schema {before} -> {OUTLINES_SCHEMA}, {moved} outline(s) kept")
