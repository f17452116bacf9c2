"""MCP tools over the same runtime, limits and API keys as the HTTP service (the official ``mcp`` SDK).

Tools: ``search`` (mode, k, literal filters), ``ask`` (strategy; the answer, its citations and the
trace id), ``outline`` (an entity's DualRAG outline), ``trace`` (a trace document by id). The server
runs as streamable HTTP at ``/_mcp`` inside ``hopsearch serve``, behind the same gate as every other route
(API keys, body limit), or over stdio (``hopsearch mcp``): as an admin, or as the key of ``HOPSEARCH_MCP_KEY``
(:mod:`.mcp_stdio`). Errors come back as tool errors
whose text is the Elasticsearch-style type and reason, redacted like every HTTP error.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from hopsearch.service.access import ADMIN, Caller
from hopsearch.service.api.state import VERSION, ApiState, caller_of
from hopsearch.service.api.streaming import until_stopped
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import STRATEGIES
from hopsearch.service.errors import AuthorizationError, HopsearchError, NotFound
from hopsearch.service.outlines.lineage import bound_namespace, reader_for
from hopsearch.service.outlines.store import EsOutlineStore
from hopsearch.service.requests import DEFAULT_STRATEGY, MCP_ASK, MCP_SEARCH, SEARCH_K, SEARCH_MODE, Query, check_text
from hopsearch.service.traces import reads as trace_reads
from hopsearch.service.types import RetrievalMode

T = TypeVar("T")
#: Where ``hopsearch serve`` offers the tools as streamable HTTP.
INDEX_DOC = "The passages index or alias (default: the service's passages alias)."
FILTERS_DOC = (
    "Metadata filters: term, terms, range, exists, and/or/not over source, path, doc_id, "
    'lang, metadata.*, indexed_at … (e.g. {"term": {"source": "docs"}}).'
)
INSTRUCTIONS = (
    "hopsearch answers multi-hop questions over an Elasticsearch passages index. Use `search` for "
    "passages, `ask` for an answer with citations (its `trace_id` opens the reasoning with `trace`), "
    "and `outline` for what DualRAG has learned about an entity."
)


#: Whom the tools act as where no HTTP request carries a caller (``hopsearch mcp`` over stdio): looked up on
#: every call (:mod:`.mcp_stdio`); None: an admin.
StdioCaller = Callable[[], Awaitable[Caller]]


def caller_of_tool(ctx: Context | None) -> Caller | None:
    """Who calls a tool over HTTP (``/_mcp`` inside ``hopsearch serve``): the caller the gate put into the
    request's ASGI scope; None where no HTTP request carries the call (stdio, an in-process client)."""
    try:
        request = ctx.request_context.request if ctx is not None else None
    except ValueError:  # no request: called outside one
        request = None
    scope = getattr(request, "scope", None)
    return caller_of(scope) if isinstance(scope, dict) else None


async def _guarded(
    state: ApiState, ctx: Context | None, stdio: StdioCaller | None, work: Callable[[Caller], Awaitable[T]]
) -> T:
    """``work`` as the tool's caller (over HTTP the request's; else ``stdio``'s, an admin without one), a
    hopsearch error — the caller's refusal too — as a tool error."""
    try:
        caller = caller_of_tool(ctx)
        if caller is None:
            caller = await stdio() if stdio is not None else ADMIN
        return await work(caller)
    except HopsearchError as exc:
        raise ToolError(state.redact(f"{exc.error_type}: {exc}")) from exc


def _quiet_server() -> MCPServer:
    """Return the SDK's server, without its logging set-up: its constructor calls ``logging.basicConfig`` (a rich
    handler at INFO on the root logger) wherever the process has not configured logging yet — a worker
    of ``hopsearch serve --workers``, an app built by another program — and then every Elasticsearch
    request is logged, costing more CPU than the rest of a ``_retrieve``. Logging stays the host's."""
    root = logging.getLogger()
    placeholder = None if root.handlers else logging.NullHandler()
    if placeholder is not None:
        root.addHandler(placeholder)  # basicConfig leaves a root with a handler alone
    try:
        return MCPServer(name="hopsearch", version=VERSION, instructions=INSTRUCTIONS)
    finally:
        if placeholder is not None:
            root.removeHandler(placeholder)


