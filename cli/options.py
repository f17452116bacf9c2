"""The options ``ask`` and ``eval answers`` share, with the defaults of :mod:`hopsearch.service.requests`
(declared there once): ``--strategy``, ``--index``, ``--prefix``, ``--mode``, ``--retrieval-mode``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from hopsearch.service.requests import DEFAULT_POLICY, DEFAULT_STRATEGY
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
)


def ask_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(ASK_OPTIONS):
        f = option(f)
    return f
