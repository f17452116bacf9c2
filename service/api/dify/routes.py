"""``POST /retrieval``: Dify's External Knowledge API, so a Dify knowledge base reads hopsearch.

Dify appends ``/retrieval`` to the endpoint its *Add External Knowledge API* form names (hopsearch's base
URL) and sends ``Authorization: Bearer <key>`` (a hopsearch key: the gate checks it, with the ``search``
action) and ``{"knowledge_id", "query", "retrieval_setting": {"top_k", "score_threshold"},
"metadata_condition"}``. ``knowledge_id`` (the knowledge base's *External Knowledge ID*) is an index
the key may read: the passages alias, one of its versions, another passages index of the deployment or an
attached index. The search is the one use case every face calls
(:func:`~hopsearch.service.app.usecases.search_request`, :func:`~hopsearch.service.app.usecases.search`):
the caller's permissions, hidden fields and limits as on ``_retrieve``. The retrieval mode is the
deployment's for that index (``retrieval_mode``, bm25 where the index holds no vectors of the embedder)
and the hop the ``hops`` setting: Dify sends neither.

Answer ``{"records": [{"content", "score", "title", "metadata"}]}``: ``content`` the passage (an attached
document's best passage), ``title`` its title, ``metadata`` what ``_retrieve`` shows of its ``_source``
(paths relative to the indexed folder, hidden fields hidden) but the title and text, with ``_index`` and
``_id``. ``score`` is in 0–1 as Dify's ``score_threshold`` expects: BM25 and hybrid (RRF) scores are
divided by the first record's (the best record is 1.0, the others their share of it); dense scores are
Elasticsearch's cosine similarity, already in 0–1, kept; where non-admins get ranks
(``api_non_admin_scores = ranks``) a score is ``1 / rank``. Records below ``score_threshold`` are left out.

Errors take Dify's shape, ``{"error_code", "error_msg"}``
(:func:`~hopsearch.service.api.responses.dify_error_response`): 1001 (403) no or a malformed
``Authorization``, 1002 (403) a key that is not accepted or may not search, 2001 (404) a knowledge id that
is no index the key may read — an index outside its patterns answers 2001 too, in the same words, so
the answer never says whether it exists; any other error its HTTP status as ``error_code``.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from hopsearch.service.api.dify.conditions import dify_filters
from hopsearch.service.api.models import MAX_K, MAX_TEXT, _Request
from hopsearch.service.api.responses import OrjsonResponse
from hopsearch.service.api.state import caller_of, state_of
from hopsearch.service.app import usecases
from hopsearch.service.attached.fieldmap import FieldMap
from hopsearch.service.errors import AuthorizationError, IndexMissing, NotFound
from hopsearch.service.requests import Fields, Query
from hopsearch.service.types import SearchResult

router = APIRouter()
DIFY = Fields(text="body.query", k="body.retrieval_setting.top_k", filters="body.metadata_condition")
#: Dify's code for a knowledge id that is no index the key may read.
UNKNOWN_KNOWLEDGE = 2001


class _Lenient(_Request):
    model_config = ConfigDict(extra="ignore", frozen=True)  # fields a later Dify adds are not refused


class RetrievalSetting(_Lenient):
    top_k: int = Field(ge=1, le=MAX_K, description="Records at most (`api_max_k`).")
    score_threshold: float = Field(0.0, ge=0.0, le=1.0, description="The least score (0–1) of a record.")


class DifyCondition(_Lenient):
    name: str = Field(min_length=1, max_length=128, description="A passage field, else `metadata.<name>`.")
    comparison_operator: str = Field(min_length=1, max_length=32)
    value: str | int | float | list[str] | None = None


class MetadataCondition(_Lenient):
    logical_operator: Literal["and", "or"] = "and"
    conditions: list[DifyCondition] = Field(default_factory=list, max_length=32)


class DifyRetrievalRequest(_Lenient):
    knowledge_id: str = Field(min_length=1, max_length=255, description="An index or alias the key may read.")
    query: str = Field(min_length=1, max_length=MAX_TEXT)
    retrieval_setting: RetrievalSetting
    metadata_condition: MetadataCondition | None = None


class DifyRecord(BaseModel):
    content: str
    score: float
    title: str
    metadata: dict[str, Any]


class DifyRetrievalResponse(BaseModel):
    records: list[DifyRecord]


def unknown_knowledge(knowledge_id: str) -> NotFound:
    """Return the one answer for a knowledge id that does not exist and for one the key may not read."""
    why = f"the knowledge [{knowledge_id}] does not exist (or this key may not read it)"
    return NotFound(why, details={"dify_code": UNKNOWN_KNOWLEDGE})


def normalised(result: SearchResult) -> list[float]:
    """Each hit's score in 0–1 (see the module docstring)."""
    scores = [float(hit.score or 0.0) for hit in result.hits]
    if result.mode == "dense" or not scores:
        return [min(1.0, max(0.0, s)) for s in scores]
    top = max(scores)
    return [max(0.0, s / top) if top > 0 else 0.0 for s in scores]


def records(result: SearchResult, index: str, fields: FieldMap, shown: Any, threshold: float) -> list[dict[str, Any]]:
    """Return the records of ``result``, as the caller is shown each hit (``shown``: the service's hit sources)."""
    out = []
    for hit, score in zip(result.hits, normalised(result), strict=True):
        if score < threshold:
            continue
        source = dict(shown(hit.source))
        mapped = shown.mapped(hit, fields)
        for name in (fields.title, fields.text, fields.vector):
            if name is not None:
                source.pop(name, None)
        metadata = {"_index": index, "_id": hit.id, **source}
        title, content = mapped.get("title", ""), mapped.get("excerpt", "")
        out.append({"content": content, "score": round(score, 6), "title": title, "metadata": metadata})
    return out


@router.post("/retrieval", response_model=None, responses={200: {"model": DifyRetrievalResponse}})
async def retrieval(request: Request, body: DifyRetrievalRequest) -> OrjsonResponse:
    """Dify's External Knowledge API over an index the key may read: its records in 0–1 scores."""
    state = state_of(request)
    runtime = await state.runtime()
    caller = caller_of(request.scope)
    filters = dify_filters(body.metadata_condition)
    try:
        index = await usecases.passages_index(runtime, caller, body.knowledge_id)
        mode = await runtime.retrieval_mode(None, index)
        query = Query(body.query, k=body.retrieval_setting.top_k, mode=mode, hops=runtime.settings.hops)
        search = await usecases.search_request(
            runtime, [query], caller=caller, index=index, filters=filters, fields=DIFY
        )
        [result] = await usecases.search(runtime, search)
    except IndexMissing as exc:
        raise unknown_knowledge(body.knowledge_id) from exc
    except AuthorizationError as exc:
        if exc.details.get("index") is None:
            raise
        raise unknown_knowledge(body.knowledge_id) from exc
    state.metrics.retrieval(result.mode)
    fields = await runtime.store.field_map(index)
    found = records(result, index, fields, state.hit_sources, body.retrieval_setting.score_threshold)
    return OrjsonResponse({"records": found})
