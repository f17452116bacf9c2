"""Index management: ``hopsearch indices list|delete`` and ``hopsearch loads list|show``.

``indices list`` shows every index under the prefix (passages versions, outlines, traces) with its
aliases, documents, size and the ``_meta`` the passages index records (embedder, analyzer, schema: an
older one is noted with the command that moves it). ``indices upgrade`` moves one in place. ``indices
delete`` removes named indices or, with ``--all``, everything under the prefix; it asks first unless
``--yes``, and only ever touches names under ``<prefix>-``. ``loads`` lists the reports each
``hopsearch index …`` run leaves under the state folder, with their dead-letter files.
"""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table

from hopsearch.cli.attach import attach, detach
from hopsearch.cli.options import with_store
from hopsearch.cli.render import echo_json
from hopsearch.loaders.config import LoadConfig
from hopsearch.loaders.history import past_loads
from hopsearch.loaders.upgrade import upgrade_index
from hopsearch.service.config.settings import load_settings
from hopsearch.service.embedders import make_embedder
from hopsearch.service.errors import HopsearchError
from hopsearch.service.outlines.purge import index_names, purge_outlines
from hopsearch.service.store import Store
from hopsearch.service.store.indices import schema_note, schema_version
from hopsearch.service.text.japanese import ja_tokens_note


def _size(value: Any) -> str:
    if not isinstance(value, int):
        return ""
    size = float(value)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""


@click.group("indices")
def indices() -> None:
    """List and delete hopsearch's indices (everything under <prefix>-)."""


@indices.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the indices as JSON.")
def list_indices(as_json: bool) -> None:
    """List the indices under the prefix: aliases, documents, size, embedder, vector index and analyzer (from _meta)."""
    settings = load_settings()

    async def work(store: Store) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return await store.prefix_indices(), await _attached_rows(store)

    rows, attached = with_store(settings, work)
    if as_json:
        for row in rows:
            if note := schema_note(row["index"], row["meta"], settings.acl_default):
                row["note"] = note
            if ja_note := ja_tokens_note(row["index"], row["meta"]):
                row["ja_note"] = ja_note
        echo_json(rows + attached)
        return
    _print_attached(attached)
    if not rows:
        click.echo(f"no indices under {settings.index_prefix}-")
        return
    table = Table(title=f"indices under {settings.index_prefix}-")
    for column in ("index", "aliases", "documents", "size", "embedder", "vectors", "analyzer", "schema", "created"):
        table.add_column(column, overflow="fold")
    notes = []
    for row in rows:
        meta = row["meta"]
        if note := schema_note(row["index"], meta, settings.acl_default):
            notes.append(note)
        if ja_note := ja_tokens_note(row["index"], meta):
            notes.append(ja_note)
        version = schema_version(meta)
        table.add_row(
            row["index"],
            ", ".join(row["aliases"]),
            f"{row['documents']:,}" if isinstance(row["documents"], int) else "",
            _size(row["bytes"]),
            str(meta.get("embedder") or ("none" if meta else "")),
            str(meta.get("vector_index") or ""),
            str(meta.get("analyzer") or ""),
            (f"{version} (old)" if note else str(version)) if version else "",
            str(row["created"] or "")[:19],
        )
    Console(width=160).print(table)
    for note in notes:
        click.echo(f"note: {note}")


async def _attached_rows(store: Store) -> list[dict[str, Any]]:
    """One row per attached index: its name, documents (where it still exists) and its attachment."""
    rows = []
    for attachment in await store.attachments():
        try:
            documents: int | None = await store.count(attachment.index)
        except HopsearchError:
            documents = None
        rows.append({"index": attachment.index, "documents": documents, "attached": attachment.to_doc()})
    return rows


