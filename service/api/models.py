"""Request and response bodies of the HTTP service (pydantic; they are the OpenAPI document).

Filters speak Elasticsearch's filter dialect but only its literal clauses — ``term``, ``terms``,
``range``, ``exists`` — over an allow-list of passage fields: user text never reaches Elasticsearch as
query-string syntax (questions and queries go into ``multi_match`` and kNN bodies only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from hopsearch.service.errors import HopsearchError, RequestInvalid
from hopsearch.service.strategies import AskOptions, Budget
from hopsearch.service.types import RetrievalMode

#: Fields a filter may name: the keyword, number and date fields of the passages mapping.
FILTER_FIELD_PATTERN = (
    r"^(source|doc_id|path|url|title\.keyword|content_sha|chunk|indexed_at|metadata\.[A-Za-z0-9_][A-Za-z0-9_.-]{0,99})$"
)
#: Absolute bounds of the schema; the configured limits (``api_max_*``) are usually tighter.
MAX_TEXT = 100_000
MAX_K = 10_000

FieldName = Annotated[str, StringConstraints(pattern=FILTER_FIELD_PATTERN)]
Scalar = (
    Annotated[str, StringConstraints(max_length=512)] | Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] | float | bool
)


def _check_text(value: Any, where: str) -> None:
    """Refuse lone surrogates (valid JSON escapes, but not UTF-8: no client could send them on)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{where or 'body'}: text is not valid Unicode (lone surrogate)") from exc
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, where)
            _check_text(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for number, item in enumerate(value):
            _check_text(item, f"{where}.{number}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Request(_Strict):
    """A request body: all of its text must be valid Unicode."""

    @model_validator(mode="before")
    @classmethod
    def _unicode(cls, data: Any) -> Any:
        _check_text(data, "")
        return data


class RangeBounds(_Strict):
    gte: Scalar | None = None
    gt: Scalar | None = None
    lte: Scalar | None = None
    lt: Scalar | None = None


class ExistsField(_Strict):
    field: FieldName


class TermFilter(_Strict):
    term: dict[FieldName, Scalar] = Field(min_length=1, max_length=1)


class TermsFilter(_Strict):
    terms: dict[FieldName, list[Scalar]] = Field(min_length=1, max_length=1)


class RangeFilter(_Strict):
    range: dict[FieldName, RangeBounds] = Field(min_length=1, max_length=1)


class ExistsFilter(_Strict):
    exists: ExistsField


Filter = TermFilter | TermsFilter | RangeFilter | ExistsFilter


def filter_error(filters: Sequence[Filter], error: HopsearchError) -> RequestInvalid:
    """Elasticsearch refused a search with ``filters``: a 400 naming the filter (the one whose value
    the refusal quotes, else all of them) and its field."""
    reason = str(error).removeprefix("msearch: ")
    for number, item in enumerate(filters):
        clause = filter_clause(item)
        [(kind, body)] = clause.items()
        field = body.get("field") if kind == "exists" else next(iter(body))
        values = body[field] if kind != "exists" else {}
        values = list(values.values()) if isinstance(values, dict) else values
        values = values if isinstance(values, list) else [values]
        if any(f'"{value}"' in reason or f"[{value}]" in reason for value in values):
            return RequestInvalid(
                f"{kind} filter on [{field}] refused by Elasticsearch: {reason}", field=f"body.filters.{number}"
            )
    return RequestInvalid(f"a filter was refused by Elasticsearch: {reason}", field="body.filters")


def filter_clause(item: Filter) -> dict[str, Any]:
    """The Elasticsearch filter clause of a validated filter."""
    if isinstance(item, RangeFilter):
        return {"range": {name: b.model_dump(exclude_none=True) for name, b in item.range.items()}}
    if isinstance(item, TermsFilter):
        return {"terms": {name: list(values) for name, values in item.terms.items()}}
    if isinstance(item, ExistsFilter):
        return {"exists": {"field": item.exists.field}}
    return {"term": dict(item.term)}


class RetrieveRequest(_Request):
    query: str = Field(min_length=1, max_length=MAX_TEXT, description="Plain text (never query-string syntax).")
    k: int = Field(10, ge=1, le=MAX_K, description="Number of hits (at most `api_max_k`).")
    mode: RetrievalMode = Field("bm25", description="bm25, dense or hybrid (RRF, k = 60).")
    filters: list[Filter] = Field(default_factory=list, max_length=32, description="Literal filter clauses.")


class BudgetModel(_Strict):
    max_steps: int = Field(10, ge=1, le=50)
    max_retrievals: int = Field(10, ge=0, le=100)
    max_llm_calls: int = Field(40, ge=1, le=400)
    deadline_s: float | None = Field(
        None, ge=1, le=3600, description="Seconds the question may take (the strategy's timeout)."
    )


class AskOptionsModel(_Strict):
    mode: Literal["model", "always", "never"] = "model"
    max_depth: int = Field(10, ge=1, le=20)
    k: int = Field(3, ge=1, le=MAX_K)
    retrieval_mode: RetrievalMode = "bm25"
    max_tokens: int = Field(100, ge=1, le=4096)
    budget: BudgetModel = Field(default_factory=lambda: BudgetModel.model_validate({}))

    def to_options(self) -> AskOptions:
        b = self.budget
        budget = Budget(b.max_steps, b.max_retrievals, b.max_llm_calls, b.deadline_s)
        return AskOptions(self.mode, self.max_depth, self.k, self.retrieval_mode, self.max_tokens, budget)


class AskRequest(_Request):
    question: str = Field(min_length=1, max_length=MAX_TEXT, description="At most `api_max_question_chars`.")
    strategy: str = Field("deeprag", min_length=1, max_length=64, description="A strategy name (see `GET /`).")
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


class RetrieveResponse(SearchResponse):
    mode: RetrievalMode
    dense_method: Literal["knn", "script_score", "rerank", "none"]
    without_vectors: int = Field(0, description="Documents of the index without a vector (dense cannot find them).")
    warning: str | None = None


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
