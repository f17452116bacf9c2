"""The options ``ask`` and ``eval answers`` share, with the defaults of :mod:`hopsearch.service.requests`
(declared there once): ``--strategy``, ``--index``, ``--prefix``, ``--mode``, ``--retrieval-mode``, ``--hops``,
``--seed/--no-seed``; and whom a command acts as (``--key``, ``--principal``: ``ask``, ``search``, ``eval``,
``traces``, ``outlines``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import click

from hopsearch.service.access import ADMIN, Caller
from hopsearch.service.auth.keys import KeyStore, caller_for_secret, caller_of_principals
from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import AuthorizationError, HopsearchError, InputError
from hopsearch.service.requests import DEFAULT_POLICY, DEFAULT_STRATEGY
from hopsearch.service.store import Store
from hopsearch.service.strategies import STRATEGIES

ASK_OPTIONS = (
    click.option("--strategy", type=click.Choice(sorted(STRATEGIES)), default=DEFAULT_STRATEGY, show_default=True),
    click.option("--index", default=None, help="Passages index or alias to answer from (default: <prefix>-passages)."),
    click.option("--prefix", default=None, help="Index prefix: passages alias, outlines and traces under it."),
    click.option(
        "--mode",
        type=click.Choice(["model", "always", "never"]),
        default=DEFAULT_POLICY,
        show_default=True,
        help="DeepRAG: retrieve when the model asks (model), every step (always) or never.",
    ),
    click.option(
        "--retrieval-mode",
        type=click.Choice(["bm25", "dense", "hybrid"]),
        default=None,
        help="Retrieval mode of the strategy (default: the retrieval_mode setting where set, else hybrid, bm25 "
        "for dualrag, where the index has vectors).",
    ),
    click.option(
        "--hops",
        type=click.IntRange(0, 1),
        default=None,
        help="Hops of the strategy's retrievals: 1 also follows the titles named (default: the hops setting).",
    ),
    click.option(
        "--seed/--no-seed",
        default=None,
        help="Start with the question's own retrieval, kept in the answer's context and citations "
        "(default: the seed setting, else the strategy's own: README, Strategies).",
    ),
)


def ask_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(ASK_OPTIONS):
        f = option(f)
    return f


CALLER_OPTIONS = (
    click.option(
        "--key",
        "key",
        default=None,
        metavar="SECRET",
        help="Act as this stored API key (looked up in <prefix>-keys): its principals, index patterns and "
        "actions. Default: as an admin.",
    ),
    click.option(
        "--principal",
        "principals",
        multiple=True,
        metavar="P",
        help="Act as a caller that is no admin, of these principals (user:NAME, group:NAME, public; repeatable).",
    ),
)


def caller_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--key SECRET`` / ``--principal P …``: whom a command acts as (:func:`cli_caller`)."""
    for option in reversed(CALLER_OPTIONS):
        f = option(f)
    return f


async def cli_caller(store: Store, key: str | None, principals: Sequence[str], action: str | None = None) -> Caller:
    """Return the caller of a command: the stored key ``key`` names, a non-admin of ``principals``, else an admin;
    refused (403) where ``action`` is one the key may not do."""
    caller = await _cli_caller(store, key, principals)
    if action is not None and not caller.may(action):
        allowed = ", ".join(sorted(caller.actions - {"admin"})) or "none"
        raise AuthorizationError(f"the API key [{caller.key}] may not use {action} (the key's actions: {allowed})")
    return caller


async def _cli_caller(store: Store, key: str | None, principals: Sequence[str]) -> Caller:
    if key is not None and principals:
        raise InputError("--key and --principal are exclusive: a key brings its own principals")
    if key is not None:
        return await caller_for_secret(KeyStore.of(store), key)
    if principals:
        return caller_of_principals(principals)
    return ADMIN


T = TypeVar("T")


def with_store(settings: Settings, work: Callable[[Store], Awaitable[T]]) -> T:
    """``work`` over a store connected for it (and closed after); a hopsearch error as a click error."""

    async def go() -> T:
        async with await Store.connect(settings) as store:
            return await work(store)

    try:
        return asyncio.run(go())
    except HopsearchError as exc:
        raise click.ClickException(str(exc)) from exc