def _print_attached(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    table = Table(title="attached indices (read only: hopsearch never writes to them)")
    for column in ("index", "documents", "title", "text", "vector", "embedder", "acl", "attached"):
        table.add_column(column, overflow="fold")
    for row in rows:
        att = row["attached"]
        fields = att["fields"]
        table.add_row(
            row["index"],
            f"{row['documents']:,}" if isinstance(row["documents"], int) else "missing",
            fields["title"],
            ", ".join([fields["text"], *fields.get("also", [])]),
            fields.get("vector") or "",
            att.get("embedder") or "",
            f"{fields['acl']} ({att['identities']})" if fields.get("acl") else "none (admins only)",
            str(att.get("attached_at") or "")[:19],
        )
    Console(width=160).print(table)


@indices.command("delete")
@click.argument("names", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every index under the prefix.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete_indices(names: tuple[str, ...], everything: bool, yes: bool) -> None:
    """Delete NAMES (indices under the prefix, e.g. a passages version) or, with --all, all of them."""
    settings = load_settings()
    prefix = f"{settings.index_prefix}-"
    if bool(names) == everything:
        raise click.UsageError("name the indices to delete, or give --all (not both)")
    outside = [name for name in names if not name.startswith(prefix)]
    if outside:
        raise click.UsageError(f"not under {prefix}: {', '.join(outside)} (hopsearch deletes only its own indices)")
    rows = with_store(settings, lambda store: store.prefix_indices())
    existing = {row["index"]: row for row in rows}
    aliases = {alias: row["index"] for row in rows for alias in row["aliases"]}
    targets = [aliases.get(name, name) for name in names] if names else sorted(existing)
    missing = [name for name in targets if name not in existing]
    if missing:
        raise click.ClickException(f"no such index: {', '.join(missing)}")
    if not targets:
        click.echo(f"no indices under {prefix}")
        return
    for name in targets:
        row = existing[name]
        via = f" (alias {', '.join(row['aliases'])})" if row["aliases"] else ""
        click.echo(f"  {name}{via}: {row['documents'] or 0:,} documents")
    if not yes:
        click.confirm(f"Delete {len(targets)} index(es)?", abort=True)
    removed = with_store(settings, lambda store: _delete_and_purge(store, targets))
    click.echo(f"deleted {len(targets)} index(es)")
    if removed:
        click.echo(f"purged {removed} outline fact(s) derived from their passages")


async def _delete_and_purge(store: Store, targets: list[str]) -> int:
    """Delete the indices, then the outline facts derived from their passages (by index and alias name)."""
    outlines = store.names.outlines
    names = set().union(*[await index_names(store, name) for name in targets if name != outlines])
    await store.delete_indices(targets)
    if outlines in targets or not names:
        return 0
    return await purge_outlines(store, indices=names)


@indices.command("upgrade")
@click.argument("name", required=False)
@click.option(
    "--acl",
    "acl",
    multiple=True,
    metavar="PRINCIPAL",
    help="Then give every passage without an acl these principals (public, user:NAME, group:NAME; repeat), "
    "re-sending each whole with its vectors.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
def upgrade_indices(name: str | None, acl: tuple[str, ...], as_json: bool) -> None:
    """Move NAME (default: the passages alias) to the current passages schema in place, keeping every passage,
    vector and token field (schema 2 adds acl: document permissions; schema 3, a chosen vector index and vectors
    out of _source, needs a rebuild: `hopsearch index … --rebuild`)."""
    settings = load_settings()
    target = name or settings.passages_alias

    async def work(store: Store) -> dict[str, Any]:
        return await upgrade_index(
            store, target, acl=list(acl) or None, embedder=make_embedder(settings), config=LoadConfig.of(settings)
        )

    try:
        done = with_store(settings, work)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--acl") from exc
    if as_json:
        echo_json(done)
        return
    for row in done["indices"]:
        moved = f"schema {row['from']} → {row['to']}" if row["from"] < row["to"] else f"already schema {row['to']}"
        given = f"; {row['acl_given']:,} passages given acl {', '.join(acl)}" if "acl_given" in row else ""
        click.echo(f"{row['index']}: {moved}{given}")


indices.add_command(attach)
indices.add_command(detach)


@click.group("loads")
def loads() -> None:
    """Past `hopsearch index …` runs: their reports and dead-letter files."""


@loads.command("list")
@click.option("-n", "size", type=click.IntRange(1, 10_000), default=20, show_default=True)
@click.option("--all-prefixes", is_flag=True, help="Loads of every index prefix, not only the current one.")
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
def list_loads(size: int, all_prefixes: bool, as_json: bool) -> None:
    """List the most recent loads, newest first."""
    settings = load_settings()
    found = past_loads(settings.state_dir, None if all_prefixes else settings.index_prefix)[:size]
    if as_json:
        echo_json([past.to_dict() | {"dead_letters": past.dead_letters} for past in found])
        return
    if not found:
        click.echo("no loads recorded")
        return
    for past in found:
        r = past.report
        letters = f"  dead letters: {past.dead_letters:,} in {r['dead_letter']}" if past.dead_letters else ""
        click.echo(
            f"{past.id}  {past.finished_at[:19]}  {r['kind']:6} {r['source']} → {r['index']}: "
            f"read {r['read']:,} indexed {r['indexed']:,} rejected {r['rejected']:,} skipped {r['skipped']:,}" + letters
        )


@loads.command("show")
@click.argument("load_id")
def show_load(load_id: str) -> None:
    """One load's report (JSON) and the first rejections of its dead-letter file."""
    settings = load_settings()
    matches = [past for past in past_loads(settings.state_dir) if past.id.startswith(load_id)]
    if len(matches) != 1:
        raise click.ClickException(f"{'no' if not matches else 'more than one'} load matches {load_id!r}")
    past = matches[0]
    echo_json(past.to_dict() | {"dead_letters": past.dead_letters})
    if past.dead_letters:
        click.echo(f"first rejections in {past.report['dead_letter']}:")
        with open(past.report["dead_letter"], encoding="utf-8", errors="replace") as lines:
            for _, line in zip(range(5), lines, strict=False):
                click.echo("  " + line.rstrip()[:300])
