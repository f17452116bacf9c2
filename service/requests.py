"""The request values of the two use cases — :class:`AskRequest` and :class:`SearchRequest` — with their
defaults, declared here once, and the checks every front end's input goes through.

A request carries everything that decides its answer: who asks and what it reads (the
:class:`~hopsearch.service.access.Scope`: index, validated filters, caller), the outline namespace, the
retrieval mode, k, the strategy's options and its time limit. Front ends (HTTP, MCP, CLI, eval) build one
with :func:`hopsearch.service.app.usecases.ask_request` / :func:`~hopsearch.service.app.usecases.search_request`
and call :func:`~hopsearch.service.app.usecases.ask` / :func:`~hopsearch.service.app.usecases.search` with it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import KW_ONLY, asdict, dataclass, field
from typing import Any, Final, Literal, TypeVar

from hopsearch.service.access import Scope
from hopsearch.service.errors import RequestInvalid
from hopsearch.service.types import Fusion, RetrievalMode, RetrievalQuery

RetrievalPolicy = Literal["model", "always", "never"]

#: The defaults of an ask, for every front end.
DEFAULT_STRATEGY = "deeprag"
DEFAULT_POLICY: RetrievalPolicy = "model"
DEFAULT_DEPTH = 10
DEFAULT_MAX_TOKENS = 100
#: Passages per retrieval: a strategy that retrieves once reads more of them.
DEFAULT_K = 3
STRATEGY_K = {"single": 5}
#: The defaults of a search (``_retrieve``, MCP ``search``, ``hopsearch search``).
SEARCH_K = 10
SEARCH_MODE: RetrievalMode = "bm25"


def default_k(strategy: str) -> int:
    """Passages per retrieval where a request names none: 5 for ``single``, 3 for the others."""
    return STRATEGY_K.get(strategy, DEFAULT_K)


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits shared by all strategies. ``timeout_s`` None means the strategy's own ``timeout_s``
    (``settings.llm_deadline`` for strategies the registry builds): the question's deadline is its start
    plus this."""

    max_steps: int = 10
    max_retrievals: int = 10
    max_llm_calls: int = 40
    timeout_s: float | None = None


class Unset(enum.Enum):
    """Type the one value that means "not given" (:data:`UNSET`)."""

    UNSET = "UNSET"


#: A request value the caller did not give, so the next source fills it (httpx's ``USE_CLIENT_DEFAULT``). An
#: optional field of a front end's body arrives as None and means the same: :func:`given_or` reads both so.
UNSET: Final = Unset.UNSET
_T = TypeVar("_T")


def given_or(value: _T | Unset | None, *fallbacks: _T | Unset | None, default: _T) -> _T:
    """Return the first of ``value`` and ``fallbacks`` that was given (neither UNSET nor None), else ``default``.

    Falsy values (0, ``""``, False) are given: only UNSET and None are not.
    """
    for candidate in (value, *fallbacks):
        if candidate is not UNSET and candidate is not None:
            return candidate
    return default


