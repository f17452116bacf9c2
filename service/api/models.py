"""Request and response bodies of the HTTP service (pydantic; they are the OpenAPI document).

Filters are plain JSON here, validated by :mod:`hopsearch.service.retrieval.filters` (literal clauses over an
allow-list of passage fields; a bad one is a 400 naming it): user text never reaches Elasticsearch as
query-string syntax (questions and queries go into ``multi_match`` and kNN bodies only).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from hopsearch.service.api.json_depth import MAX_JSON_DEPTH
from hopsearch.service.requests import (
    DEFAULT_DEPTH,
    DEFAULT_MAX_TOKENS,
    DEFAULT_POLICY,
    DEFAULT_STRATEGY,
    SEARCH_K,
    SEARCH_MODE,
    Budget,
    RetrievalPolicy,
)
from hopsearch.service.types import Fusion, RetrievalMode

#: Absolute bounds of the schema; the configured limits (``api_max_*``) are usually tighter.
MAX_TEXT = 100_000
MAX_K = 10_000
#: The largest ``options.max_tokens`` (one generation's budget).
MAX_ANSWER_TOKENS = 4096

FILTERS_DOC = (
    "Metadata filters (hopsearch.service.retrieval.filters): term, terms, range, exists, and/or/not over source, path, "
    "doc_id, lang, url, title.keyword, content_sha, chunk, indexed_at and metadata.<name>; a bad one is a 400 "
    "naming the field. A path is relative to its indexed folder, as hits show it (absolute: starting with /)."
)
FilterSpec = dict[str, Any]


def _one_as_list(value: Any) -> Any:
    """One filter object is a list of one (the README's examples are single objects)."""
    return [value] if isinstance(value, dict) else value


#: ``filters``: a list of filters, or one filter object.
Filters = Annotated[list[FilterSpec], BeforeValidator(_one_as_list)]


def _check_text(value: Any, where: str, depth: int = 0) -> None:
    """Refuse lone surrogates (valid JSON escapes, but not UTF-8: no client could send them on). The
    service refuses deeper bodies before this (``json_depth``); the bound keeps the recursion safe anyway."""
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"{where or 'body'}: nested deeper than {MAX_JSON_DEPTH} arrays and objects")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{where or 'body'}: text is not valid Unicode (lone surrogate)") from exc
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, where, depth + 1)
            _check_text(item, f"{where}.{key}" if where else str(key), depth + 1)
    elif isinstance(value, list):
        for number, item in enumerate(value):
            _check_text(item, f"{where}.{number}", depth + 1)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Request(_Strict):
    """A request body: all of its text must be valid Unicode."""

    @model_validator(mode="before")
    @classmethod
    def _unicode(cls, data: Any) -> Any:
        _check_text(data, "")
        return data


class RetrieveRequest(_Request):
    query: str = Field(min_length=1, max_length=MAX_TEXT, description="Plain text (never query-string syntax).")
    k: int = Field(SEARCH_K, ge=1, le=MAX_K, description="Number of hits (at most `api_max_k`).")
    mode: RetrievalMode = Field(SEARCH_MODE, description="bm25, dense or hybrid.")
    filters: Filters = Field(default_factory=list, max_length=32, description=FILTERS_DOC)
    fusion: Fusion = Field("rrf", description="Hybrid: rrf (client-side), bool (one request), es_rrf (licence).")
    weights: tuple[float, float] = Field((1.0, 1.0), description="Hybrid, rrf and bool: weights of (bm25, dense).")
    legs: bool = Field(False, description="Hybrid: also return both legs' lists (`legs.bm25`, `legs.dense`).")
    rerank: bool = Field(False, description="Reorder the top hits with the configured reranker.")
    hops: Literal[0, 1] = Field(0, description="1: also the passages the query and the first hop name (by title).")


_BUDGET = Budget()


class BudgetModel(_Strict):
    max_steps: int = Field(_BUDGET.max_steps, ge=1, le=50)
    max_retrievals: int = Field(_BUDGET.max_retrievals, ge=0, le=100)
    max_llm_calls: int = Field(_BUDGET.max_llm_calls, ge=1, le=400)
    deadline_s: float | None = Field(
        None, ge=1, le=3600, description="Seconds the question may take (the strategy's timeout)."
    )

    def to_budget(self) -> Budget:
        return Budget(self.max_steps, self.max_retrievals, self.max_llm_calls, self.deadline_s)


