"""One registry of corpus kinds: ``hopsearch.load``, ``hopsearch index <kind>`` and ``LoadKind`` all read
``loaders.api.LOADERS`` (issue 26); and the one batching helper every source cuts its batches with."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import click
import pytest

import hopsearch
from hopsearch.cli.index import index
from hopsearch.loaders import api
from hopsearch.loaders.batching import cut
from hopsearch.loaders.model import SourceBatch


def test_every_front_end_has_exactly_the_registered_kinds() -> None:
    kinds = set(api.LOADERS)
    assert set(get_args(hopsearch.LoadKind)) == kinds == {"dpr", "jsonl", "qa", "docs"}
    assert isinstance(index, click.Group) and set(index.commands) == kinds
    for kind, loader in api.LOADERS.items():
        command = index.commands[kind]
        options = {name for param in command.params for name in param.opts}
        assert ("--resume" in options) == loader.resumable and "--rebuild" in options
        assert command.help == loader.summary
    assert api.LOADERS["dpr"].load is hopsearch.load_dpr and api.LOADERS["docs"].load is hopsearch.load_docs
    assert hopsearch.load_dpr.__name__ == "load_dpr" and hopsearch.load_qa_contexts.__doc__


async def test_load_refuses_an_unknown_kind(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="choose one of dpr, jsonl, qa, docs"):
        await hopsearch.load(None, tmp_path, kind="csv")  # type: ignore[arg-type]


def _fill(batch: SourceBatch, units: Iterator[int]) -> None:
    for position in units:
        batch.last = position
        if position % 5 == 0:
            batch.skipped += 1


@pytest.mark.parametrize(
    ("start_after", "limit", "lasts"),
    [(0, None, [3, 6, 9, 11]), (4, None, [7, 10, 11]), (0, 7, [3, 6, 7]), (9, 5, [11]), (11, None, [])],
)
def test_cut_chains_batches_and_applies_the_limit(start_after: int, limit: int | None, lasts: list[int]) -> None:
    units = iter(range(start_after + 1, 12))
    batches = list(
        cut(units, _fill, start_after=start_after, batch_size=3, limit=limit, progress=lambda b: 10 * b.last)
    )
    assert [b.last for b in batches] == lasts
    assert [b.after for b in batches] == [start_after, *lasts][: len(lasts)]
    assert all(b.read == b.last - b.after and b.progress == 10 * b.last for b in batches)


def test_cut_moves_past_positions_passed_over_unread() -> None:
    """A source that passed over a header (DPR: line 1) yields that move even when nothing follows."""
    batches = list(cut(iter(()), _fill, start_after=0, after=1, batch_size=3, limit=None, progress=lambda _: 7))
    assert [(b.after, b.last, b.read, b.progress) for b in batches] == [(1, 1, 0, 7)]
