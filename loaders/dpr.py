"""DPR Wikipedia passages: ``psgs_w100.tsv`` or ``.tsv.gz`` (header ``id	text	title``).

Fields are CSV-quoted with doubled quotes: a line is split at its tabs and its quoted fields are
unquoted where that is unambiguous; anything else goes through the ``csv`` module (tab delimiter,
strict quoting), and a property test holds the two equal. Lines are read as bytes and decoded one by
one, so one bad line is one rejection: invalid UTF-8, bad quoting, a wrong column count, an empty id
or text each go to the dead letters with the line number and byte offset (of the decompressed
stream). Blank lines are skipped.
Permissions: passages are ``public`` (Wikipedia), unless the header has a fourth column ``acl``
(``id	text	title	acl``): comma-separated principals per line (empty: public; a bad one rejects the line).
Positions are line numbers (the header is line 1); ``_id`` is the DPR id. Memory is constant: a batch
at a time.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson

from hopsearch.loaders.acl import PUBLIC_ACL, acl_value
from hopsearch.loaders.batching import LineFill, LineSource, open_lines
from hopsearch.loaders.bulk import ACTION_HEAD, ACTION_TAIL
from hopsearch.loaders.model import SourceBatch

csv.field_size_limit(1 << 24)

HEADER = ("id", "text", "title")
#: The header of a file whose passages say who may read them (``acl``: comma-separated principals).
HEADER_ACL = (*HEADER, "acl")
MAX_ID_BYTES = 512


class DprSource(LineSource):
    """Streams ``psgs_w100.tsv[.gz]`` as batches of passages.

    With ``encode`` (BM25-only loads: nothing is added to a passage) each passage's ``_bulk`` lines are
    written here, straight from the parsed fields, instead of a dict per passage that is serialised
    later: the same bytes, with less work per line.
    """

    kind = "dpr"
    header = "\t".join(HEADER).encode()
    with_acl = False

    def __init__(self, path: Path, *, encode: bool = False) -> None:
        super().__init__(path)
        self.encode = encode

    def batches(self, start_after: int, batch_size: int, limit: int | None) -> Iterator[SourceBatch]:
        self.with_acl = self._has_acl_column()
        self.header = "\t".join(HEADER_ACL if self.with_acl else HEADER).encode()
        return super().batches(start_after, batch_size, limit)

    def _has_acl_column(self) -> bool:
        lines, raw = open_lines(self.path)
        with raw, lines:
            return lines.readline().rstrip(b"\r\n") == "\t".join(HEADER_ACL).encode()

    def reader(self) -> LineFill:
        file = str(self.path)
        stamp = datetime.now(UTC).isoformat()
        dumps = orjson.dumps
        tail = b',"acl":' + dumps(list(PUBLIC_ACL)) + b',"indexed_at":' + dumps(stamp) + b"}\n"
        with_acl = self.with_acl
        encode = self.encode and not with_acl  # each line's own acl: built as a dict

        def fill(batch: SourceBatch, lines: Iterator[tuple[int, bytes]], offset: int) -> int:
            ids, bodies, encoded = batch.ids, batch.bodies, batch.encoded
            positions, offsets = batch.doc_pos, batch.offsets
            number = batch.last
            for number, line in lines:
                here = offset
                offset += len(line)
                acl: list[str] | str = list(PUBLIC_ACL)
                whole = line
                if with_acl:
                    line, acl = _split_acl(line)
                fields = parse_line(line) if not isinstance(acl, str) else (acl, whole[:300].decode("utf-8", "replace"))
                if isinstance(fields, list):
                    pid, passage, title = fields
                    ids.append(pid)
                    if encode:
                        pid_json = dumps(pid)
                        parts = (
                            ACTION_HEAD,
                            pid_json,
                            _TITLE,
                            dumps(title),
                            _TEXT,
                            dumps(passage),
                            _DOC_ID,
                            pid_json,
                            tail,
                        )
                        encoded.append(b"".join(parts))
                    else:
                        bodies.append(
                            {
                                "title": title,
                                "text": passage,
                                "source": "dpr",
                                "doc_id": pid,
                                "acl": acl,
                                "indexed_at": stamp,
                            }
                        )
                    positions.append(number)
                    offsets.append(here)
                elif line.isspace():
                    batch.skipped += 1
                else:
                    batch.reject(number, {"file": file, "line": number, "offset": here}, *fields)
            batch.last = number
            return offset

        return fill


#: The pieces of an encoded passage between its fields: the same bytes as ``orjson.dumps`` of the dict
#: ``{"title", "text", "source", "doc_id", "acl", "indexed_at"}`` in that order (a test holds them equal).
_TITLE = ACTION_TAIL + b'{"title":'
_TEXT = b',"text":'
_DOC_ID = b',"source":"dpr","doc_id":'


def _split_acl(line: bytes) -> tuple[bytes, list[str] | str]:
    """Return a line of a file with an ``acl`` column: the line without it, and the passage's acl (an empty cell:
    public) or the reason to reject the line. Principals hold no tab, so the column is after the last one."""
    body, tab, cell = line.rstrip(b"\r\n").rpartition(b"\t")
    if not tab:
        return line, "expected 4 tab-separated fields (id, text, title, acl), found 1"
    try:
        text = cell.decode("utf-8").strip()
        return body + b"\n", acl_value(text) if text else list(PUBLIC_ACL)
    except (UnicodeDecodeError, ValueError) as exc:
        return body + b"\n", f"acl: {exc}"


def parse_line(line: bytes) -> list[str] | tuple[str, str]:
    """Return the fields ``[id, text, title]`` of one (non-blank) line, or ``(reason, raw)`` to reject it.

    Three tab-separated fields, each plain or wholly quoted with only doubled quotes inside, with a
    short id and some text, are taken apart here field by field (nearly every line of
    ``psgs_w100.tsv``); anything else is decided by the ``csv`` module (strict) and :func:`_check`.
    """
    try:
        decoded = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 at byte {exc.start}", repr(line[:300])
    fields = decoded.split("\t")
    if len(fields) == 3:
        raw_id, raw_text, raw_title = fields
        raw_title = raw_title.rstrip("\r\n")
        pid = _unquoted(raw_id) if '"' in raw_id else raw_id
        passage = _unquoted(raw_text) if '"' in raw_text else raw_text
        title = _unquoted(raw_title) if '"' in raw_title else raw_title
        # a cheap subset of _check (an id of at most 128 characters has at most 512 UTF-8 bytes): a line
        # that passes it is accepted here; any other goes to csv + _check below for its verdict
        if (
            pid and passage and title is not None
            and not pid.isspace() and not passage.isspace() and len(pid) <= MAX_ID_BYTES // 4
        ):  # fmt: skip
            return [pid, passage, title]
    text = decoded.rstrip("\r\n")
    try:
        parsed = next(csv.reader((text,), delimiter="\t", strict=True))
    except csv.Error as exc:
        return f"bad quoting: {exc}", text[:300]
    reason = _check(parsed)
    if reason is not None:
        return reason, text[:300]
    return parsed


def _unquoted(field: str) -> str | None:
    """Return the value of a wholly quoted field with only doubled quotes inside (what ``csv`` returns), else
    ``None`` for the ``csv`` module to decide."""
    # split at every quote (a fast one-character search, unlike a replace of '""'): the outer quotes
    # leave an empty first and last piece, and quotes inside must come in pairs, so every other piece
    # between is empty too; the value is the rest joined by one quote
    pieces = field.split('"')
    if len(pieces) % 2 and not pieces[0] and not pieces[-1] and not any(pieces[2:-1:2]):
        return '"'.join(pieces[1:-1:2])
    return None  # a lone quote, or text outside the quotes: not ours to judge


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