#: The MCP tools' ``hops``.
HOPS_DOC = "1: also the passages the query and its first hop name (by title); 0: one hop."
#: The MCP ``ask`` tool's ``seed``.
SEED_DOC = (
    "Start with the question's own retrieval, kept in the answer's context and citations "
    "(default: the seed setting, else the strategy's own)."
)


def _listed(filters: list[dict[str, Any]] | dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """One filter object is a list of one, as on the HTTP routes."""
    return [filters] if isinstance(filters, dict) else filters


def _may(caller: Caller, action: str) -> None:
    if not caller.may(action):
        allowed = ", ".join(sorted(caller.actions - {"admin"})) or "none"
        raise AuthorizationError(f"the API key [{caller.key}] may not use {action} (the key's actions: {allowed})")


async def _run_search(
    state: ApiState,
    query: str,
    mode: RetrievalMode,
    k: int,
    filters: list[dict[str, Any]] | None,
    index: str | None,
    caller: Caller,
    hops: int = 0,
) -> dict[str, Any]:
    runtime = await state.runtime()
    search = await usecases.search_request(
        runtime,
        [Query(query, k=k, mode=mode, hops=hops)],
        caller=caller,
        index=index or None,
        filters=filters,
        fields=MCP_SEARCH,
    )
    [result] = await usecases.search(runtime, search)
    state.metrics.retrieval(result.mode)
    fields = await runtime.store.field_map(search.scope.index)
    hits = [{"id": h.id, "score": h.score, **state.hit_sources.mapped(h, fields)} for h in result.hits]
    return {**result.notes(), "hits": hits}


async def _run_ask(
    state: ApiState,
    question: str,
    strategy: str,
    k: int | None,
    retrieval_mode: RetrievalMode | None,
    index: str | None,
    filters: list[dict[str, Any]] | None,
    caller: Caller,
    hops: int | None = None,
    seed: bool | None = None,
) -> dict[str, Any]:
    runtime = await state.runtime()
    request = await usecases.ask_request(
        runtime,
        question,
        caller=caller,
        strategy=strategy,
        index=index or None,
        filters=filters,
        k=k,
        retrieval_mode=retrieval_mode,
        hops=hops,
        seed=seed,
        fields=MCP_ASK,
    )
    answer = await until_stopped(state, state.answer(request))
    failure = usecases.failure_of(answer)
    if failure is not None:
        raise ToolError(state.redact(f"{failure.error_type}: {failure} (trace {answer.trace.trace_id})"))
    return {
        "answer": answer.text,
        "citations": [{"id": c.id, "title": c.title, "score": c.score} for c in answer.citations],
        "trace_id": answer.trace.trace_id,
        "strategy": request.strategy,
        "retrieval_mode": request.options.retrieval_mode,
        "totals": answer.trace.totals(),
    } | ({"index_note": request.index_note} if request.index_note else {})


async def _run_outline(state: ApiState, entity: str, namespace: str | None, caller: Caller) -> dict[str, Any]:
    settings = state.settings
    _may(caller, "outlines")
    check_text(entity, settings.api_max_question_chars, "entity")
    runtime = await state.runtime()
    space = bound_namespace(caller, namespace, settings.outline_namespace)
    reader = reader_for(caller, settings.acl_default)
    outlines = EsOutlineStore(runtime.store, settings.outlines_index, runtime.outlines_config)
    found = await outlines.latest(entity, space, reader)
    if found is None:
        raise NotFound(f"no outline for entity [{entity}]")
    return found[1].to_document()


async def _run_trace(state: ApiState, trace_id: str, caller: Caller) -> dict[str, Any]:
    settings = state.settings
    _may(caller, "traces")
    check_text(trace_id, settings.api_max_question_chars, "id")
    runtime = await state.runtime()
    doc = await trace_reads.trace(runtime.store, settings.traces_index, trace_id, caller=caller)
    if doc is None:
        raise NotFound(f"trace [{trace_id}] not found")
    return doc


def _add_search(server: MCPServer, state: ApiState, stdio: StdioCaller | None) -> None:
    async def search(
        query: Annotated[str, Field(description="Plain text (never query-string syntax).", min_length=1)],
        mode: Annotated[RetrievalMode, Field(description="Retrieval mode.")] = SEARCH_MODE,
        k: Annotated[int, Field(description="Number of passages.", ge=1)] = SEARCH_K,
        filters: Annotated[list[dict[str, Any]] | dict[str, Any] | None, Field(description=FILTERS_DOC)] = None,
        index: Annotated[str | None, Field(description=INDEX_DOC)] = None,
        hops: Annotated[int, Field(description=HOPS_DOC, ge=0, le=1)] = 0,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        return await _guarded(
            state, ctx, stdio, lambda caller: _run_search(state, query, mode, k, _listed(filters), index, caller, hops)
        )

    server.add_tool(
        search,
        description="Search the passages index: BM25, dense or hybrid, with literal filters. Each hit has id, "
        "score, title, text and excerpt (the passages the strategies would read; an attached index's text is "
        "the whole document).",
    )


def _add_ask(server: MCPServer, state: ApiState, stdio: StdioCaller | None) -> None:
    async def ask(
        question: Annotated[str, Field(description="The question.", min_length=1)],
        strategy: Annotated[str, Field(description=f"One of {', '.join(sorted(STRATEGIES))}.")] = DEFAULT_STRATEGY,
        k: Annotated[
            int | None, Field(description="Passages per retrieval (default 5 for single, else 3).", ge=1)
        ] = None,
        retrieval_mode: Annotated[
            RetrievalMode | None,
            Field(description="Retrieval mode (default: the index's: hybrid where it has vectors, bm25 for dualrag)."),
        ] = None,
        index: Annotated[str | None, Field(description=INDEX_DOC)] = None,
        filters: Annotated[list[dict[str, Any]] | dict[str, Any] | None, Field(description=FILTERS_DOC)] = None,
        hops: Annotated[int | None, Field(description=HOPS_DOC, ge=0, le=1)] = None,
        seed: Annotated[bool | None, Field(description=SEED_DOC)] = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        listed = _listed(filters)
        return await _guarded(
            state,
            ctx,
            stdio,
            lambda caller: _run_ask(state, question, strategy, k, retrieval_mode, index, listed, caller, hops, seed),
        )

    server.add_tool(
        ask,
        description="Answer a (multi-hop) question with a strategy: answer, citations and trace id.",
    )


def _add_outline(server: MCPServer, state: ApiState, stdio: StdioCaller | None) -> None:
    async def outline(
        entity: Annotated[str, Field(description="Entity name, alias or key.", min_length=1)],
        namespace: Annotated[
            str | None, Field(description="Outline namespace (admins only; default: the key's).")
        ] = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        return await _guarded(state, ctx, stdio, lambda caller: _run_outline(state, entity, namespace, caller))

    server.add_tool(
        outline,
        description="What DualRAG has learned about an entity: its outline of facts with their passages.",
    )


def _add_trace(server: MCPServer, state: ApiState, stdio: StdioCaller | None) -> None:
    async def trace(
        id: Annotated[str, Field(description="The trace id `ask` returned.", min_length=1)],
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        return await _guarded(state, ctx, stdio, lambda caller: _run_trace(state, id, caller))

    server.add_tool(
        trace,
        description="A trace document by id: every step, decision, query, passage id, tokens and latency.",
    )


def build_server(state: ApiState, stdio: StdioCaller | None = None) -> MCPServer:
    """Return the MCP server whose tools call the runtime of ``state``: one step per tool it registers. Over HTTP each
    call acts as its request's caller; otherwise as ``stdio``'s (an admin without one)."""
    server = _quiet_server()
    _add_search(server, state, stdio)
    _add_ask(server, state, stdio)
    _add_outline(server, state, stdio)
    _add_trace(server, state, stdio)
    return server
