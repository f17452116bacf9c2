"""Requests and scopes for tests that drive strategies and retrievers directly (front ends build theirs
with :mod:`hopsearch.service.app.usecases`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from hopsearch.service.access import ADMIN, Caller, Scope
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.requests import AskOptions, AskRequest
from hopsearch.service.retrieval import BoundRetriever, EsRetriever
from hopsearch.service.retrieval.config import RetrievalConfig
from hopsearch.service.retrieval.filters import parse_filters
from hopsearch.service.retrieval.rerank import HttpReranker
from hopsearch.service.store import Store
from hopsearch.service.types import Embedder

#: The index of requests whose retriever is not Elasticsearch (a test's list of passages).
NO_INDEX = "passages"


def scope_of(
    store: Store | None = None,
    *,
    index: str | None = None,
    filters: Sequence[Mapping[str, Any]] = (),
    caller: Caller = ADMIN,
) -> Scope:
    """A scope over ``index`` (default: the store's passages alias) with filters in the filter language."""
    name = index or (store.settings.passages_alias if store is not None else NO_INDEX)
    return Scope(name, caller, tuple(parse_filters(list(filters))))


def bound(
    store: Store,
    embedder: Embedder | MiniLMEmbedder | None = None,
    *,
    index: str | None = None,
    filters: Sequence[Mapping[str, Any]] = (),
    reranker: HttpReranker | None = None,
) -> BoundRetriever:
    """An :class:`EsRetriever` over ``store`` bound to :func:`scope_of` (what a strategy's run reads through)."""
    config = RetrievalConfig.of(store.settings)
    return EsRetriever(store, embedder, reranker=reranker, config=config).bind(
        scope_of(store, index=index, filters=filters)
    )


def asking(
    question: str,
    options: AskOptions | None = None,
    *,
    store: Store | None = None,
    index: str | None = None,
    filters: Sequence[Mapping[str, Any]] = (),
    namespace: str = "default",
    strategy: str = "deeprag",
) -> AskRequest:
    """The request of ``question`` as an admin over :func:`scope_of`; unseeded unless ``options`` say (these
    tests drive a strategy's own loop: seeded runs have their tests, ``test_seed_es.py``)."""
    options = options or AskOptions()
    return AskRequest(
        question,
        scope_of(store, index=index, filters=filters),
        strategy=strategy,
        options=replace(options, seed=False) if options.seed is None else options,
        namespace=namespace,
    )
