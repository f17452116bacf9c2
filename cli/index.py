"""``hopsearch index dpr|docs|jsonl|qa PATH``: load corpora into the passages index (one command per kind of
:data:`~hopsearch.loaders.api.LOADERS`).

Each command shows a progress bar (rate and ETA; updated once per acknowledged batch, so it never
slows the load), then prints the reconciliation ``read = indexed + rejected + skipped`` and where the
dead letters are. Exit status (also in the README):

- 0: the counts reconcile and nothing was rejected (or ``--allow-rejects`` was given);
- 1: the load failed or the counts do not reconcile (the message says how to resume);
- 2: bad usage (click's own code);
- 3: records were rejected (they are in the dead letters);
- 4: a directory under ``index docs`` could not be listed; what was indexed from it is kept, and the
  message names it (``--allow-rejects`` does not hide this: the load is incomplete).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import (
    Progress as RichBar,
)

from hopsearch.cli.admin import cluster_overrides
from hopsearch.cli.render import echo_json
from hopsearch.loaders import history
from hopsearch.loaders.api import LOADERS, Loader
from hopsearch.loaders.config import LoadConfig
from hopsearch.loaders.model import LoadOptions, LoadReport, Progress
from hopsearch.service.access import document_acl
from hopsearch.service.config.settings import load_settings
from hopsearch.service.embedders.factory import make_embedder
from hopsearch.service.errors import HopsearchError
from hopsearch.service.store import Store
from hopsearch.service.types import Embedder

EXIT_FAILED = 1
EXIT_REJECTED = 3
EXIT_UNREADABLE_DIR = 4


class BarProgress:
    """The rich progress bar behind the loaders' :class:`Progress` seam (units: bytes or files)."""

    def __init__(self, label: str, console: Console) -> None:
        self.bar = RichBar(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[rows]} read · {task.fields[rate]}/s · {task.fields[bad]} rejected"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.label = label
        self.task: TaskID | None = None
        self.first_read = 0

    def start(self, total: int | None, done: int, read: int) -> None:
        self.first_read = read
        self.bar.start()
        self.task = self.bar.add_task(self.label, total=total, completed=done, rows="0", rate="-", bad="0")

    def update(self, done: int, read: int, indexed: int, rejected: int, skipped: int) -> None:
        if self.task is None:
            return
        elapsed = self.bar.tasks[0].elapsed or 0.0
        rate = f"{(read - self.first_read) / elapsed:,.0f}" if elapsed > 0 else "-"
        self.bar.update(self.task, completed=done, rows=f"{read:,}", rate=rate, bad=f"{rejected:,}")

    def stop(self) -> None:
        self.bar.stop()


def _options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")(f)
    f = click.option(
        "--allow-rejects", is_flag=True, help=f"Exit 0 although records were rejected (else {EXIT_REJECTED})."
    )(f)
    f = click.option("--quiet", is_flag=True, help="No progress bar.")(f)
    f = click.option("--dead-letter", type=click.Path(path_type=Path), help="Dead-letter JSONL file.")(f)
    f = click.option("--workers", type=int, default=3, show_default=True, help="Concurrent bulk requests.")(f)
    f = click.option(
        "--batch-size", type=int, default=None, help="Documents per bulk request (5000 BM25-only, 256 with vectors)."
    )(f)
    f = click.option("--keep-old", is_flag=True, help="With --rebuild: keep the previous index version.")(f)
    f = click.option("--rebuild", is_flag=True, help="Fill a new index version, then swap the alias.")(f)
    f = click.option("--no-embed", is_flag=True, help="BM25 only: no vectors.")(f)
    f = click.option(
        "--shards", type=click.IntRange(1, 1024), default=None, help="Primary shards of a new passages index."
    )(f)
    f = click.option(
        "--replicas",
        type=click.IntRange(0, 16),
        default=None,
        help="Replicas of the passages index, restored after the load (default: 1 on a multi-node cluster, else 0).",
    )(f)
    f = click.option(
        "--index",
        "index_name",
        default=None,
        help="Load into this index or alias (created if missing) instead of the default.",
    )(f)
    return f