class AskOptionsModel(_Strict):
    mode: RetrievalPolicy = DEFAULT_POLICY
    max_depth: int = Field(DEFAULT_DEPTH, ge=1, le=20)
    k: int | None = Field(None, ge=1, le=MAX_K, description="Passages per retrieval; default 5 for single, else 3.")
    retrieval_mode: RetrievalMode | None = Field(
        None,
        description="Default: the `retrieval_mode` setting where set, else the strategy's own "
        "(bm25 for dualrag, hybrid for the others) where the index has vectors.",
    )
    hops: Literal[0, 1] | None = Field(None, description="Hops of each retrieval; default: the `hops` setting.")
    seed: bool | None = Field(
        None,
        description="Start with the question's own retrieval, kept in the answer's context and citations; "
        "default: the `seed` setting, else the strategy's own (README, Strategies).",
    )
    filters: Filters = Field(default_factory=list, max_length=32, description=FILTERS_DOC)
    max_tokens: int = Field(DEFAULT_MAX_TOKENS, ge=1, le=MAX_ANSWER_TOKENS)
    budget: BudgetModel = Field(default_factory=lambda: BudgetModel.model_validate({}))


class AskRequest(_Request):
    question: str = Field(min_length=1, max_length=MAX_TEXT, description="At most `api_max_question_chars`.")
    strategy: str = Field(DEFAULT_STRATEGY, min_length=1, max_length=64, description="A strategy name (see `GET /`).")
    options: AskOptionsModel = Field(default_factory=lambda: AskOptionsModel.model_validate({}))
    stream: bool = Field(False, description="Server-Sent Events: one `step` event per step, then `answer`.")


class OutlineSearchRequest(_Request):
    query: str | None = Field(None, min_length=1, max_length=MAX_TEXT, description="Text over names and facts.")
    entity: str | None = Field(None, min_length=1, max_length=512, description="An entity name or alias.")
    namespace: str | None = Field(None, min_length=1, max_length=256)
    size: int = Field(10, ge=1, le=MAX_K)


# --- responses (documentation; the handlers build plain dicts) ---------------------------------------
class ErrorCause(BaseModel):
    type: str
    reason: str


class ErrorDetail(ErrorCause):
    root_cause: list[ErrorCause]
    field: str | None = None
    trace_id: str | None = None


class ErrorEnvelope(BaseModel):
    error: ErrorDetail
    status: int


