"""The two use cases every front end calls — :func:`ask` and :func:`search` — and the one place their
request values are built and checked (:func:`ask_request`, :func:`search_request`).

HTTP (``_ask``, ``_retrieve``, ``/retrieve``), MCP (``ask``, ``search``), the CLI (``ask``, ``search``) and
``eval`` give their input to these builders with the names they use for its parts
(:class:`~hopsearch.service.requests.Fields`), so that the same input gets the same settings everywhere
and an error names what the caller sent. Defaults are those of :mod:`hopsearch.service.requests`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import fields as dataclass_fields
from typing import Any, Protocol

from hopsearch.service.access import Caller, Scope
from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import AuthorizationError, HopsearchError, IndexMissing, RequestInvalid, StoreError
from hopsearch.service.outlines.lineage import bound_namespace
from hopsearch.service.requests import (
    DEFAULT_DEPTH,
    DEFAULT_MAX_TOKENS,
    DEFAULT_POLICY,
    DEFAULT_STRATEGY,
    UNSET,
    AskOptions,
    AskRequest,
    Budget,
    Fields,
    Query,
    RetrievalPolicy,
    SearchRequest,
    Unset,
    check_hops,
    check_k,
    check_text,
    default_k,
    given_or,
)
from hopsearch.service.retrieval import EsRetriever
from hopsearch.service.retrieval.filters import parse_filters, refused_filter
from hopsearch.service.retrieval.hidden_filters import refuse_hidden
from hopsearch.service.store import Store
from hopsearch.service.store.indices import schema_note
from hopsearch.service.strategies import STRATEGIES, Answer, StepListener, Strategy
from hopsearch.service.types import RetrievalMode, RetrievalQuery, SearchResult

ASK_FIELDS = Fields()
SEARCH_FIELDS = Fields(text="query")


class Runtime(Protocol):
    """What the use cases need of :class:`hopsearch.service.app.runtime.Runtime` (which satisfies it): the
    seam keeps this module below the runtime, whose ``ask``/``search`` call the use cases."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Store: ...

    @property
    def retriever(self) -> EsRetriever: ...

    def strategy(self, name: str) -> Strategy: ...

    async def retrieval_mode(self, strategy: str | None = None, index: str | None = None) -> RetrievalMode: ...


def permitted(caller: Caller, action: str) -> None:
    """Refuse (403) a caller whose key may not do ``action``."""
    if not caller.may(action):
        allowed = ", ".join(sorted(caller.actions - {"admin"})) or "none"
        raise AuthorizationError(f"{_who(caller)} may not {action} (the key's actions: {allowed})")


async def passages_index(runtime: Runtime, caller: Caller, name: str | None) -> str:
    """Resolve the passages index a request names and check that the caller may read it.

    This is the one place an index is checked. ``None`` and ``passages`` name the alias; the alias, one of its
    versions, another passages index of the deployment and an attached index resolve. A name outside the
    caller's index patterns is 403 whether or not it exists (:func:`check_index`); a name inside them that is
    none of those is 404.
    """
    settings = runtime.settings
    index = settings.passages_alias if name is None or name == "passages" else name
    check_index(caller, index)
    if re.fullmatch(rf"{re.escape(settings.passages_alias)}(?:-v\d{{1,6}})?", index):
        return index
    missing = IndexMissing(f"no such passages index or alias [{index}]", details={"index": index})
    if index.startswith(f"{settings.index_prefix}-"):  # traces, keys, outlines…: hopsearch's, but not passages
        if not await runtime.store.exists(index) or not (await runtime.store.index_meta(index)).get("schema_version"):
            raise missing
        return index  # another passages index of this deployment (``index docs --index``)
    if await runtime.store.attachment(index) is None:
        raise missing
    return index


def check_index(caller: Caller, index: str) -> None:
    """403 naming the key's index patterns where they do not cover ``index``, whether or not it exists
    (Elasticsearch's rule: the answer says why, and is the same for an index that exists and one that
    does not, so it leaks nothing); only a name inside the patterns may then be told apart (404)."""
    if not caller.may_use(index):
        patterns = ", ".join(caller.indices)
        raise AuthorizationError(
            f"{_who(caller)} may not read index [{index}] (the key's index patterns: {patterns})",
            details={"index": index},
        )


def _who(caller: Caller) -> str:
    return f"the API key [{caller.key}]" if caller.key else "this caller"


def _scope(runtime: Runtime, index: str, caller: Caller, filters: Any, where: str, action: str = "search") -> Scope:
    settings = runtime.settings
    permitted(caller, action)
    clauses = parse_filters(list(filters) if filters is not None else [], where)
    if not caller.admin:
        refuse_hidden(clauses, hidden=settings.api_hidden_fields, server_paths=settings.api_server_paths, where=where)
    return Scope(
        index,
        caller,
        tuple(clauses),
        acl_default=settings.acl_default,
        scores=settings.api_non_admin_scores,
    )


