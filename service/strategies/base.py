"""The strategy protocol and the run harness every strategy uses.

:func:`run_recorded` gives a strategy body a :class:`RunContext` (LLM client, a retriever bound to the
request's scope, trace recorder, budgets, deadline), and always finishes the trace — with the error when
the body fails — and writes it to the sink. Failures come back as :attr:`Answer.error` (see
:meth:`Answer.raise_for_error`), so a trace exists for every question asked. The request
(:class:`~hopsearch.service.requests.AskRequest`) is an argument of every run: nothing of it is kept in
the strategy, a context variable or a global.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar, Protocol

from hopsearch.service.config.settings import DEFAULT_TIMEOUT_S
from hopsearch.service.errors import HopsearchError, LLMTimeout, StrategyError
from hopsearch.service.llm import LLMClient, StopFallback
from hopsearch.service.requests import AskOptions, AskRequest, default_k
from hopsearch.service.traces.recorder import Citation, Step, Trace, TraceRecorder, TraceSink
from hopsearch.service.types import Hit, Link, RetrievalMode, RetrievalQuery, Retriever, Searcher, SearchResult

log = logging.getLogger(__name__)

_GRACE_S = 1.0
#: The fewest passages a seed retrieval reads: as many as ``single`` reads by default, so a seeded strategy
#: starts from at least what ``single`` finds.
SEED_K = default_k("single")
#: Called with each step as it is recorded (the HTTP service streams steps as Server-Sent Events).
StepListener = Callable[[Step], None]


def depth_for(dataset: str) -> int:
    """DeepRAG's depth limit: 6 for HotpotQA-style questions, 10 otherwise."""
    return 6 if "hotpot" in dataset.lower() else 10


@dataclass(frozen=True, slots=True)
class Answer:
    text: str | None
    citations: tuple[Citation, ...]
    trace: Trace
    error: HopsearchError | None = field(default=None, compare=False)
    #: ``None`` when the trace was stored; else why not (the sink keeps it and retries, bounded).
    trace_not_stored: str | None = None

    def raise_for_error(self) -> None:
        if self.error is not None:
            raise self.error


class Strategy(Protocol):
    @property
    def name(self) -> str: ...

    async def answer(self, request: AskRequest, *, on_step: StepListener | None = None) -> Answer: ...


@dataclass(eq=False)
class RecordedStrategy:
    """Shared constructor (a dataclass: subclasses add their own options as keyword-only fields) and
    ``answer()``: runs the subclass's ``_run`` under :func:`run_recorded` (budgets, deadline, trace
    always written). Subclasses set ``name`` and write ``_run``.

    ``timeout_s``: a question's time limit where its :class:`Budget` names none;
    ``stop_fallback``: how stop strings are told apart on servers without ``stop_reason``;
    ``answer_type_model``: whether the model chooses the answer type the rules read as free text (the
    ``answer_type_model`` setting, passed in: a strategy reads no settings through its LLM client)."""

    name: ClassVar[str]
    #: The retrieval mode this strategy's queries are measured best with, used where neither the
    #: request nor the ``retrieval_mode`` setting names one (:meth:`Runtime.retrieval_mode`); None:
    #: the setting's default.
    preferred_retrieval_mode: ClassVar[RetrievalMode | None] = None
    llm: LLMClient
    retriever: Searcher
    sink: TraceSink | None = None
    _: KW_ONLY
    timeout_s: float = DEFAULT_TIMEOUT_S
    stop_fallback: StopFallback = "stream"
    answer_type_model: bool = False
    #: Whether a run is seeded with the question's own retrieval where the request says neither
    #: (``AskOptions.seed`` None): on where it measured better (README, Strategies).
    seed_default: ClassVar[bool] = False

    def seeds(self, options: AskOptions) -> bool:
        """Whether a run with ``options`` starts with the question's own retrieval (:meth:`RunContext.seed`):
        as the request says, else :attr:`seed_default`; never under a retrieval budget of 0."""
        wanted = self.seed_default if options.seed is None else options.seed
        return wanted and options.budget.max_retrievals > 0

    async def answer(self, request: AskRequest, *, on_step: StepListener | None = None) -> Answer:
        async def body(context: RunContext) -> tuple[str, Sequence[Citation]]:
            if self.seeds(context.options):
                await context.seed()
            return await self._run(context, request.question)

        return await run_recorded(
            self.name,
            request,
            llm=self.llm,
            retriever=self.retriever,
            sink=self.sink,
            body=body,
            timeout_s=self.timeout_s,
            on_step=on_step,
            answer_type_model=self.answer_type_model,
        )

    async def _run(self, context: RunContext, question: str) -> tuple[str, Sequence[Citation]]:
        raise NotImplementedError