@dataclass(frozen=True, slots=True)
class AskOptions:
    """A strategy's options for one question. ``max_depth``: 6 for HotpotQA-style questions, 10 otherwise."""

    mode: RetrievalPolicy = DEFAULT_POLICY
    max_depth: int = DEFAULT_DEPTH
    k: int = DEFAULT_K
    retrieval_mode: RetrievalMode = "bm25"
    #: The hops of every retrieval the strategy makes (:attr:`Query.hops`).
    hops: int = 0
    #: Start the run with the question's own retrieval (its mode and hops), whose passages stay in the
    #: answer's context and citations: ``single`` finds nothing the strategy does not. None: the strategy's
    #: default (:attr:`~.strategies.base.RecordedStrategy.seed_default`); never DeepRAG's ``never`` policy
    #: nor a retrieval budget of 0.
    seed: bool | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    budget: Budget = field(default_factory=Budget)
    #: Worked examples put before the question (for models not trained on the strategy's format).
    demonstrations: str = ""
    #: A query already asked in this question (normalised) is not retrieved again: the step's
    #: decision is ``repeat`` and the strategy moves to its final answer. Off only to measure
    #: the old behaviour (``benchmarks/bench_answer_speed.py``).
    repeat_guard: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class AskRequest:
    """One question to answer: what, with which strategy, over which scope, with which options. DualRAG
    stores and reuses outlines in ``namespace``."""

    question: str
    scope: Scope
    _: KW_ONLY
    strategy: str = DEFAULT_STRATEGY
    options: AskOptions = field(default_factory=AskOptions)
    namespace: str = "default"
    #: What to say of the index (made under an older passages schema: :func:`~.store.indices.schema_note`).
    index_note: str = field(default="", compare=False)
    #: The id its trace is written under, where a front end names it before the run (a chat stream's
    #: header; minted by the service, never a client's); None: a new one.
    trace_id: str | None = field(default=None, compare=False)
    #: How a chat front end's conversation became the question (recorded in the trace's ``scope``).
    conversation: Mapping[str, Any] | None = field(default=None, compare=False)

    def trace_options(self) -> dict[str, Any]:
        """Return the options as the trace records them (the filters beside them, as before)."""
        return {**self.options.to_dict(), "filters": [dict(f) for f in self.scope.filters]}

    def trace_scope(self) -> dict[str, Any]:
        scope: dict[str, Any] = {"index": self.scope.index, "namespace": self.namespace}
        if self.conversation is not None:
            scope["conversation"] = dict(self.conversation)
        return scope

    def trace_user(self) -> dict[str, Any]:
        """Whom the trace belongs to (:mod:`~hopsearch.service.traces.reads`: its owner and admins read it)."""
        caller = self.scope.caller
        return {"subject": caller.subject, "key": caller.key, "admin": caller.admin, "owner": caller.owner}


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """Queries to answer over one scope, in ONE round trip (``_retrieve`` and MCP send one, Search-R1 a batch)."""

    scope: Scope
    queries: tuple[RetrievalQuery, ...]
    #: How the front end names the filters (a filter Elasticsearch refuses is a 400 naming it).
    filters_field: str = field(default="filters", compare=False)


@dataclass(frozen=True, slots=True)
class Fields:
    """How a front end names the parts of its input, so that an error names what the caller sent
    (HTTP ``body.options.k``, MCP ``k``, the CLI ``-k``)."""

    text: str = "question"
    k: str = "k"
    filters: str = "filters"
    strategy: str = "strategy"
    hops: str = "hops"


HTTP_ASK = Fields("body.question", "body.options.k", "body.options.filters", "body.strategy", "body.options.hops")
HTTP_SEARCH = Fields("body.query", "body.k", "body.filters", hops="body.hops")
MCP_ASK = Fields()
MCP_SEARCH = Fields(text="query")
CLI_ASK = Fields("QUESTION", "-k", "--filter/--source", "--strategy", "--hops")
CLI_SEARCH = Fields("QUERY", "-k", "--filter/--source", hops="--hops")


def check_text(text: str, limit: int, field: str) -> None:
    """Refuse a question, query or name that is blank (empty or only white space: nothing to retrieve or
    ask, so no retrieval and no model call) or longer than ``limit`` characters; every front end's
    request goes through here (:mod:`~hopsearch.service.app.usecases`, the MCP tools)."""
    if not text.strip():
        raise RequestInvalid("is blank: give a question or query with some text", field=field)
    if len(text) > limit:
        raise RequestInvalid(f"longer than {limit} characters", field=field)


def check_k(k: int, limit: int, field: str) -> None:
    if k < 1:
        raise RequestInvalid("must be at least 1", field=field)
    if k > limit:
        raise RequestInvalid(
            f"must be at most {limit} (HOPSEARCH_API_MAX_K); api_max_k in a settings file", field=field
        )


@dataclass(frozen=True, slots=True)
class Query:
    """One search as a front end states it, before it is checked (:func:`~.usecases.search_request`)."""

    text: str
    k: int = SEARCH_K
    mode: RetrievalMode = SEARCH_MODE
    fusion: Fusion = "rrf"
    weights: tuple[float, float] = (1.0, 1.0)
    legs: bool = False
    rerank: bool = False
    #: 1: follow what the question and the first hop name (:mod:`~.retrieval.links`); 0: one hop.
    hops: int = 0


#: The hops a request may ask for.
HOPS = (0, 1)


def check_hops(hops: int, field: str) -> None:
    if hops not in HOPS:
        raise RequestInvalid(f"must be one of {', '.join(map(str, HOPS))}", field=field)


def filters_of(value: Any) -> list[Mapping[str, Any]]:
    """Raw filters as a list (None: none)."""
    return [] if value is None else list(value)
