"""Routes that read: ``/_health``, ``/_metrics``, ``POST /{index}/_retrieve``, outlines and
traces. Handlers return :class:`OrjsonResponse` bodies directly (no response-model re-validation on
the hot path); the pydantic models in :mod:`.models` document them."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from hopsearch.service.api.metrics import CONTENT_TYPE
from hopsearch.service.api.models import (
    DocumentResponse,
    HealthResponse,
    LivenessResponse,
    OutlineSearchRequest,
    RetrieveRequest,
    RetrieveResponse,
    SearchResponse,
)
from hopsearch.service.api.responses import OrjsonResponse
from hopsearch.service.api.retrieve import run_retrieve, search_envelope
from hopsearch.service.api.state import IndexName, caller_of, state_of
from hopsearch.service.app.health import readiness
from hopsearch.service.errors import HopsearchError, NotFound
from hopsearch.service.outlines.lineage import bound_namespace, reader_for
from hopsearch.service.outlines.store import EsOutlineStore
from hopsearch.service.requests import check_k
from hopsearch.service.traces import reads as trace_reads

router = APIRouter()


@router.get("/_health", response_model=None, responses={200: {"model": HealthResponse}, 503: {"model": HealthResponse}})
async def health(request: Request) -> OrjsonResponse:
    """Readiness (no API key needed): 200 when Elasticsearch answers and the LLM is ready or busy
    (``yellow``: a generation holds it; a busy model is not down), else 503."""
    state = state_of(request)
    timeout = state.settings.health_timeout
    try:
        runtime = await state.runtime()
    except HopsearchError as exc:
        body = {
            "status": "red",
            "ready": False,
            "elasticsearch": {"reachable": False, "error": exc.error_type},
            "llm": {"reachable": False, "state": "unknown", "error": "not probed: no runtime without Elasticsearch"},
        }
        return OrjsonResponse(body, status_code=503)
    body = await readiness(runtime.store, runtime.llm, timeout)
    return OrjsonResponse(body, status_code=200 if body["ready"] else 503)


@router.get("/_health/live", response_model=None, responses={200: {"model": LivenessResponse}})
async def live() -> OrjsonResponse:
    """Liveness (no API key needed): the process serves requests; no dependency is asked."""
    return OrjsonResponse({"status": "alive"})


@router.get("/_metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE: {}}}})
async def metrics(request: Request) -> Response:
    """Prometheus text format."""
    return Response(state_of(request).metrics.render(), media_type=CONTENT_TYPE)


@router.post("/{index}/_retrieve", response_model=None, responses={200: {"model": RetrieveResponse}})
async def retrieve(request: Request, index: IndexName, body: RetrieveRequest) -> OrjsonResponse:
    """BM25, dense or hybrid search with literal filters; the mode and dense method used are reported."""
    return OrjsonResponse(await run_retrieve(state_of(request), caller_of(request.scope), index, body))


@router.get("/_traces/{trace_id}", response_model=None, responses={200: {"model": DocumentResponse}})
async def get_trace(request: Request, trace_id: Annotated[str, Path(min_length=1, max_length=128)]) -> OrjsonResponse:
    """One trace document by its id (the asker's and admins' to read: anyone else's is not found)."""
    state = state_of(request)
    runtime = await state.runtime()
    index = state.settings.traces_index
    doc = await trace_reads.trace(runtime.store, index, trace_id, caller=caller_of(request.scope))
    if doc is None:
        raise NotFound(f"trace [{trace_id}] not found", details={"index": index})
    return OrjsonResponse({"_index": index, "_id": trace_id, "found": True, "_source": doc})


@router.get("/_outlines/{entity}", response_model=None, responses={200: {"model": DocumentResponse}})
async def get_outline(
    request: Request,
    entity: Annotated[str, Path(min_length=1, max_length=512)],
    namespace: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
) -> OrjsonResponse:
    """Return the knowledge outline of an entity (by key, name or alias), the most recently updated first: only the
    facts and aliases the caller may use (every passage they were derived from readable now), in the
    caller's key's namespace (admins: any, or the one named)."""
    state = state_of(request)
    runtime = await state.runtime()
    caller = caller_of(request.scope)
    space = bound_namespace(caller, namespace, state.settings.outline_namespace)
    outlines = EsOutlineStore(runtime.store, state.settings.outlines_index, runtime.outlines_config)
    found = await outlines.latest(entity, space, reader_for(caller, state.settings.acl_default))
    if found is None:
        raise NotFound(f"no outline for entity [{entity}]", details={"index": state.settings.outlines_index})
    hit, outline = found
    body = {"_index": hit["_index"], "_id": hit["_id"], "found": True, "_source": outline.to_document()}
    note = await outlines.note()
    return OrjsonResponse(body | ({"outlines_note": note} if note else {}))


@router.post("/_outlines/_search", response_model=None, responses={200: {"model": SearchResponse}})
async def search_outlines(request: Request, body: OutlineSearchRequest) -> OrjsonResponse:
    """Outlines by entity (key, name or alias) and/or text over names, aliases and facts: only facts and
    aliases the caller may use are matched, ranked, counted and shown."""
    started = time.perf_counter()
    state = state_of(request)
    check_k(body.size, state.settings.api_max_k, "body.size")
    runtime = await state.runtime()
    caller = caller_of(request.scope)
    space = bound_namespace(caller, body.namespace, state.settings.outline_namespace)
    outlines = EsOutlineStore(runtime.store, state.settings.outlines_index, runtime.outlines_config)
    found, total = await outlines.search_outlines(
        query=body.query,
        entity=body.entity,
        namespace=space,
        size=body.size,
        reader=reader_for(caller, state.settings.acl_default),
    )
    hits = [
        {"_index": h["_index"], "_id": h["_id"], "_score": h.get("_score"), "_source": outline.to_document()}
        for h, outline in found
    ]
    envelope = search_envelope(round((time.perf_counter() - started) * 1000), hits, total)
    note = await outlines.note()
    return OrjsonResponse(envelope | ({"outlines_note": note} if note else {}))