def _resumable(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--checkpoint", type=click.Path(path_type=Path), help="Checkpoint file.")(f)
    f = click.option("--resume", is_flag=True, help="Continue from the checkpoint of an interrupted load.")(f)
    f = click.option("--limit", type=int, default=None, help="Read at most this many records.")(f)
    return f


def _print(report: LoadReport, as_json: bool, *, allow_rejects: bool = False) -> None:
    if as_json:
        echo_json(report.to_dict())
    else:
        ok = "reconciled" if report.reconciled else "MISMATCH"
        click.echo(
            f"read {report.read:,} = indexed {report.indexed:,} + rejected {report.rejected:,} "
            f"+ skipped {report.skipped:,}  [{ok}]"
        )
        rate = report.read / report.seconds if report.seconds > 0 else 0.0
        what, per = ("chunks", "files") if report.kind == "docs" else ("documents", f"{report.kind} records")
        click.echo(
            f"{report.documents:,} {what} into {report.index} in {report.seconds:.1f} s "
            f"({rate:,.0f} {per}/s)"
            + (f"; resumed after position {report.resumed_from:,}" if report.resumed_from else "")
            + (f"; {report.deleted:,} stale chunks deleted" if report.deleted else "")
            + (
                f"; {report.extra['files_acl_changed']:,} files re-sent for their ACL"
                if report.extra.get("files_acl_changed")
                else ""
            )
            + (
                f"; {report.extra['copied']:,} other passages copied from {report.extra['copied_from']}"
                if report.extra.get("copied")
                else ""
            )
            + ("; alias swapped" if report.swapped_alias else "")
        )
        if report.rejected:
            click.echo(f"dead letters: {report.dead_letter}")
        _print_not_read(report)
    if not report.reconciled:
        click.echo("error: read != indexed + rejected + skipped", err=True)
        raise SystemExit(EXIT_FAILED)
    unreadable = list(report.extra.get("unreadable_dirs") or [])
    if unreadable:
        click.echo(
            f"error: {len(unreadable)} director{'y' if len(unreadable) == 1 else 'ies'} could not be read; "
            f"what was indexed from it is kept: {', '.join(unreadable)}",
            err=True,
        )
        raise SystemExit(EXIT_UNREADABLE_DIR)
    if report.rejected and not allow_rejects:
        click.echo(
            f"error: {report.rejected:,} records rejected (see {report.dead_letter}); --allow-rejects exits 0",
            err=True,
        )
        raise SystemExit(EXIT_REJECTED)


def _print_not_read(report: LoadReport) -> None:
    """Files of a suffix ``index docs`` does not read: counted apart from ``read`` (they are no dead letters)."""
    not_read: dict[str, int] = dict(report.extra.get("files_not_read") or {})
    if not_read:
        counts = ", ".join(f"{suffix} {count:,}" for suffix, count in not_read.items())
        click.echo(f"not read (a suffix index docs does not read): {sum(not_read.values()):,} files: {counts}")


def _run(loader: Loader, path: Path, params: dict[str, Any]) -> None:
    settings = load_settings(**cluster_overrides(params.get("shards"), params.get("replicas")))
    default_batch = 5000 if params["no_embed"] or settings.embedder == "none" else 256
    options = LoadOptions(
        batch_size=params["batch_size"] or default_batch,
        workers=params["workers"],
        limit=params.get("limit"),
        resume=bool(params.get("resume")),
        rebuild=params["rebuild"],
        keep_old=params["keep_old"],
        checkpoint=params.get("checkpoint"),
        dead_letter=params["dead_letter"],
        index=params.get("index_name"),
        acl=_acl(params.get("acl")),
        config=LoadConfig.of(settings),
    )
    console = Console(stderr=True)
    bar = None if params["quiet"] else BarProgress(f"{loader.kind} {path.name}", console)

    async def go() -> LoadReport:
        embedder: Embedder | None = None if params["no_embed"] else make_embedder(settings)
        progress: Progress | None = bar
        async with await Store.connect(settings) as store:
            return await loader.load(store, path, options, embedder=embedder, progress=progress)

    started = datetime.now(UTC)
    try:
        report = asyncio.run(go())
    except HopsearchError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        if bar is not None:
            bar.stop()
    history.record(settings.state_dir, settings.index_prefix, report, started)
    _print(report, params["as_json"], allow_rejects=params["allow_rejects"])


@click.group()
def index() -> None:
    """Load corpora into the passages index (BM25 text plus vectors unless --no-embed)."""


ACL_OPTION = click.option(
    "--acl",
    "acl",
    multiple=True,
    metavar="PRINCIPAL",
    help="Who may read the files no .hopsearch-acl.yaml covers: public, user:NAME, group:NAME (repeat), or "
    "private (admins only). Without it and a sidecar: the acl_default setting decides at search time.",
)


def _acl(given: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Return the ``--acl`` principals, checked (a bad one is a usage error naming it)."""
    if not given:
        return None
    try:
        return tuple(document_acl(given))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--acl") from exc


def _command(loader: Loader) -> None:
    """``hopsearch index <kind> PATH`` with the options of its kind."""

    def command(path: Path, **params: Any) -> None:
        _run(loader, path, params)

    command = _options(command)
    if loader.resumable:
        command = _resumable(command)
    if loader.acl:
        command = ACL_OPTION(command)
    command = click.argument("path", type=click.Path(path_type=Path))(command)
    index.command(name=loader.kind, help=loader.summary)(command)


for _loader in LOADERS.values():
    _command(_loader)
