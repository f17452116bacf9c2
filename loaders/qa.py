"""The ``context`` paragraphs of HotpotQA / 2WikiMultihopQA / MuSiQue question files as a corpus.

Records are parsed by :mod:`hopsearch.loaders.questions` (the evaluation's reader), so the paragraph
ids are the evaluation's: ``sha1(title + "\\n" + text)``. Positions are paragraphs, numbered in file
order; a record that cannot be read (bad JSON, no context) is one rejected position. A paragraph seen
before in the same file (distractors repeat across questions) is skipped. JSON Lines stream in
constant memory; a JSON array (the official HotpotQA / 2Wiki files) is read whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from hopsearch.loaders.acl import PUBLIC_ACL
from hopsearch.loaders.batching import FileSource, cut
from hopsearch.loaders.model import SourceBatch
from hopsearch.loaders.questions import parse_record
from hopsearch.service.errors import InputError


def _records(path: Path) -> Iterator[tuple[int, int, Any | InputError]]:
    """``(record number, byte offset or -1, record or error)`` in file order."""
    with path.open("rb") as fh:
        head = fh.read(64).lstrip()
    if head.startswith(b"["):
        try:
            data = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            yield 1, -1, InputError(f"invalid JSON array: {exc}", source=str(path))
            return
        for number, record in enumerate(data, start=1):
            yield number, -1, record
        return
    offset = 0
    with path.open("rb") as fh:
        for number, line in enumerate(fh, start=1):
            here = offset
            offset += len(line)
            if not line.strip():
                continue
            try:
                yield number, here, orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                yield number, here, InputError(f"invalid JSON: {exc}", source=str(path), position=number)


#: One position: ``(position, where, paragraph number in its record, (id, paragraph) or the reason)``
Unit = tuple[int, dict[str, Any], int, tuple[str, dict[str, Any]] | str]


def _items(path: Path, record: Any | InputError, number: int) -> list[tuple[str, dict[str, Any]] | str]:
    """Return a record's paragraphs as ``(id, paragraph)``, or one reason it cannot be read."""
    if isinstance(record, InputError) or not isinstance(record, dict):
        return [record.reason if isinstance(record, InputError) else "a record must be a JSON object"]
    try:
        parsed = parse_record(record, source=str(path), position=number)
    except InputError as exc:
        return [exc.reason]
    return [(p.passage_id, {"title": p.title, "text": p.text, "dataset": parsed.dataset}) for p in parsed.paragraphs]


class QaContextSource(FileSource):
    """Context paragraphs of a question file, deduplicated, as batches of passages."""

    kind = "qa"

    def batches(self, start_after: int, batch_size: int, limit: int | None) -> Iterator[SourceBatch]:
        file = str(self.path)
        stamp = datetime.now(UTC).isoformat()
        seen: set[bytes] = set()
        at = 0  # byte offset of the record being read: the progress

        def paragraphs() -> Iterator[Unit]:
            nonlocal at
            position = 0
            for number, offset, record in _records(self.path):
                at = max(offset, at)
                unit = "line" if offset >= 0 else "record"
                where: dict[str, Any] = {"file": file, unit: number}
                if offset >= 0:
                    where["offset"] = offset
                for paragraph, item in enumerate(_items(self.path, record, number)):
                    position += 1
                    if position > start_after:
                        yield position, where, paragraph, item
                    elif isinstance(item, tuple):
                        seen.add(item[0].encode())  # checkpointed, but its duplicates are skipped still
            at = self.path.stat().st_size

        def fill(batch: SourceBatch, units: Iterator[Unit]) -> None:
            for position, where, paragraph, item in units:
                batch.last = position
                if isinstance(item, str):
                    batch.reject(position, where, item)
                    continue
                doc_id, para = item
                key = doc_id.encode()
                if key in seen:
                    batch.skipped += 1
                    continue
                seen.add(key)
                if not para["text"].strip():
                    batch.reject(position, {**where, "paragraph": paragraph}, "empty paragraph text")
                    continue
                body = {
                    "title": para["title"],
                    "text": para["text"],
                    "source": "qa",
                    "doc_id": doc_id,
                    "metadata": {"dataset": para["dataset"]},
                    "acl": list(PUBLIC_ACL),  # benchmark corpora are public
                    "indexed_at": stamp,
                }
                batch.add(position, doc_id, body, {**where, "paragraph": paragraph})

        yield from cut(
            paragraphs(), fill, start_after=start_after, batch_size=batch_size, limit=limit, progress=lambda _: at
        )
