"""The settings retrieval uses, handed to :class:`~hopsearch.service.retrieval.executor.EsRetriever` (built once
by the runtime from :class:`~hopsearch.service.config.settings.Settings`; the defaults are Settings')."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hopsearch.service.config.settings import Settings
from hopsearch.service.embedders.factory import LocalEmbedders
from hopsearch.service.types import Bm25Query


@dataclass(frozen=True, slots=True)
class RetrievalConfig:
    """What :class:`~hopsearch.service.retrieval.executor.EsRetriever` reads of the settings."""

    #: the ``ja_synonyms`` file (None: no synonyms)
    ja_synonyms: Path | None = None
    #: the ``multi_match`` type of BM25 (``bm25_query``)
    bm25_query: Bm25Query = "most_fields"
    #: ``knn_num_candidates`` and ``knn_oversample``
    knn_num_candidates: int = 100
    knn_oversample: float = 3.0
    #: how the embedder of an index built with another one is made (:func:`embedder_for_id`)
    embedders: LocalEmbedders = field(default_factory=LocalEmbedders)
    #: ``hops_names``: a Japanese question's second hop looks the chunks' ``names`` up (not the mention search)
    hops_names: bool = False

    @classmethod
    def of(cls, settings: Settings) -> RetrievalConfig:
        return cls(
            ja_synonyms=settings.ja_synonyms,
            bm25_query=settings.bm25_query,
            knn_num_candidates=settings.knn_num_candidates,
            knn_oversample=settings.knn_oversample,
            embedders=LocalEmbedders.of(settings),
            hops_names=settings.hops_names,
        )
