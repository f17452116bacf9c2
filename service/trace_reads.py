"""Reading traces back: the most recent ones and one by id — the one place every front end (the viewer,
``GET /_traces/{id}``, MCP ``trace``, ``hopsearch traces``) reads the traces index through."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hopsearch.service.store import Store

#: What a list of traces shows of each.
LIST_FIELDS = ("trace_id", "question", "strategy", "status", "started_at", "answer", "totals")


def recent_body(size: int, fields: Sequence[str] = LIST_FIELDS) -> dict[str, Any]:
    """The newest ``size`` traces, ``fields`` of each."""
    return {"size": size, "sort": [{"started_at": {"order": "desc"}}], "_source": list(fields)}


async def recent_traces(
    store: Store, index: str, size: int, fields: Sequence[str] = LIST_FIELDS
) -> list[dict[str, Any]]:
    """The newest ``size`` traces of ``index`` (each with its ``_id``); none where the index does not exist yet."""
    if not await store.exists(index):
        return []
    found = await store.search(index, recent_body(size, fields))
    return [dict(hit.get("_source") or {}, _id=hit["_id"]) for hit in found.get("hits", {}).get("hits", [])]


async def trace(store: Store, index: str, trace_id: str) -> dict[str, Any] | None:
    """One trace document by id, or None."""
    return await store.get_document(index, trace_id)
