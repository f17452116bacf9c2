"""The strategy protocol, shared options and budgets, and the run harness every strategy uses.

:func:`run_recorded` gives a strategy body a :class:`RunContext` (LLM client, retriever, trace
recorder, budgets, deadline), and always finishes the trace — with the error when the body fails —
and writes it to the sink. Failures come back as :attr:`Answer.error` (see
:meth:`Answer.raise_for_error`), so a trace exists for every question asked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, asdict, dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from hopsearch.service.errors import HopsearchError, LLMTimeout, StrategyError
from hopsearch.service.filters import scoped
from hopsearch.service.llm import LLMClient, StopFallback
from hopsearch.service.settings import DEFAULT_TIMEOUT_S
from hopsearch.service.traces import Citation, Step, Trace, TraceRecorder, TraceSink
from hopsearch.service.types import Hit, RetrievalMode, RetrievalQuery, Retriever, SearchResult

log = logging.getLogger(__name__)

RetrievalPolicy = Literal["model", "always", "never"]
_GRACE_S = 1.0


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits shared by all strategies. ``timeout_s`` None means the strategy's own ``timeout_s``
    (``settings.llm_deadline`` for strategies the registry builds)."""

    max_steps: int = 10
    max_retrievals: int = 10
    max_llm_calls: int = 40
    timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class AskOptions:
    """Per-question options. ``max_depth``: 6 for HotpotQA-style questions, 10 otherwise."""

    mode: RetrievalPolicy = "model"
    max_depth: int = 10
    k: int = 3
    retrieval_mode: RetrievalMode = "bm25"
    max_tokens: int = 100
    budget: Budget = field(default_factory=Budget)
    #: Validated filter clauses (:func:`hopsearch.service.filters.parse_filters`) every retrieval applies.
    filters: tuple[Mapping[str, Any], ...] = ()
    #: Worked examples put before the question (for models not trained on the strategy's format).
    demonstrations: str = ""
    #: A query already asked in this question (normalised) is not retrieved again: the step's
    #: decision is ``repeat`` and the strategy moves to its final answer. Off only to measure
    #: the old behaviour (``benchmarks/bench_answer_speed.py``).
    repeat_guard: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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

    async def answer(self, question: str, options: AskOptions) -> Answer: ...


@dataclass(eq=False)
class RecordedStrategy:
    """Shared constructor (a dataclass: subclasses add their own options as keyword-only fields) and
    ``answer()``: runs the subclass's ``_run`` under :func:`run_recorded` (budgets, deadline, trace
    always written). Subclasses set ``name`` and write ``_run``.

    ``timeout_s``: a question's time limit where its :class:`Budget` names none;
    ``stop_fallback``: how stop strings are told apart on servers without ``stop_reason``."""

    name: ClassVar[str]
    #: The retrieval mode this strategy's queries are measured best with, used where neither the
    #: request nor the ``retrieval_mode`` setting names one (:meth:`Runtime.retrieval_mode`); None:
    #: the setting's default.
    preferred_retrieval_mode: ClassVar[RetrievalMode | None] = None
    llm: LLMClient
    retriever: Retriever
    sink: TraceSink | None = None
    _: KW_ONLY
    timeout_s: float = DEFAULT_TIMEOUT_S
    stop_fallback: StopFallback = "stream"

    async def answer(self, question: str, options: AskOptions) -> Answer:
        async def body(context: RunContext) -> tuple[str, Sequence[Citation]]:
            return await self._run(context, question)

        return await run_recorded(
            self.name,
            question,
            options,
            llm=self.llm,
            retriever=self.retriever,
            sink=self.sink,
            body=body,
            timeout_s=self.timeout_s,
        )

    async def _run(self, context: RunContext, question: str) -> tuple[str, Sequence[Citation]]:
        raise NotImplementedError


class RunContext:
    """What a strategy body works with: clients, the recorder, budgets and the deadline."""

    def __init__(
        self,
        llm: LLMClient,
        retriever: Retriever,
        recorder: TraceRecorder,
        options: AskOptions,
        deadline: float,
    ) -> None:
        self.llm = llm
        self.retriever = retriever
        self.recorder = recorder
        self.options = options
        self.deadline = deadline

    def check_llm_budget(self, calls: int = 1) -> None:
        used = self.recorder.count("llm_calls")
        if used + calls > self.options.budget.max_llm_calls:
            raise StrategyError(f"LLM call budget exhausted ({used} of {self.options.budget.max_llm_calls})")
        if time.monotonic() >= self.deadline:
            raise LLMTimeout("the question's deadline passed")

    def may_retrieve(self) -> bool:
        return self.recorder.count("retrievals") < self.options.budget.max_retrievals

    async def retrieve(self, query: str, *, depth: int = 0, k: int | None = None) -> tuple[Hit, ...]:
        """One retrieval (one ``_msearch`` round trip), recorded as a step."""
        started = time.monotonic()
        request = RetrievalQuery(query, k=k or self.options.k, mode=self.options.retrieval_mode)
        results = await self.retriever.search_many([request])
        hits = results[0].hits if results else ()
        self.recorder.add(
            Step(
                kind="retrieve",
                depth=depth,
                queries=(query,),
                hit_ids=tuple(hit.id for hit in hits),
                output=describe(results[0]) if results else "",
                latency_ms=round((time.monotonic() - started) * 1000, 3),
                retrievals=1,
                # part of the index has no vectors (--no-embed): the dense side could not find those
                details={"without_vectors": results[0].without_vectors}
                if results and results[0].without_vectors
                else None,
            )
        )
        return hits


def describe(result: SearchResult) -> str:
    """How a retrieval ran, for its trace step: mode, dense method, fusion, reranker."""
    parts: list[str] = [result.dense_method]
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
    question: str,
    options: AskOptions,
    *,
    llm: LLMClient,
    retriever: Retriever,
    sink: TraceSink | None,
    body: Body,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Answer:
    """Run ``body`` under the budget's deadline (``timeout_s`` where the budget names none); finish and
    write the trace whatever happens."""
    recorder = TraceRecorder(question, name, llm.model, options.to_dict())
    seconds = options.budget.timeout_s or timeout_s
    deadline = time.monotonic() + seconds
    context = RunContext(llm, retriever, recorder, options, deadline)
    error: HopsearchError | None = None
    text: str | None = None
    citations: Sequence[Citation] = ()
    try:
        async with asyncio.timeout(seconds + _GRACE_S), llm.question():
            with scoped(options.filters):
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