class RunContext:
    """What a strategy body works with: clients, the retriever bound to the request's scope, the recorder,
    the request (its options and budgets) and the deadline."""

    def __init__(
        self,
        llm: LLMClient,
        retriever: Retriever,
        recorder: TraceRecorder,
        request: AskRequest,
        deadline: float,
        answer_type_model: bool = False,
    ) -> None:
        self.llm = llm
        self.answer_type_model = answer_type_model
        self.retriever = retriever
        self.recorder = recorder
        self.request = request
        self.options = request.options
        self.deadline = deadline
        #: The passages of the seed retrieval (:meth:`seed`), part of the run's evidence; () when unseeded.
        self.seeded: tuple[Hit, ...] = ()
        #: The names the seed's hop followed to its linked passages.
        self.seed_links: tuple[Link, ...] = ()

    def check_llm_budget(self, calls: int = 1) -> None:
        used = self.recorder.count("llm_calls")
        if used + calls > self.options.budget.max_llm_calls:
            raise StrategyError(f"LLM call budget exhausted ({used} of {self.options.budget.max_llm_calls})")
        if time.monotonic() >= self.deadline:
            raise LLMTimeout("the question's deadline passed")

    def may_retrieve(self) -> bool:
        return self.recorder.count("retrievals") < self.options.budget.max_retrievals

    async def seed(self) -> tuple[Hit, ...]:
        """Run the question's own retrieval with the request's mode and hops, at least :data:`SEED_K` passages, before
        the strategy's loop: a retrieve step at depth 0 marked ``details.seed``, counted in the retrievals. Its passages
        (:attr:`seeded`) go into the strategy's answer context and citations."""
        k = max(self.options.k, SEED_K)
        result = await self.search(self.request.question, depth=0, k=k, seed=True)
        if result is not None:
            self.seeded, self.seed_links = result.hits, result.links
        return self.seeded

    async def retrieve(self, query: str, *, depth: int = 0, k: int | None = None) -> tuple[Hit, ...]:
        """One retrieval (one ``_msearch`` round trip), recorded as a step; its hits."""
        result = await self.search(query, depth=depth, k=k)
        return result.hits if result is not None else ()

    async def search(
        self, query: str, *, depth: int = 0, k: int | None = None, seed: bool = False
    ) -> SearchResult | None:
        """:meth:`retrieve`'s result (``details.seed`` in the step where ``seed``)."""
        started = time.monotonic()
        request = RetrievalQuery(query, k=k or self.options.k, mode=self.options.retrieval_mode, hops=self.options.hops)
        results = await self.retriever.search_many([request])
        hits = results[0].hits if results else ()
        details = step_details(results[0]) if results else None
        if seed:
            details = {**(details or {}), "seed": True}
        self.recorder.add(
            Step(
                kind="retrieve",
                depth=depth,
                queries=(query,),
                hit_ids=tuple(hit.id for hit in hits),
                output=describe(results[0]) if results else "",
                latency_ms=round((time.monotonic() - started) * 1000, 3),
                retrievals=1,
                details=details,
            )
        )
        return results[0] if results else None


def step_details(result: SearchResult) -> dict[str, Any] | None:
    """Return what a retrieve step records beside its hits: the documents without vectors (``--no-embed``: the dense
    side could not find those), the names the hop followed (each: the name, the passage or the question that named it,
    the linked passage it found in the caller's scope) or why the index could not hop."""
    notes = result.notes()
    details: dict[str, Any] = {name: notes[name] for name in ("without_vectors", "hops_note") if name in notes}
    if result.links:
        details["links"] = links_detail(result.links)  # each linked passage once
    return details or None


def links_detail(links: Sequence[Link], kept: Sequence[str] | None = None) -> list[dict[str, str]]:
    """Return the names a hop followed as a step records them (``details.links``): each name, what named it (a passage
    id, ``question`` or the query), the linked passage; only those whose passage is in ``kept`` where given, each
    passage once."""
    wanted = None if kept is None else set(kept)
    seen: set[str] = set()
    out: list[dict[str, str]] = []
    for link in links:
        if (wanted is not None and link.passage not in wanted) or link.passage in seen:
            continue
        seen.add(link.passage)
        out.append(link.shown())
    return out


