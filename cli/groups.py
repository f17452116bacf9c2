"""``hopsearch groups add|remove|show|list``: users' groups in ``<prefix>-groups``.

End-user tokens carry at most ``token_max_principals`` principals; an employee's other groups are kept
here and added to its principals server-side on every request (:mod:`hopsearch.service.auth.groups`).
Names are normalised as principals are (``ＨＲ`` is ``group:hr``); ``group:`` and ``user:`` may be given
or left out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import click

from hopsearch.cli.render import echo_json
from hopsearch.service.auth.groups import EsGroups, UserGroups, parse_csv
from hopsearch.service.config.settings import load_settings
from hopsearch.service.errors import HopsearchError
from hopsearch.service.store import Store

T = TypeVar("T")

json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")


def _run(work: Callable[[EsGroups], Awaitable[T]]) -> T:
    async def go() -> T:
        async with await Store.connect(load_settings()) as store:
            return await work(EsGroups(store, cache_s=0))

    try:
        return asyncio.run(go())
    except HopsearchError as exc:
        raise click.ClickException(str(exc)) from exc


def _print(found: UserGroups, as_json: bool) -> None:
    if as_json:
        echo_json(found.to_dict(), indent=None)
    else:
        click.echo(f"{found.user}: {', '.join(found.groups) or '(no groups)'}")


@click.group("groups")
def groups() -> None:
    """Users' groups, added to their end-user tokens' principals server-side."""


@groups.command("add")
@click.argument("user")
@click.argument("names", metavar="GROUP...", nargs=-1, required=True)
@json_option
def add(user: str, names: tuple[str, ...], as_json: bool) -> None:
    """Add USER to each GROUP."""
    _print(_run(lambda store: store.add(user, names)), as_json)


@groups.command("remove")
@click.argument("user")
@click.argument("names", metavar="GROUP...", nargs=-1, required=True)
@json_option
def remove(user: str, names: tuple[str, ...], as_json: bool) -> None:
    """Take USER out of each GROUP (a user left in none is forgotten)."""
    _print(_run(lambda store: store.remove(user, names)), as_json)


@groups.command("show")
@click.argument("user")
@json_option
def show(user: str, as_json: bool) -> None:
    """Print USER's stored groups."""
    _print(_run(lambda store: store.show(user)), as_json)


@groups.command("list")
@json_option
def list_groups(as_json: bool) -> None:
    """Print every user with stored groups."""
    found = _run(lambda store: store.users())
    if as_json:
        echo_json([row.to_dict() for row in found])
    elif not found:
        click.echo("no users with stored groups")
    for row in [] if as_json else found:
        _print(row, False)


@groups.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--replace", is_flag=True, help="Set each listed user's groups to exactly the file's (else add them).")
@json_option
def import_groups(file: Path, replace: bool, as_json: bool) -> None:
    """Fill the stored groups of a whole company from FILE, a CSV with the columns user,group (a header
    line, then one pair per line: an IdP's or HR system's export). Nothing is written when a line is bad."""
    try:
        found = parse_csv(file.read_text(encoding="utf-8"))
    except HopsearchError as exc:
        raise click.ClickException(f"{file}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise click.ClickException(f"{file}: not UTF-8 text ({exc})") from exc
    done = _run(lambda store: store.import_groups(found, replace=replace))
    if as_json:
        echo_json([row.to_dict() for row in done])
        return
    pairs = sum(len(groups) for groups in found.values())
    click.echo(f"imported {pairs} memberships of {len(done)} users from {file}" + (" (replaced)" if replace else ""))
