"""JSONL corpora in the BEIR shape: one ``{"_id", "title", "text", ...}`` object per line.

``_id`` (or ``id``) becomes the document ``_id``; ``acl`` (a string of comma-separated principals, or a
list) says who may read it (without one: the ``acl_default`` setting at search time); other fields than
``title`` and ``text`` go to ``metadata`` (BEIR's own ``metadata`` object is merged in). A bad principal
rejects the record, like the other faults below. Invalid JSON, a line that is not an
object, a missing id or an empty text is rejected with its line number and byte offset; blank lines
are skipped. ``.jsonl.gz`` works too. Positions are line numbers.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson

from hopsearch.loaders.acl import acl_value
from hopsearch.loaders.batching import LineFill, LineSource
from hopsearch.loaders.dpr import MAX_ID_BYTES
from hopsearch.loaders.model import SourceBatch


def beir_document(record: Any) -> tuple[str, dict[str, Any]] | str:
    """``(id, body)`` of one BEIR record, or the reason it is rejected."""
    if not isinstance(record, dict):
        return f"expected a JSON object, found {type(record).__name__}"
    raw_id = record.get("_id", record.get("id"))
    if raw_id is None or isinstance(raw_id, dict | list) or not str(raw_id).strip():
        return "missing _id"
    doc_id = str(raw_id)
    if len(doc_id.encode()) > MAX_ID_BYTES:
        return f"_id longer than {MAX_ID_BYTES} bytes"
    text = record.get("text")
    if not isinstance(text, str) or not text.strip():
        return "empty text"
    title = record.get("title") or ""
    if not isinstance(title, str):
        return "title is not a string"
    metadata: dict[str, Any] = {}
    if isinstance(record.get("metadata"), dict):
        metadata.update(record["metadata"])
    for key, value in record.items():
        if key not in ("_id", "id", "title", "text", "metadata", "acl"):
            metadata[key] = value
    body: dict[str, Any] = {"title": title, "text": text, "source": "jsonl", "doc_id": doc_id}
    if metadata:
        body["metadata"] = metadata
    if record.get("acl") is not None:
        try:
            body["acl"] = acl_value(record["acl"])
        except ValueError as exc:
            return f"acl: {exc}"
    return doc_id, body


class JsonlSource(LineSource):
    """Streams a JSONL corpus as batches of documents."""

    kind = "jsonl"

    def reader(self) -> LineFill:
        file = str(self.path)
        stamp = datetime.now(UTC).isoformat()

        def fill(batch: SourceBatch, lines: Iterator[tuple[int, bytes]], offset: int) -> int:
            for number, line in lines:
                here = offset
                offset += len(line)
                batch.last = number
                where = {"file": file, "line": number, "offset": here}
                if not line.strip():
                    batch.skipped += 1
                    continue
                try:
                    parsed = beir_document(orjson.loads(line))
                except orjson.JSONDecodeError as exc:
                    batch.reject(number, where, f"invalid JSON: {exc}", line[:300].decode("utf-8", "replace"))
                    continue
                if isinstance(parsed, str):
                    batch.reject(number, where, parsed, line[:300].decode("utf-8", "replace"))
                    continue
                doc_id, body = parsed
                body["indexed_at"] = stamp
                batch.add(number, doc_id, body, where)
            return offset

        return fill
