"""Strategy names → constructors: an explicit mapping, no lookup of classes by string.

:func:`build_strategy` wires a strategy to its collaborators: the LLM client, the retriever, the trace
sink and, where a strategy uses them, the store (DualRAG's outlines) and the embedder (DualRAG's
reranking against the entity; HyDE's dense search of the hypothetical passages).
"""

from __future__ import annotations

from collections.abc import Callable

from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import ConfigError
from hopsearch.service.llm import LLMClient
from hopsearch.service.outlines.store import EsOutlineStore, OutlinesConfig
from hopsearch.service.store import Store
from hopsearch.service.strategies.base import RecordedStrategy, Strategy
from hopsearch.service.strategies.deeprag import DeepRAG
from hopsearch.service.strategies.dualrag import DualRAG
from hopsearch.service.strategies.hyde import HyDE
from hopsearch.service.strategies.iterative import Iterative
from hopsearch.service.strategies.single import SingleRetrieval
from hopsearch.service.traces.recorder import TraceSink
from hopsearch.service.types import Embedder, RetrievalMode, Searcher

STRATEGIES: tuple[str, ...] = ("single", "deeprag", "dualrag", "iterative", "hyde")
_CLASSES: dict[str, type[RecordedStrategy]] = {
    "single": SingleRetrieval,
    "deeprag": DeepRAG,
    "dualrag": DualRAG,
    "iterative": Iterative,
    "hyde": HyDE,
}


def preferred_mode(name: str) -> RetrievalMode | None:
    """Return the retrieval mode the strategy called ``name`` is measured best with (None: the setting's)."""
    cls = _CLASSES.get(name)
    return cls.preferred_retrieval_mode if cls is not None else None


def build_strategy(
    name: str,
    *,
    llm: LLMClient,
    retriever: Searcher,
    sink: TraceSink | None,
    store: Store | None = None,
    embedder: Embedder | None = None,
    settings: Settings,
) -> Strategy:
    """Build the strategy called ``name`` (one of :data:`STRATEGIES`)."""
    timeout_s = settings.llm_deadline
    stops = settings.llm_stop_fallback
    typed = settings.answer_type_model
    builders: dict[str, Callable[[], Strategy]] = {
        "single": lambda: SingleRetrieval(
            llm, retriever, sink, timeout_s=timeout_s, stop_fallback=stops, answer_type_model=typed
        ),
        "deeprag": lambda: DeepRAG(
            llm, retriever, sink, timeout_s=timeout_s, stop_fallback=stops, answer_type_model=typed
        ),
        "dualrag": lambda: DualRAG(
            llm,
            retriever,
            sink,
            outlines=EsOutlineStore(store, config=OutlinesConfig.of(settings)) if store is not None else None,
            embedder=embedder,
            max_age_s=settings.outline_max_age_s,
            persist=settings.outline_persist,
            timeout_s=timeout_s,
            answer_type_model=typed,
        ),
        "iterative": lambda: Iterative(llm, retriever, sink, timeout_s=timeout_s, answer_type_model=typed),
        "hyde": lambda: HyDE(
            llm,
            retriever,
            sink,
            decompose=settings.hyde_decompose,
            hypothetical=settings.hyde_hypothetical,
            dense=embedder is not None,
            timeout_s=timeout_s,
            answer_type_model=typed,
        ),
    }
    if name not in builders:
        raise ConfigError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    return builders[name]()
