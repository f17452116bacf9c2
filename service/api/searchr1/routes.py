"""``POST /retrieve`` in the shape of Search-R1's retrieval server, for agents trained against it.

Request ``{"queries": [...], "topk": k, "return_scores": true}``; answer ``{"result": [...]}`` with one
list per query, in order. Each item is ``{"document": {"id", "contents"}, "score"}``, or the document
alone when ``return_scores`` is false (as Search-R1's own server answers). ``contents`` is the title in
double quotes, a newline, then the text: the layout of Search-R1's wiki corpus, which its clients split
on the first newline. The title and text are the hit's mapped ``title`` and ``excerpt``
(:func:`~hopsearch.service.retrieval.hit_sources.mapped`: what ``_retrieve`` shows under ``hopsearch``), empty
where the field they come from is hidden from the caller. The whole batch is ONE ``_msearch`` on the
passages alias (or the ``index`` the request names: a version, an attached index).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from hopsearch.service.api.models import MAX_K, _Request
from hopsearch.service.api.responses import OrjsonResponse
from hopsearch.service.api.state import caller_of, state_of
from hopsearch.service.app import usecases
from hopsearch.service.errors import RequestInvalid
from hopsearch.service.requests import Fields, Query
from hopsearch.service.types import Hit, RetrievalMode

router = APIRouter()
SEARCH_R1 = Fields(text="body.queries", k="body.topk")


class SearchR1Request(_Request):
    queries: list[str] = Field(min_length=1, max_length=100_000, description="Plain-text queries, answered in order.")
    topk: int | None = Field(None, ge=1, le=MAX_K, description="Passages per query (default `retrieve_topk`).")
    return_scores: bool = Field(False, description="Wrap each document as `{document, score}`.")
    mode: RetrievalMode | None = Field(None, description="bm25, dense or hybrid (default `retrieve_mode`).")
    hops: Literal[0, 1] = Field(0, description="1: also the passages each query and its first hop name (by title).")
    index: str | None = Field(
        None, max_length=255, description="The passages alias (default), one of its versions, or an attached index."
    )


class SearchR1Document(BaseModel):
    id: str
    contents: str


class SearchR1Scored(BaseModel):
    document: SearchR1Document
    score: float


class SearchR1Response(BaseModel):
    result: list[list[SearchR1Scored]] | list[list[SearchR1Document]]


def contents(shown: Mapping[str, str]) -> str:
    """Search-R1's corpus layout: ``"Title"`` on the first line, the passage text after it (from a hit's
    mapped values as the caller may see them)."""
    return f'"{shown.get("title", "")}"\n{shown.get("excerpt", "")}'


def result_item(hit: Hit, shown: Mapping[str, str], return_scores: bool) -> dict[str, Any]:
    document = {"id": hit.id, "contents": contents(shown)}
    return {"document": document, "score": hit.score} if return_scores else document


@router.post("/retrieve", response_model=None, responses={200: {"model": SearchR1Response}})
async def retrieve_batch(request: Request, body: SearchR1Request) -> OrjsonResponse:
    """Search-R1's retrieval API over the passages alias: one list of passages per query."""
    state = state_of(request)
    settings = state.settings
    if len(body.queries) > settings.api_max_queries:
        raise RequestInvalid(f"at most {settings.api_max_queries} queries (api_max_queries)", field="body.queries")
    topk = body.topk or settings.retrieve_topk
    mode = body.mode or settings.retrieve_mode
    runtime = await state.runtime()
    queries = [Query(text, k=topk, mode=mode, hops=body.hops) for text in body.queries]
    caller = caller_of(request.scope)
    state.limiter.queries(state.accounts(caller), len(queries))  # each query counts against per_minute
    index = body.index or None
    search = await usecases.search_request(runtime, queries, caller=caller, index=index, fields=SEARCH_R1)
    results = await usecases.search(runtime, search)
    for result in results:
        state.metrics.retrieval(result.mode)
    fields = await runtime.store.field_map(search.scope.index)
    shown = state.hit_sources.mapped
    rows = [[result_item(hit, shown(hit, fields), body.return_scores) for hit in result.hits] for result in results]
    return OrjsonResponse({"result": rows})
