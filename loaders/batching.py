"""Cutting a source into batches: the checkpoint and limit bookkeeping every source shares.

A source numbers its positions 1, 2, … (lines, paragraphs, files) and reads the ones after the
checkpoint in order; how it passes over the checkpointed ones is its own (DPR and JSONL skip those lines
unparsed, QA must see their paragraphs to deduplicate the rest). :func:`cut` applies the ``limit``,
hands the source's ``fill`` at most ``batch_size`` positions at a time (``fill`` may stop sooner: a docs
batch is full at ``batch_size`` chunks) and chains the batches, each starting after the last position of
the one before. Positions are consecutive, so a batch's ``read`` is the positions it covers and no source
counts them itself. ``fill`` holds the source's own loop over a whole batch: one call per batch, not per
position, keeps DPR's line loop as tight as it was.

:class:`LineSource` is the rest that DPR and JSONL share: a (``.gz``) file of one record per line, an
optional header line, positions that are line numbers, byte offsets for the dead letters and the bytes
read of the file as progress.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from functools import partial
from itertools import chain, islice
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from hopsearch.loaders.model import SourceBatch

U = TypeVar("U")

#: Reads the positions of an iterator into a batch and sets ``batch.last`` to the last one it read.
Fill = Callable[[SourceBatch, Iterator[U]], None]
#: ``(batch, (line number, line) pairs, byte offset of the first) -> byte offset after the last read``
LineFill = Callable[[SourceBatch, Iterator[tuple[int, bytes]], int], int]


def cut(
    units: Iterator[U],
    fill: Fill[U],
    *,
    start_after: int,
    batch_size: int,
    limit: int | None,
    progress: Callable[[SourceBatch], int],
    make: Callable[[int], SourceBatch] = SourceBatch,
    after: int | None = None,
) -> Iterator[SourceBatch]:
    """Yield the batches of ``units`` (one per position after ``start_after``, in order).

    ``after``: where the first batch starts when the source passed over positions without reading them
    (DPR's header is line 1): that batch is yielded even if it reads nothing, so the checkpoint moves on.
    ``progress`` gives a batch's progress units once it is filled; ``make`` a new batch after a position."""
    rest = units if limit is None else islice(units, limit)
    first = start_after
    after = start_after if after is None else after
    while True:
        batch = make(after)
        batch.last = after
        fill(batch, islice(rest, batch_size))
        batch.read = batch.last - after
        if not batch.read:
            if after != first:
                batch.progress = progress(batch)
                yield batch
            return
        batch.progress = progress(batch)
        yield batch
        first = after = batch.last


def open_lines(path: Path) -> tuple[BinaryIO | gzip.GzipFile, BinaryIO]:
    """``(lines, raw)``: the (decompressed) byte stream and the file whose ``tell()`` measures progress."""
    raw = path.open("rb", buffering=1 << 20)
    if path.suffix == ".gz":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw
    return raw, raw


class FileSource:
    """A source read from one file, its size in bytes the unit of progress."""

    kind = ""
    resumable = True

    def __init__(self, path: Path) -> None:
        self.path = path

    def total(self) -> int | None:
        return self.path.stat().st_size

    def own_passages(self) -> dict[str, Any]:
        """Return the passages of this kind (``source`` is the kind: a file's passages do not record which file)."""
        return {"term": {"source": self.kind}}


class LineSource(FileSource):
    """A file of one record per line (``.gz`` too): positions are line numbers (the header, if any, is
    line 1 and never read), offsets are of the decompressed stream. Subclasses give :meth:`reader`."""

    #: a first line that names the columns instead of holding a record
    header: bytes | None = None

    def reader(self) -> LineFill:
        """Return the fill of one load (its state, such as the time stamp of its documents, made once)."""
        raise NotImplementedError

    def batches(self, start_after: int, batch_size: int, limit: int | None) -> Iterator[SourceBatch]:
        lines, raw = open_lines(self.path)
        with raw, lines:
            offset = 0
            for line in islice(lines, start_after):  # what the checkpoint covers (the header included)
                offset += len(line)
            after, rest = start_after, iter(lines)
            if start_after == 0 and self.header is not None and (first := lines.readline()):
                if first.rstrip(b"\r\n") == self.header:
                    offset, after = len(first), 1
                else:
                    rest = chain((first,), lines)
            read_lines = self.reader()

            def fill(batch: SourceBatch, numbered: Iterator[tuple[int, bytes]]) -> None:
                nonlocal offset
                offset = read_lines(batch, numbered, offset)

            yield from cut(
                enumerate(rest, start=after + 1),
                fill,
                start_after=start_after,
                after=after,
                batch_size=batch_size,
                limit=limit,
                progress=lambda _: raw.tell(),
                make=partial(SourceBatch, file=str(self.path)),
            )
