"""Retrieval over passages indices: BM25, dense and hybrid, many queries in ONE ``_msearch``.

- :mod:`.bodies`: every query body, as pure functions;
- :mod:`.planner`: (queries, scope, index facts, cluster capabilities) → a plan of bodies and fusion;
- :mod:`.results`: the plan's responses → results (client-side fusion and cosine where planned);
- :mod:`.executor`: :class:`EsRetriever`, which embeds, plans, runs and reranks.

Dense: top-level ``knn`` (8.x), exact ``script_score`` cosine (7.17 with vectors), or cosine computed here
over the BM25 candidates where the server has no vectors (``rerank``); hybrid: the fusion asked for where
the server can run it (:mod:`hopsearch.service.retrieval.fusion`), else client-side RRF. The method and fusion used
are reported with every result.
"""

from hopsearch.service.retrieval.bodies import bm25_body, knn_body, script_score_body
from hopsearch.service.retrieval.executor import BoundRetriever, EsRetriever
from hopsearch.service.retrieval.fusion import RRF_K, rrf
from hopsearch.service.retrieval.results import cosine, without_vectors_note

__all__ = [
    "RRF_K",
    "BoundRetriever",
    "EsRetriever",
    "bm25_body",
    "cosine",
    "knn_body",
    "rrf",
    "script_score_body",
    "without_vectors_note",
]
