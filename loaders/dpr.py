"""DPR Wikipedia passages: ``psgs_w100.tsv`` or ``.tsv.gz`` (header ``id	text	title``).

Fields are CSV-quoted with doubled quotes, so every line goes through the ``csv`` module (tab
delimiter, strict quoting). Lines are read as bytes and decoded one by one, so one bad line is one
rejection: invalid UTF-8, bad quoting, a wrong column count, an empty id or text each go to the dead
letters with the line number and byte offset (of the decompressed stream). Blank lines are skipped.
Positions are line numbers (the header is line 1); ``_id`` is the DPR id. Memory is constant: a batch
at a time.
"""

from __future__ import annotations

import csv
import gzip
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from hopsearch.loaders.model import SourceBatch

csv.field_size_limit(1 << 24)

HEADER = ("id", "text", "title")
MAX_ID_BYTES = 512


def open_lines(path: Path) -> tuple[BinaryIO | gzip.GzipFile, BinaryIO]:
    """``(lines, raw)``: the (decompressed) byte stream and the file whose ``tell()`` measures progress."""
    raw = path.open("rb", buffering=1 << 20)
    if path.suffix == ".gz":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw
    return raw, raw


class DprSource:
    """Streams ``psgs_w100.tsv[.gz]`` as batches of passages."""

    kind = "dpr"

    def __init__(self, path: Path) -> None:
        self.path = path

    def total(self) -> int | None:
        return self.path.stat().st_size

    def batches(self, start_after: int, batch_size: int, limit: int | None) -> Iterator[SourceBatch]:
        file = str(self.path)
        stamp = datetime.now(UTC).isoformat()
        lines, raw = open_lines(self.path)
        budget = -1 if limit is None else limit  # lines still to read; -1: no limit
        with raw, lines:
            batch = SourceBatch(after=start_after, file=file)
            ids, bodies, positions, offsets = batch.ids, batch.bodies, batch.doc_pos, batch.offsets
            offset = read = number = 0
            for number, line in enumerate(lines, start=1):
                here = offset
                offset += len(line)
                if number <= start_after:
                    continue
                if number == 1 and line.rstrip(b"\r\n").split(b"\t") == [h.encode() for h in HEADER]:
                    batch.after = 1
                    continue
                if budget == 0:
                    number -= 1  # this line is not read: the batch ends at the one before
                    break
                budget -= 1
                read += 1
                if line.isspace():
                    batch.skipped += 1
                elif isinstance(fields := parse_line(line), tuple):
                    batch.reject(number, {"file": file, "line": number, "offset": here}, *fields)
                else:
                    pid, passage, title = fields
                    ids.append(pid)
                    bodies.append(
                        {"title": title, "text": passage, "source": "dpr", "doc_id": pid, "indexed_at": stamp}
                    )
                    positions.append(number)
                    offsets.append(here)
                if read >= batch_size:
                    batch.read, batch.last, batch.progress = read, number, raw.tell()
                    yield batch
                    batch = SourceBatch(after=number, file=file)
                    ids, bodies, positions, offsets = batch.ids, batch.bodies, batch.doc_pos, batch.offsets
                    read = 0
            if read or batch.after != start_after:
                batch.read, batch.last, batch.progress = read, max(number, batch.after), raw.tell()
                yield batch


def parse_line(line: bytes) -> list[str] | tuple[str, str]:
    """The fields ``[id, text, title]`` of one (non-blank) line, or ``(reason, raw)`` to reject it."""
    try:
        parts = line.decode("utf-8").split("\t")
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 at byte {exc.start}", repr(line[:300])
    parts[-1] = parts[-1].rstrip("\r\n")
    fields = _unquote(parts) if b'"' in line else parts
    if fields is None:
        text = line.decode("utf-8").rstrip("\r\n")
        try:
            fields = next(csv.reader((text,), delimiter="\t", strict=True))
        except csv.Error as exc:
            return f"bad quoting: {exc}", text[:300]
    reason = _check(fields)
    if reason is not None:
        return reason, line.decode("utf-8").rstrip("\r\n")[:300]
    return fields


def _unquote(fields: list[str]) -> list[str] | None:
    """The fields of a line whose quoting is unambiguous (each field plain, or wholly quoted with only
    doubled quotes inside: what ``csv`` returns), else ``None`` for the ``csv`` module to decide."""
    out = fields
    for n, field in enumerate(fields):
        if '"' not in field:
            continue
        if len(field) < 2 or field[0] != '"' or field[-1] != '"':
            return None
        # quotes inside must come in pairs: split at each (a fast one-character search, unlike a
        # replace of '""'), every other piece is then empty, and the value is the rest joined by one
        pieces = field[1:-1].split('"')
        if not len(pieces) % 2 or any(pieces[1::2]):  # a lone quote inside: not ours to judge
            return None
        if out is fields:
            out = list(fields)
        out[n] = '"'.join(pieces[::2])
    return out


def _check(fields: list[str]) -> str | None:
    if len(fields) != 3:
        return f"expected 3 tab-separated fields (id, text, title), found {len(fields)}"
    pid, passage, _ = fields
    if not pid or pid.isspace():
        return "empty id"
    if len(pid.encode()) > MAX_ID_BYTES:
        return f"id longer than {MAX_ID_BYTES} bytes"
    if not passage or passage.isspace():
        return "empty text"
    return None
