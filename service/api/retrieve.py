"""The body of a ``_retrieve`` answer: Elasticsearch's search envelope over what the ``search`` use case
found (the ``_retrieve`` route's, and :mod:`.middleware.fast_retrieve`'s for well-formed requests)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hopsearch.service import requests
from hopsearch.service.access import Caller
from hopsearch.service.api.models import RetrieveRequest
from hopsearch.service.api.state import ApiState
from hopsearch.service.app import usecases
from hopsearch.service.requests import HTTP_SEARCH
from hopsearch.service.retrieval import without_vectors_note
from hopsearch.service.types import Hit, SearchResult


def search_envelope(took: int, hits: list[dict[str, Any]], total: int | None = None) -> dict[str, Any]:
    scores = [h["_score"] for h in hits if h.get("_score") is not None]
    return {
        "took": took,
        "timed_out": False,
        "hits": {
            "total": {"value": len(hits) if total is None else total, "relation": "eq"},
            "max_score": max(scores) if scores else None,
            "hits": hits,
        },
    }


def retrieve_envelope(result: SearchResult, took: int, render: Callable[[Hit], dict[str, Any]]) -> dict[str, Any]:
    """Build a ``_retrieve`` answer: Elasticsearch's search envelope, each hit as ``render`` makes it, and the notes.

    ``render`` is :meth:`~hopsearch.service.retrieval.hit_sources.HitSources.hit`; the notes are the result's own
    (:meth:`~hopsearch.service.types.SearchResult.notes`), with both legs' lists where asked for.
    """
    body = search_envelope(took, [render(hit) for hit in result.hits]) | result.notes()
    if result.legs:
        body["legs"] = {name: [render(hit) for hit in hits] for name, hits in result.legs.items()}
    if result.without_vectors:
        body["warning"] = without_vectors_note(result.without_vectors)
    return body


async def run_retrieve(state: ApiState, caller: Caller, index: str, body: RetrieveRequest) -> dict[str, Any]:
    """Return the body of a ``_retrieve`` answer (this route's, and :mod:`.fast_retrieve`'s for well-formed
    requests)."""
    started = time.perf_counter()
    runtime = await state.runtime()
    query = requests.Query(body.query, body.k, body.mode, body.fusion, body.weights, body.legs, body.rerank, body.hops)
    search = await usecases.search_request(
        runtime,
        [query],
        caller=caller,
        index=index,
        filters=body.filters,
        fields=HTTP_SEARCH,
    )
    [result] = await usecases.search(runtime, search)
    state.metrics.retrieval(result.mode)
    index_name = search.scope.index
    fields = await runtime.store.field_map(index_name)
    took = round((time.perf_counter() - started) * 1000)
    return retrieve_envelope(result, took, lambda hit: state.hit_sources.hit(index_name, hit, fields))