class HitModel(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    index: str = Field(alias="_index")
    id: str = Field(alias="_id")
    score: float | None = Field(alias="_score")
    source: dict[str, Any] = Field(alias="_source")


class Total(BaseModel):
    value: int
    relation: Literal["eq", "gte"]


class Hits(BaseModel):
    total: Total
    max_score: float | None
    hits: list[HitModel]


class SearchResponse(BaseModel):
    took: int
    timed_out: bool
    hits: Hits


class MappedModel(BaseModel):
    """What hopsearch reads of a hit, whatever the index calls its fields; a key is left out where the field
    it comes from is not in the `_source` the caller is shown."""

    title: str | None = Field(None, description="The mapped title field.")
    text: str | None = Field(None, description="The mapped text field (an attached document's whole text).")
    excerpt: str | None = Field(
        None, description="What the strategies read: the passage, or an attached document's best passages."
    )


class RetrieveHitModel(HitModel):
    mapped: MappedModel = Field(alias="hopsearch")


class RetrieveHits(BaseModel):
    total: Total
    max_score: float | None
    hits: list[RetrieveHitModel]


class RetrieveResponse(BaseModel):
    took: int
    timed_out: bool
    hits: RetrieveHits
    mode: RetrievalMode
    dense_method: Literal["knn", "script_score", "rerank", "none"]
    vector_index: str | None = Field(
        None,
        description="Dense and hybrid only: the index's vector index (`bbq_hnsw`, `int8_hnsw`, … as its `_meta` "
        "records it; `default`: Elasticsearch's, made before it was recorded; `none`: exact scores).",
    )
    fusion: Fusion
    fusion_note: str | None = None
    reranked_by: str | None = None
    legs: dict[str, list[RetrieveHitModel]] | None = None
    without_vectors: int = Field(0, description="Documents of the index without a vector (dense cannot find them).")
    warning: str | None = None
    hops_note: str | None = Field(
        None, description="`hops: 1` over an index that cannot hop (an attached index without a keyword title): why."
    )


class CitationModel(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    id: str = Field(alias="_id")
    score: float = Field(alias="_score")
    title: str


class AskResponse(BaseModel):
    took: int
    trace_id: str
    strategy: str
    answer: str | None
    citations: list[CitationModel]
    totals: dict[str, float]
    trace_stored: bool = Field(True, description="False when the trace could not be written (kept for retry).")
    warning: str | None = None


class DocumentResponse(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    index: str = Field(alias="_index")
    id: str = Field(alias="_id")
    found: bool
    source: dict[str, Any] = Field(alias="_source")


class HealthResponse(BaseModel):
    status: Literal["green", "yellow", "red"]
    ready: bool
    elasticsearch: dict[str, Any]
    llm: dict[str, Any]


class LivenessResponse(BaseModel):
    status: Literal["alive"]


class RootResponse(BaseModel):
    """Elasticsearch's own root body (what the official clients check), hopsearch's under ``hopsearch``."""

    name: str
    cluster_name: str
    cluster_uuid: str
    version: dict[str, Any]
    tagline: str
    hopsearch: dict[str, Any]


KeyAction = Literal["search", "ask", "outlines", "traces", "admin"]


class KeyCreateRequest(_Request):
    """``POST /_keys``: a new stored API key."""

    name: str = Field(min_length=1, max_length=128)
    principals: list[str] = Field(default_factory=list, max_length=1000)
    indices: list[str] = Field(default_factory=list, max_length=100, description="Index patterns (default: `*`).")
    actions: list[KeyAction] = Field(default_factory=list, description="Default: every action but admin.")
    admin: bool = False
    expires: str | None = Field(None, description="A duration from now: 90d, 12h, 30m.", max_length=16)
    concurrent_asks: int | None = Field(None, ge=1)
    per_minute: int | None = Field(None, ge=1)
    token_alg: Literal["EdDSA", "RS256"] | None = None
    token_public_key: str | None = Field(None, max_length=16384, description="PEM public key of end-user tokens.")
    token_key_id: str | None = Field(
        None, min_length=1, max_length=128, description="Its id: tokens name kid `<name>/<id>` (default: the name)."
    )
    namespace: str | None = Field(None, min_length=1, max_length=256)
    user_header: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="A header naming each request's end user (a chat front end's key): its secret is every "
        "one of its users' credential.",
    )


class PublicKeyAddRequest(_Request):
    """``POST /_keys/{name}/public_keys``: one more public key of the key's end-user tokens."""

    token_key_id: str = Field(min_length=1, max_length=128, description="Its id: tokens name kid `<name>/<id>`.")
    token_alg: Literal["EdDSA", "RS256"]
    token_public_key: str = Field(min_length=1, max_length=16384, description="PEM public key.")


class KeyLimitsModel(BaseModel):
    concurrent_asks: int | None
    per_minute: int | None


class TokenKeyModel(BaseModel):
    kid: str
    algorithm: str


class KeyResponse(BaseModel):
    """A stored API key as ``/_keys`` shows it: never its secret (none is stored) nor its hash."""

    name: str
    state: Literal["active", "expired", "revoked"]
    principals: list[str]
    indices: list[str]
    actions: list[str]
    admin: bool
    created: str | None
    expires: str | None
    limits: KeyLimitsModel
    token_keys: list[TokenKeyModel]
    namespace: str | None
    user_header: str | None = None


class KeyListResponse(BaseModel):
    keys: list[KeyResponse]


class KeyCreatedResponse(KeyResponse):
    key: str = Field(description="The secret: shown this once, only its hash is stored.")


class KeyRevokedResponse(KeyResponse):
    acknowledged: bool


class ViewerUrl(BaseModel):
    """A one-time URL of the trace viewer (``POST /_traces/{id}/_open``)."""

    url: str = Field(description="Open it in a browser, once, within `expires_in` seconds.")
    path: str
    expires_in: int