def with_seed(seeded: Sequence[Hit], hits: Sequence[Hit], last: int | None = None) -> list[Hit]:
    """Return the seed's passages first, then those of ``hits`` not among them (each id once; the ``last`` of them where
    given): the seed's passages are always part of a run's evidence."""
    seen = {hit.id for hit in seeded}
    rest: dict[str, Hit] = {}
    for hit in hits:
        if hit.id not in seen:
            rest.setdefault(hit.id, hit)
    kept = list(rest.values())
    if last is not None:
        kept = kept[len(kept) - last :] if last > 0 else []
    return [*seeded, *kept]


def describe(result: SearchResult) -> str:
    """How a retrieval ran, for its trace step: mode, dense method, fusion, reranker."""
    parts: list[str] = [f"{result.dense_method} {result.vector_index}" if result.vector_index else result.dense_method]
    if result.fusion != "none":
        parts.append(f"fusion {result.fusion}" + (f" ({result.fusion_note})" if result.fusion_note else ""))
    if result.reranked_by:
        parts.append(f"reranked by {result.reranked_by}")
    return f"{result.mode} ({', '.join(parts)})"


def citations_of(hits: Sequence[Hit]) -> tuple[Citation, ...]:
    """Citations for the hits, first occurrence of each id kept."""
    seen: dict[str, Citation] = {}
    for hit in hits:
        seen.setdefault(hit.id, Citation(id=hit.id, title=hit.title, score=hit.score))
    return tuple(seen.values())


Body = Callable[[RunContext], Awaitable[tuple[str, Sequence[Citation]]]]


async def run_recorded(
    name: str,
    request: AskRequest,
    *,
    llm: LLMClient,
    retriever: Searcher,
    sink: TraceSink | None,
    body: Body,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_step: StepListener | None = None,
    answer_type_model: bool = False,
) -> Answer:
    """Run ``body`` over the request's scope under the budget's deadline (``timeout_s`` where the budget
    names none); finish and write the trace whatever happens. ``on_step`` sees each step as recorded."""
    recorder = TraceRecorder(
        request.question,
        name,
        llm.model,
        request.trace_options(),
        on_step,
        scope=request.trace_scope(),
        user=request.trace_user(),
        trace_id=request.trace_id,
    )
    seconds = request.options.budget.timeout_s or timeout_s
    deadline = time.monotonic() + seconds
    context = RunContext(llm, retriever.bind(request.scope), recorder, request, deadline, answer_type_model)
    error: HopsearchError | None = None
    text: str | None = None
    citations: Sequence[Citation] = ()
    try:
        async with asyncio.timeout(seconds + _GRACE_S), llm.question():
            recorder.engine = await engine_of(llm)
            text, citations = await body(context)
    except TimeoutError as exc:
        error = LLMTimeout(f"no answer within the deadline of {seconds:g} s")
        error.__cause__ = exc
    except HopsearchError as exc:
        error = exc
    except Exception as exc:
        trace = recorder.finish(None, (), exc)
        await _write(sink, trace)
        raise
    trace = recorder.finish(text, citations, error)
    not_stored = await _write(sink, trace)
    return Answer(text=text, citations=tuple(citations), trace=trace, error=error, trace_not_stored=not_stored)


async def engine_of(llm: LLMClient) -> dict[str, Any]:
    """Return the LLM server's kind and, for vLLM, its release (``GET /version``): what a trace records."""
    name = await llm.engine()
    version = await llm.server_version() if name == "vllm" else None
    return {"name": name, "version": version}


async def _write(sink: TraceSink | None, trace: Trace) -> str | None:
    """Write the trace; ``None`` when it was stored, else what the answer says about it."""
    if sink is None:
        return None
    try:
        await sink.write(trace.trace_id, trace.to_document())
    except (HopsearchError, OSError) as exc:
        log.warning("could not write trace %s: %s", trace.trace_id, exc)
        pending = len(getattr(sink, "pending", ()))
        held = f"; held in this process for retry ({pending} pending)" if pending else ""
        return f"trace {trace.trace_id} could not be stored: {exc}{held}"
    return None
