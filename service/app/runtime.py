"""Wiring shared by every front end (CLI, HTTP, MCP, evaluation): one store, embedder, retriever, LLM
client and trace sink per process, serving any passages index, and the strategies built over them by
name. What a request asks travels in its request value (:mod:`hopsearch.service.requests`), never in
the runtime."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hopsearch.service.access import ADMIN
from hopsearch.service.app import usecases
from hopsearch.service.config.settings import Settings
from hopsearch.service.embedders import make_embedder
from hopsearch.service.errors import IndexMissing
from hopsearch.service.llm import LLMClient
from hopsearch.service.outlines.store import OutlinesConfig
from hopsearch.service.requests import AskOptions, Query
from hopsearch.service.retrieval import EsRetriever
from hopsearch.service.retrieval.config import RetrievalConfig
from hopsearch.service.retrieval.rerank import make_reranker
from hopsearch.service.store import Store
from hopsearch.service.strategies import STRATEGIES, Answer, Strategy, build_strategy
from hopsearch.service.strategies.registry import preferred_mode
from hopsearch.service.traces.recorder import ElasticsearchTraceSink
from hopsearch.service.types import Embedder, RetrievalMode, SearchResult

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Long-lived clients. Open with :meth:`open`, close with :meth:`close` (or ``async with``)."""

    settings: Settings
    store: Store
    embedder: Embedder | None
    llm: LLMClient
    retriever: EsRetriever
    sink: ElasticsearchTraceSink
    #: what the outline stores over :attr:`store` use of the settings
    outlines_config: OutlinesConfig = field(default_factory=OutlinesConfig)
    _strategies: dict[str, Strategy] = field(default_factory=dict)

    @classmethod
    async def open(cls, settings: Settings, *, refresh_traces: bool = False) -> Runtime:
        """Clients over ``settings``; any passages index is read through them (each request names its own)."""
        store = await Store.connect(settings)
        try:
            embedder = make_embedder(settings)
            llm = LLMClient(settings)
        except Exception:
            await store.close()
            raise
        return cls(
            settings=settings,
            store=store,
            embedder=embedder,
            llm=llm,
            retriever=EsRetriever(
                store, embedder, reranker=make_reranker(settings), config=RetrievalConfig.of(settings)
            ),
            sink=ElasticsearchTraceSink(store, settings.traces_index, refresh=refresh_traces),
            outlines_config=OutlinesConfig.of(settings),
        )

    async def close(self) -> None:
        try:
            pending = await self.sink.flush()
            if pending:
                log.error("%d trace(s) could not be stored before closing: they are lost", pending)
        finally:
            if self.retriever.reranker is not None:
                await self.retriever.reranker.aclose()
            await self.llm.aclose()
            await self.store.close()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def retrieval_mode(self, strategy: str | None = None, index: str | None = None) -> RetrievalMode:
        """Return the retrieval mode where a request sets none, over ``index`` (default: the passages alias): the
        ``retrieval_mode`` setting where it is set, else the ``strategy``'s own preference (DualRAG's
        keywords retrieve best with BM25), else the setting's default — each where the index holds this
        embedder's vectors, else ``bm25``."""
        mode = self.settings.retrieval_mode
        if strategy is not None and "retrieval_mode" not in self.settings.model_fields_set:
            mode = preferred_mode(strategy) or mode
        if mode == "bm25" or self.embedder is None:
            return "bm25"
        try:
            facts = await self.retriever.facts(index or self.settings.passages_alias)
        except IndexMissing:
            return "bm25"
        return mode if self.retriever.embedder_for(facts.embedder) is not None else "bm25"

    def strategy(self, name: str) -> Strategy:
        """Return the strategy called ``name`` (one of :data:`STRATEGIES`), built once per runtime; it serves any
        index (each question's request names its scope)."""
        if name not in self._strategies:
            self._strategies[name] = build_strategy(
                name,
                llm=self.llm,
                retriever=self.retriever,
                sink=self.sink,
                store=self.store,
                embedder=self.embedder,
                settings=self.settings,
            )
        return self._strategies[name]

    async def ask(
        self,
        question: str,
        *,
        strategy: str = "deeprag",
        options: AskOptions | None = None,
        index: str | None = None,
        filters: Sequence[Mapping[str, Any]] = (),
    ) -> Answer:
        """Answer ``question`` as an admin with the strategy called ``strategy`` (the Python entry point;
        front ends build their requests with :func:`hopsearch.service.app.usecases.ask_request`). A failure is
        ``Answer.error`` (see :meth:`Answer.raise_for_error`), and the trace is written either way."""
        request = await usecases.ask_request(
            self, question, strategy=strategy, index=index, caller=ADMIN, filters=filters, options=options
        )
        return await usecases.ask(self, request)

    async def search(
        self,
        query: str,
        *,
        k: int = 10,
        mode: RetrievalMode = "bm25",
        filters: Sequence[Mapping[str, Any]] = (),
        index: str | None = None,
    ) -> SearchResult:
        """Return the top ``k`` passages for ``query`` (BM25, dense or hybrid; ``filters`` are filters of
        :mod:`hopsearch.service.retrieval.filters`), as an admin."""
        request = await usecases.search_request(
            self, [Query(query, k=k, mode=mode)], index=index, caller=ADMIN, filters=filters
        )
        return (await usecases.search(self, request))[0]


__all__ = ["STRATEGIES", "Runtime"]