async def ask_request(
    runtime: Runtime,
    question: str,
    *,
    caller: Caller,
    strategy: str | Unset | None = UNSET,
    index: str | None = None,
    filters: Sequence[Mapping[str, Any]] | None = (),
    k: int | Unset | None = UNSET,
    retrieval_mode: RetrievalMode | Unset | None = UNSET,
    hops: int | Unset | None = UNSET,
    seed: bool | Unset | None = UNSET,
    mode: RetrievalPolicy | Unset | None = UNSET,
    max_depth: int | Unset | None = UNSET,
    max_tokens: int | Unset | None = UNSET,
    budget: Budget | Unset | None = UNSET,
    demonstrations: str | Unset | None = UNSET,
    repeat_guard: bool | Unset | None = UNSET,
    namespace: str | None = None,
    options: AskOptions | None = None,
    fields: Fields = ASK_FIELDS,
) -> AskRequest:
    """Build the checked request of one question.

    A value not given (:data:`~hopsearch.service.requests.UNSET`, or None from a body's optional field) is taken
    from ``options`` (the Python API's), else from the settings or the default. Checks the question's length,
    the strategy, k (``api_max_k``), the filters (a 400 naming the field) and the passages ``index`` (default:
    the settings' alias; :func:`passages_index`); the retrieval mode defaults to the index's
    (:meth:`Runtime.retrieval_mode`), the namespace to the caller's key's (else the ``outline_namespace``
    setting; only admins may name one).
    """
    settings = runtime.settings
    index = await passages_index(runtime, caller, index)
    # the Python API's options fill, one by one, what the call does not give
    given = {f.name: getattr(options, f.name) for f in dataclass_fields(AskOptions)} if options is not None else {}
    check_text(question, settings.api_max_question_chars, fields.text)
    chosen_strategy = given_or(strategy, default=DEFAULT_STRATEGY)
    if chosen_strategy not in STRATEGIES:
        raise RequestInvalid(f"unknown strategy; one of {', '.join(sorted(STRATEGIES))}", field=fields.strategy)
    chosen_k = given_or(k, given.get("k"), default=default_k(chosen_strategy))
    check_k(chosen_k, settings.api_max_k, fields.k)
    chosen_hops = given_or(hops, given.get("hops"), default=settings.hops)
    check_hops(chosen_hops, fields.hops)
    scope = _scope(runtime, index, caller, filters, fields.filters, "ask")
    await runtime.store.require_passages(scope.index)
    chosen_mode = given_or(retrieval_mode, given.get("retrieval_mode"), default=None)
    chosen = AskOptions(
        mode=given_or(mode, given.get("mode"), default=DEFAULT_POLICY),
        max_depth=given_or(max_depth, given.get("max_depth"), default=DEFAULT_DEPTH),
        k=chosen_k,
        retrieval_mode=chosen_mode or await runtime.retrieval_mode(chosen_strategy, scope.index),
        hops=chosen_hops,
        # else the ``seed`` setting; None there too: the strategy's default
        seed=given_or(seed, given.get("seed"), settings.seed, default=None),
        max_tokens=given_or(max_tokens, given.get("max_tokens"), default=DEFAULT_MAX_TOKENS),
        budget=given_or(budget, given.get("budget"), default=Budget()),
        demonstrations=given_or(demonstrations, given.get("demonstrations"), default=""),
        repeat_guard=given_or(repeat_guard, given.get("repeat_guard"), default=True),
    )
    return AskRequest(
        question,
        scope,
        strategy=chosen_strategy,
        options=chosen,
        namespace=bound_namespace(caller, namespace, settings.outline_namespace) or settings.outline_namespace,
        index_note=schema_note(scope.index, await runtime.store.index_meta(scope.index), scope.acl_default),
    )


async def search_request(
    runtime: Runtime,
    queries: Sequence[Query],
    *,
    caller: Caller,
    index: str | None = None,
    filters: Sequence[Mapping[str, Any]] | None = (),
    fields: Fields = SEARCH_FIELDS,
) -> SearchRequest:
    """Return the checked request of a search: each query's length and k (``api_max_k``), the filters. A batch
    names its queries' fields ``<text>.<n>``."""
    settings = runtime.settings
    index = await passages_index(runtime, caller, index)
    checked: list[RetrievalQuery] = []
    for number, query in enumerate(queries):
        check_text(
            query.text, settings.api_max_question_chars, fields.text if len(queries) == 1 else f"{fields.text}.{number}"
        )
        check_k(query.k, settings.api_max_k, fields.k)
        check_hops(query.hops, fields.hops)
        checked.append(RetrievalQuery(**{f.name: getattr(query, f.name) for f in dataclass_fields(Query)}))
    return SearchRequest(_scope(runtime, index, caller, filters, fields.filters), tuple(checked), fields.filters)


def failure_of(answer: Answer) -> HopsearchError | None:
    """Return the error a failed answer ends in, with its trace id, for the front end to show; None if it did not fail.

    Every front end names the trace of a failed question (``_ask``, ``/v1``, MCP), so the id is added here once.
    """
    if answer.error is not None:
        answer.error.details["trace_id"] = answer.trace.trace_id
    return answer.error


async def ask(runtime: Runtime, request: AskRequest, *, on_step: StepListener | None = None) -> Answer:
    """Answer ``request``; a failure is :attr:`Answer.error`, and the trace is written either way.
    ``on_step`` sees each step as it is recorded (streaming)."""
    await runtime.store.ensure_side_indices()
    return await runtime.strategy(request.strategy).answer(request, on_step=on_step)


async def search(runtime: Runtime, request: SearchRequest) -> list[SearchResult]:
    """Return the results of ``request``'s queries, in ONE round trip. A filter Elasticsearch refuses (a value a
    date field cannot parse) is a 400 naming that filter."""
    try:
        return await runtime.retriever.search_many(request.scope, request.queries)
    except StoreError as exc:
        if request.scope.filters and exc.details.get("status") == 400:
            reason = str(exc).removeprefix("msearch: ")
            raise refused_filter(request.scope.filters, reason, request.filters_field) from exc
        raise
