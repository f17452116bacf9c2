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


class QaContextSource:
    """Context paragraphs of a question file, deduplicated, as batches of passages."""

    kind = "qa"

    def __init__(self, path: Path) -> None:
        self.path = path

    def total(self) -> int | None:
        return self.path.stat().st_size

    def batches(self, start_after: int, batch_size: int, limit: int | None) -> Iterator[SourceBatch]:
        file = str(self.path)
        stamp = datetime.now(UTC).isoformat()
        seen: set[bytes] = set()
        batch = SourceBatch(after=start_after)
        position = 0
        budget = limit if limit is not None else -1
        for number, offset, record in _records(self.path):
            unit = "line" if offset >= 0 else "record"
            where: dict[str, Any] = {"file": file, unit: number}
            if offset >= 0:
                where["offset"] = offset
            if isinstance(record, InputError) or not isinstance(record, dict):
                items: list[tuple[str, dict[str, Any]] | str] = [
                    record.reason if isinstance(record, InputError) else "a record must be a JSON object"
                ]
            else:
                try:
                    parsed = parse_record(record, source=file, position=number)
                except InputError as exc:
                    items = [exc.reason]
                else:
                    items = [
                        (p.passage_id, {"title": p.title, "text": p.text, "dataset": parsed.dataset})
                        for p in parsed.paragraphs
                    ]
            for paragraph, item in enumerate(items):
                position += 1
                key = item[0].encode() if isinstance(item, tuple) else b""
                if position <= start_after:
                    seen.add(key)
                    continue
                if budget == 0:
                    break
                budget -= 1
                batch.read += 1
                batch.last = position
                if isinstance(item, str):
                    batch.reject(position, where, item)
                    continue
                if key in seen:
                    batch.skipped += 1
                    continue
                seen.add(key)
                doc_id, para = item
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
            if budget == 0:
                break
            if batch.read >= batch_size:
                batch.progress = max(offset, 0)
                yield batch
                batch = SourceBatch(after=batch.last)
        if batch.read:
            batch.progress = self.path.stat().st_size
            yield batch
