"""Wiring shared by every front end (CLI, HTTP, evaluation): one store, embedder, retriever, LLM
client and trace sink per process, and the strategies built over them by name."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hopsearch.service.embedders import make_embedder
from hopsearch.service.errors import IndexMissing
from hopsearch.service.llm import LLMClient
from hopsearch.service.rerank import make_reranker
from hopsearch.service.retrieval import EsRetriever
from hopsearch.service.settings import Settings
from hopsearch.service.store import Store
from hopsearch.service.strategies import STRATEGIES, Answer, AskOptions, Strategy, build_strategy
from hopsearch.service.traces import ElasticsearchTraceSink
from hopsearch.service.types import Embedder, RetrievalMode, RetrievalQuery, SearchResult

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
    _strategies: dict[str, Strategy] = field(default_factory=dict)

    @classmethod
    async def open(
        cls,
        settings: Settings,
        *,
        passages: str | None = None,
        filters: Sequence[Mapping[str, Any]] = (),
        refresh_traces: bool = False,
    ) -> Runtime:
        """Clients over ``settings``; ``passages`` is the index or alias retrieval reads (default: the
        settings' passages alias); ``filters`` are added to every retrieval (``--source docs``)."""
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
            retriever=EsRetriever(store, embedder, index=passages, filters=filters, reranker=make_reranker(settings)),
            sink=ElasticsearchTraceSink(store, settings.traces_index, refresh=refresh_traces),
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

    async def retrieval_mode(self, strategy: str | None = None) -> RetrievalMode:
        """The retrieval mode where a request sets none: the ``retrieval_mode`` setting where it is set,
        else the ``strategy``'s own preference (``preferred_retrieval_mode``: DualRAG's keywords retrieve
        best with BM25), else the setting's default — each where the passages index holds this
        embedder's vectors, else ``bm25``."""
        mode = self.settings.retrieval_mode
        if strategy is not None and "retrieval_mode" not in self.settings.model_fields_set:
            mode = getattr(self.strategy(strategy), "preferred_retrieval_mode", None) or mode
        if mode == "bm25" or self.embedder is None:
            return "bm25"
        try:
            meta = await self.store.index_meta(self.retriever.index)
        except IndexMissing:
            return "bm25"
        return mode if self.retriever.embedder_for(meta.get("embedder")) is not None else "bm25"

    def strategy(self, name: str) -> Strategy:
        """The strategy called ``name`` (one of :data:`STRATEGIES`), built once per runtime."""
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

    async def ask(self, question: str, *, strategy: str = "deeprag", options: AskOptions | None = None) -> Answer:
        """Answer ``question`` with the strategy called ``strategy``; a failure is ``Answer.error`` (see
        :meth:`Answer.raise_for_error`), and the trace is written either way."""
        return await self.strategy(strategy).answer(question, options or AskOptions())

    async def search(
        self,
        query: str,
        *,
        k: int = 10,
        mode: RetrievalMode = "bm25",
        filters: Sequence[Mapping[str, Any]] = (),
    ) -> SearchResult:
        """The top ``k`` passages for ``query`` (BM25, dense or hybrid; ``filters`` are literal
        Elasticsearch filter clauses)."""
        results = await self.retriever.search_many([RetrievalQuery(query, k=k, mode=mode, filters=filters)])
        return results[0]


__all__ = ["STRATEGIES", "Runtime"]
