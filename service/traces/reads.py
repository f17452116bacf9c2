"""Reading traces back: the most recent ones and one by id — the one place every front end (the viewer,
``GET /_traces/{id}``, MCP ``trace``, ``hopsearch traces``) reads the traces index through.

A trace belongs to whoever asked (``user.owner``: the subject namespaced by who vouches for it —
:func:`~hopsearch.service.access.owner_id` — so a back end minting ``sub=<another key's name>`` or
``sub=<an IdP user>`` owns none of their traces) and is read by them and by admins only: a list is filtered
in the query, and a trace of someone else reads as missing (the front ends answer 404, never saying that
it exists). A trace without ``user.owner`` (written before owners were namespaced, or before traces had
owners) or whose asker had no owner is for admins alone: its bare ``user.subject`` proves nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hopsearch.service.access import Caller
from hopsearch.service.store import Store

#: What a list of traces shows of each.
LIST_FIELDS = ("trace_id", "question", "strategy", "status", "started_at", "answer", "totals", "user")


def owner_filter(caller: Caller) -> dict[str, Any] | None:
    """Return the traces ``caller`` may read, as a filter clause; None for an admin (every trace)."""
    if caller.admin:
        return None
    if caller.owner is None:  # nobody to own a trace: none is theirs
        return {"bool": {"must_not": [{"match_all": {}}]}}
    return {"term": {"user.owner": caller.owner}}


def owns(caller: Caller, doc: Mapping[str, Any]) -> bool:
    """Whether ``caller`` may read the trace ``doc``."""
    user = doc.get("user")
    return caller.owns(user.get("owner") if isinstance(user, Mapping) else None)


def recent_body(size: int, fields: Sequence[str] = LIST_FIELDS, caller: Caller | None = None) -> dict[str, Any]:
    """Build the search body for the newest ``size`` traces (of those ``caller`` may read; None: all), ``fields`` of
    each."""
    body: dict[str, Any] = {"size": size, "sort": [{"started_at": {"order": "desc"}}], "_source": list(fields)}
    only = owner_filter(caller) if caller is not None else None
    if only is not None:
        body["query"] = {"bool": {"filter": [only]}}
    return body


async def recent_traces(
    store: Store, index: str, size: int, fields: Sequence[str] = LIST_FIELDS, *, caller: Caller
) -> list[dict[str, Any]]:
    """Return the newest ``size`` traces of ``index`` that ``caller`` may read (each with its ``_id``); none where the
    index does not exist yet."""
    if not await store.exists(index):
        return []
    found = await store.search(index, recent_body(size, fields, caller))
    return [dict(hit.get("_source") or {}, _id=hit["_id"]) for hit in found.get("hits", {}).get("hits", [])]


async def trace(store: Store, index: str, trace_id: str, *, caller: Caller) -> dict[str, Any] | None:
    """One trace document by id, or None where there is none or it is not ``caller``'s to read (the same
    answer: a caller cannot tell another's trace from a missing one)."""
    doc = await store.get_document(index, trace_id)
    return doc if doc is not None and owns(caller, doc) else None
