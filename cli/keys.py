"""``hopsearch keys create|list|revoke|add-public-key|remove-public-key``: the API keys stored in
``<prefix>-keys`` (only a hash of each secret; the secret is printed once, by ``create``) and the public
keys of the end-user tokens each key's back end signs. The same as the service's admin-only ``/_keys``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import click
from rich.console import Console
from rich.table import Table

from hopsearch.cli.render import echo_json
from hopsearch.service.access import ACTIONS
from hopsearch.service.auth.keys import ALGORITHMS, KeyStore, NewKey, listed
from hopsearch.service.auth.records import KeyRecord
from hopsearch.service.config.settings import load_settings
from hopsearch.service.errors import HopsearchError
from hopsearch.service.store import Store

T = TypeVar("T")


def _with_keys(work: Callable[[KeyStore], Awaitable[T]]) -> T:
    settings = load_settings()

    async def go() -> T:
        async with await Store.connect(settings) as store:
            return await work(KeyStore.of(store, settings.api_key_cache_s))

    try:
        return asyncio.run(go())
    except HopsearchError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group("keys")
def keys() -> None:
    """Create, list and revoke the service's stored API keys (<prefix>-keys); add and remove the public
    keys of their end-user tokens."""


def token_kids(record: KeyRecord) -> str:
    """Return the ``kid`` each of the key's public keys' tokens name, as a sentence; empty where it has none."""
    if not record.token_keys:
        return ""
    kids = ", ".join(f"`{record.name}/{t.kid}` ({t.algorithm})" for t in record.token_keys)
    return f"end-user tokens of key {record.name} name kid {kids}"


@keys.command("create")
@click.argument("name")
@click.option("--principal", "principals", multiple=True, help="user:NAME, group:NAME or public (repeatable).")
@click.option("--index", "indices", multiple=True, help="Index pattern the key may use (repeatable; default *).")
@click.option(
    "--action",
    "actions",
    multiple=True,
    type=click.Choice(sorted(ACTIONS)),
    help="What the key may do (repeatable; default: every action but admin).",
)
@click.option("--admin", is_flag=True, help="An admin key: reads everything, manages keys, reads /_metrics.")
@click.option("--expires", default=None, help="Expires after this long: 90d, 12h, 30m, 2w (default: never).")
@click.option("--concurrent-asks", type=click.IntRange(min=1), default=None, help="Questions in flight at once.")
@click.option("--per-minute", type=click.IntRange(min=1), default=None, help="Requests per minute.")
@click.option(
    "--token-public-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="PEM public key of the end-user tokens this key's back end signs.",
)
@click.option("--token-alg", type=click.Choice(ALGORITHMS), default=None, help="The algorithm of those tokens.")
@click.option(
    "--token-key-id",
    default=None,
    help="Id of that public key: tokens name kid NAME/ID (default: the key's name).",
)
@click.option("--namespace", default=None, help="Outline namespace bound to the key.")
@click.option(
    "--user-header",
    default=None,
    help="A header naming each request's end user (X-OpenWebUI-User-Email): the key acts only for them, "
    "and its secret is every one of its users' credential.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object; its `key` is the secret.")
def create(
    name: str,
    principals: tuple[str, ...],
    indices: tuple[str, ...],
    actions: tuple[str, ...],
    admin: bool,
    expires: str | None,
    concurrent_asks: int | None,
    per_minute: int | None,
    token_public_key: Path | None,
    token_alg: str | None,
    token_key_id: str | None,
    namespace: str | None,
    user_header: str | None,
    as_json: bool,
) -> None:
    """Create key NAME and print its secret (shown this once: only a hash is stored)."""
    pem = token_public_key.read_text(encoding="utf-8") if token_public_key is not None else None
    new = NewKey(
        name=name,
        principals=principals,
        indices=indices,
        actions=actions,
        admin=admin,
        expires=expires,
        concurrent_asks=concurrent_asks,
        per_minute=per_minute,
        token_algorithm=token_alg,
        token_public_pem=pem,
        token_key_id=token_key_id,
        namespace=namespace,
        user_header=user_header,
    )
    secret, record = _with_keys(lambda store: store.create(new))
    if as_json:
        echo_json({**listed(record), "key": secret}, indent=None)
        return
    if record.token_keys:  # before the secret, which stays the last line
        click.echo(token_kids(record))
    if record.user_header:
        click.echo(f"key {record.name} acts for the user its header {record.user_header} names, never for itself")
    click.echo(f"created key {record.name}; its secret (shown once, keep it):")
    click.echo(secret)


@keys.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the keys as JSON.")
def list_keys(as_json: bool) -> None:
    """Every key with its state, principals, scopes and limits (never a secret)."""
    rows = [listed(record) for record in _with_keys(lambda store: store.keys())]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no stored keys")
        return
    table = Table(title="API keys")
    columns = ("name", "state", "admin", "principals", "indices", "actions", "expires", "limits", "public keys")
    for column in (*columns, "user header"):
        table.add_column(column, overflow="fold")
    for row in rows:
        limits = ", ".join(f"{k}={v}" for k, v in row["limits"].items() if v is not None)
        table.add_row(
            row["name"],
            row["state"],
            "yes" if row["admin"] else "",
            " ".join(row["principals"]),
            " ".join(row["indices"]),
            " ".join(row["actions"]),
            row["expires"] or "never",
            limits,
            ", ".join(f"{t['kid']} ({t['algorithm']})" for t in row["token_keys"]),
            row.get("user_header") or "",
        )
    Console(width=160).print(table)


@keys.command("revoke")
@click.argument("name")
def revoke(name: str) -> None:
    """Revoke key NAME: every service process refuses it within a second (the name stays taken)."""
    record = _with_keys(lambda store: store.revoke(name))
    click.echo(f"revoked key {record.name}")


@keys.command("add-public-key")
@click.argument("name")
@click.argument("key_id")
@click.argument("public_key", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--alg", "algorithm", type=click.Choice(ALGORITHMS), required=True, help="The algorithm of its tokens.")
def add_public_key(name: str, key_id: str, public_key: Path, algorithm: str) -> None:
    """Register one more PEM public key, KEY_ID, with key NAME: tokens signed with it name kid NAME/KEY_ID,
    and those of its other public keys stay accepted (rotate: add the new one, move the back end to it,
    remove the old one)."""
    pem = public_key.read_text(encoding="utf-8")
    record = _with_keys(lambda store: store.add_token_key(name, key_id, algorithm, pem))
    click.echo(f"added public key {key_id} to key {record.name}; {token_kids(record)}")


@keys.command("remove-public-key")
@click.argument("name")
@click.argument("key_id")
def remove_public_key(name: str, key_id: str) -> None:
    """Remove public key KEY_ID from key NAME: tokens naming kid NAME/KEY_ID are refused from then on
    (within a second in every service process); the key and its other public keys stay."""
    record = _with_keys(lambda store: store.remove_token_key(name, key_id))
    left = token_kids(record) or f"key {record.name} has no public key left: it takes no end-user tokens"
    click.echo(f"removed public key {key_id} from key {record.name}; {left}")
