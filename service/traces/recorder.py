"""Traces: one document per answered question, written to the traces index even when the run fails.

A :class:`TraceRecorder` collects :class:`Step` records while a strategy runs; :meth:`finish` turns
them into a :class:`Trace` whose totals are the sums over the steps (retrievals, LLM calls, tokens
in, tokens out, retries) plus the wall time of the whole run. Writing goes through the small
:class:`TraceSink` protocol; :class:`ElasticsearchTraceSink` puts documents through the store.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from hopsearch.service.errors import HopsearchError
from hopsearch.service.llm.types import Attempt, Completion

log = logging.getLogger(__name__)

#: ``failed``: the call that raised (its attempts, the error); the run stopped there.
#: DualRAG: ``reason``, ``identify``, ``summarize``, ``outline_reuse``; iterative: ``assess``;
#: HyDE: ``decompose``, ``hyde``.
StepKind = Literal[
    "generate",
    "retrieve",
    "answer",
    "failed",
    "reason",
    "identify",
    "summarize",
    "outline_reuse",
    "assess",
    "decompose",
    "hyde",
]
#: ``retrieve``: look it up; ``parametric``: answer from the model alone; ``final``: final answer;
#: ``repeat``: the model asked again what it had already asked in this question (after
#: :func:`~hopsearch.service.strategies.steps.normalise_query`), so nothing is retrieved again and
#: the strategy moves on to its final answer over what it found the first time.
Decision = Literal["retrieve", "parametric", "final", "repeat"]


@dataclass(frozen=True, slots=True)
class Citation:
    id: str
    title: str
    score: float


@dataclass(frozen=True, slots=True)
class Step:
    """One action of a strategy: an LLM generation, a retrieval, or an answer generation."""

    kind: StepKind
    depth: int = 0
    prompt_chars: int = 0
    output: str = ""
    decision: Decision | None = None
    decided_by: str | None = None
    stop: str | None = None
    finish_reason: str | None = None
    #: How ``stop`` was read (:data:`~hopsearch.service.llm.types.StopMethod`): ``stop_reason`` where vLLM
    #: named it, a ``fallback-*`` where the client found the marker itself, ``finish_reason`` where none ended it.
    stop_method: str | None = None
    #: What the model decided and how, where a guard (DeepRAG's repeat guard) replaced ``decision`` and
    #: ``decided_by``: an operator sees both the model's own reading and the guard's.
    model_decision: Decision | None = None
    model_decided_by: str | None = None
    queries: tuple[str, ...] = ()
    hit_ids: tuple[str, ...] = ()
    latency_ms: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    llm_calls: int = 0
    retrievals: int = 0
    attempts: tuple[Attempt, ...] = ()
    error: str | None = None
    #: The final answer's type (:mod:`~hopsearch.service.strategies.answer_types`): choice, yes_no, date,
    #: number or text; ``None`` on every other step.
    answer_type: str | None = None
    #: Strategy-specific structured data (entities and keywords, reused facts, the stop rule...).
    details: Mapping[str, Any] | None = None

    @property
    def retries(self) -> int:
        return sum(1 for attempt in self.attempts if not attempt.ok)

    @classmethod
    def from_completion(cls, kind: StepKind, completion: Completion, **fields: Any) -> Step:
        return cls(
            kind=kind,
            output=completion.text,
            stop=completion.stop,
            finish_reason=completion.finish_reason,
            stop_method=completion.stop_method,
            latency_ms=completion.latency_ms,
            tokens_in=completion.usage.prompt_tokens,
            tokens_out=completion.usage.completion_tokens,
            llm_calls=completion.calls,
            attempts=completion.attempts,
            **fields,
        )

    def to_dict(self, index: int) -> dict[str, Any]:
        body = asdict(self)
        body["index"] = index
        body["queries"] = list(self.queries)
        body["hit_ids"] = list(self.hit_ids)
        body["attempts"] = [attempt.to_dict() for attempt in self.attempts]
        body["retries"] = self.retries
        body["details"] = dict(self.details) if self.details is not None else None
        return body


@dataclass(frozen=True, slots=True)
class Trace:
    trace_id: str
    question: str
    strategy: str
    model: str
    started_at: datetime
    finished_at: datetime
    wall_ms: float
    steps: tuple[Step, ...]
    answer: str | None
    citations: tuple[Citation, ...]
    options: Mapping[str, Any] = field(default_factory=dict)
    error: Mapping[str, Any] | None = None
    #: What the question read: ``index`` and the outline ``namespace``.
    scope: Mapping[str, Any] = field(default_factory=dict)
    #: Who asked (``subject``, ``key``, ``admin``): the trace is theirs (and admins') to read.
    user: Mapping[str, Any] = field(default_factory=dict)
    #: The LLM server that generated: ``name`` (vllm, llamacpp, openai) and ``version`` (vLLM's release).
    engine: Mapping[str, Any] = field(default_factory=dict)

    def totals(self) -> dict[str, Any]:
        return {
            "steps": len(self.steps),
            "retrievals": sum(step.retrievals for step in self.steps),
            "llm_calls": sum(step.llm_calls for step in self.steps),
            "tokens_in": sum(step.tokens_in for step in self.steps),
            "tokens_out": sum(step.tokens_out for step in self.steps),
            "retries": sum(step.retries for step in self.steps),
            "wall_ms": self.wall_ms,
        }

    def to_document(self) -> dict[str, Any]:
        """Return the Elasticsearch document (``es_mappings/traces.json``)."""
        return {
            "trace_id": self.trace_id,
            "question": self.question,
            "strategy": self.strategy,
            "model": self.model,
            "status": "error" if self.error else "ok",
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat(),
            "options": dict(self.options),
            "scope": dict(self.scope),
            "user": dict(self.user),
            "engine": dict(self.engine),
            "steps": [step.to_dict(index) for index, step in enumerate(self.steps)],
            "answer": self.answer,
            "citations": [asdict(citation) for citation in self.citations],
            "totals": self.totals(),
            "error": dict(self.error) if self.error else None,
        }


class TraceRecorder:
    """Collects steps while a strategy runs (mutable by design: it is the run's state). ``on_step`` (the
    run's listener: the HTTP service streams steps as Server-Sent Events) sees each step as added;
    ``scope`` is what the question read (index, namespace), ``user`` who asked; ``trace_id`` the id the
    trace is written under where the front end chose it before the run (a new one else)."""

    def __init__(
        self,
        question: str,
        strategy: str,
        model: str,
        options: Mapping[str, Any],
        on_step: Callable[[Step], None] | None = None,
        *,
        scope: Mapping[str, Any] | None = None,
        user: Mapping[str, Any] | None = None,
        trace_id: str | None = None,
    ) -> None:
        self.on_step = on_step
        self.scope = dict(scope or {})
        self.user = dict(user or {})
        self.trace_id = trace_id or uuid.uuid4().hex
        self.question = question
        self.strategy = strategy
        self.model = model
        self.options = dict(options)
        self.steps: list[Step] = []
        #: The LLM server's kind and release (set by the run once the client knows them).
        self.engine: dict[str, Any] = {}
        self.started_at = datetime.now(UTC)
        self._started = time.monotonic()

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        if self.on_step is not None:
            self.on_step(step)
        return step

    def count(self, attribute: Literal["llm_calls", "retrievals"]) -> int:
        return sum(getattr(step, attribute) for step in self.steps)

    def finish(
        self,
        answer: str | None,
        citations: Sequence[Citation] = (),
        error: BaseException | None = None,
    ) -> Trace:
        failure: dict[str, Any] | None = None
        if error is not None:
            failure = {"type": type(error).__name__, "message": str(error)}
            if isinstance(error, HopsearchError):
                failure["error_type"] = error.error_type
                failed = [Attempt(**a) for a in error.details.get("attempts", [])]
                if failed:
                    self.add(Step(kind="failed", llm_calls=1, attempts=tuple(failed), error=str(error)))
        return Trace(
            trace_id=self.trace_id,
            question=self.question,
            strategy=self.strategy,
            model=self.model,
            started_at=self.started_at,
            finished_at=datetime.now(UTC),
            wall_ms=round((time.monotonic() - self._started) * 1000, 3),
            steps=tuple(self.steps),
            answer=answer,
            citations=tuple(citations),
            options=self.options,
            error=failure,
            scope=self.scope,
            user=self.user,
            engine=self.engine,
        )


class TraceSink(Protocol):
    """Where trace documents go."""

    async def write(self, trace_id: str, doc: Mapping[str, Any]) -> None: ...


class DocumentStore(Protocol):
    """The part of the store the Elasticsearch sink needs."""

    async def create_document(
        self, index: str, doc_id: str, body: Mapping[str, Any], *, refresh: bool = False
    ) -> bool: ...


class ElasticsearchTraceSink:
    """Writes traces to ``<prefix>-traces`` through the store (one document per question).

    Traces are the audit record, so one that cannot be written (Elasticsearch down) is not dropped: it
    is kept in a bounded buffer (``max_pending``; past it the oldest is given up, counted in
    ``dropped`` and logged as an error) and retried, oldest first, before every later write and on
    :meth:`flush` (the runtime flushes when it closes). Traces are append-only: each is created under its
    trace id (``op_type=create``), so a retry of a write that did land (a timeout after the node stored
    it) finds it there and neither duplicates nor overwrites it. ``write`` still raises for the trace it could
    not store, so the answer can say so."""

    def __init__(self, store: DocumentStore, index: str, *, refresh: bool = False, max_pending: int = 1000) -> None:
        self.store = store
        self.index = index
        self.refresh = refresh
        self.max_pending = max_pending
        self.pending: deque[tuple[str, Mapping[str, Any]]] = deque()
        self.dropped = 0

    async def write(self, trace_id: str, doc: Mapping[str, Any]) -> None:
        await self.flush()
        try:
            await self.store.create_document(self.index, trace_id, doc, refresh=self.refresh)
        except (HopsearchError, OSError):
            self._keep(trace_id, doc)
            raise

    async def flush(self) -> int:
        """Retry the buffered traces, oldest first, until one fails; returns how many are still pending."""
        while self.pending:
            trace_id, doc = self.pending[0]
            try:
                await self.store.create_document(self.index, trace_id, doc, refresh=self.refresh)
            except (HopsearchError, OSError) as exc:
                log.info("%d trace(s) still pending: %s", len(self.pending), exc)
                break
            self.pending.popleft()
        return len(self.pending)

    def _keep(self, trace_id: str, doc: Mapping[str, Any]) -> None:
        if len(self.pending) >= self.max_pending:
            lost, _ = self.pending.popleft()
            self.dropped += 1
            log.error("trace buffer full (%d): trace %s given up", self.max_pending, lost)
        self.pending.append((trace_id, doc))


class MemoryTraceSink:
    """Keeps trace documents in a dict (the CLI without a store, tests)."""

    def __init__(self) -> None:
        self.documents: dict[str, Mapping[str, Any]] = {}

    async def write(self, trace_id: str, doc: Mapping[str, Any]) -> None:
        self.documents[trace_id] = doc
