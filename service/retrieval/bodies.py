"""Every Elasticsearch body that reads passages, as pure functions of a query (its filters already hold
the scope's: :func:`~hopsearch.service.retrieval.planner.scoped`), a vector and a size.

- BM25: ``multi_match`` ``best_fields`` over ``title`` and ``text``, ``tie_breaker`` 0.5; a Japanese query
  searches the index's Japanese fields instead (``ja``: kuromoji sub-fields or SudachiPy tokens).
- Dense: top-level ``knn`` (8.x; ``num_candidates`` and ``rescore_vector`` as the index's
  :class:`~hopsearch.service.store.vector_index.KnnOptions` say), exact ``script_score`` cosine (7.17).
- One-request hybrids: ``bool.should`` of the BM25 clause and a dense clause; Elasticsearch's ``rrf``
  retriever over a standard and a ``knn`` retriever.
- The count of documents without a vector (what a dense search cannot see).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hopsearch.service.fusion import RRF_K
from hopsearch.service.store.vector_index import KnnOptions
from hopsearch.service.types import Fusion, RetrievalQuery

SOURCE_EXCLUDES = {"excludes": ["embedding"]}
#: ``num_candidates`` at least 100 (and 10 per hit), no rescoring: what an index without options gets.
DEFAULT_KNN = KnnOptions()
Source = bool | Mapping[str, Any]
#: A Japanese query's text and fields (:func:`~hopsearch.service.japanese.ja_query`), or None.
JaQuery = tuple[str, Sequence[str]] | None


def match_clause(text: str, boost: float = 1.0, fields: Sequence[str] = ("title", "text")) -> dict[str, Any]:
    match: dict[str, Any] = {"query": text, "fields": list(fields), "type": "best_fields", "tie_breaker": 0.5}
    if boost != 1.0:
        match["boost"] = boost
    return {"multi_match": match}


def filters_of(query: RetrievalQuery) -> list[dict[str, Any]]:
    return [dict(f) for f in query.filters]


def _match(query: RetrievalQuery, ja: JaQuery, boost: float = 1.0) -> dict[str, Any]:
    """The BM25 clause; ``ja`` searches a Japanese query's own fields."""
    text, fields = ja if ja is not None else (query.text, ("title", "text"))
    return match_clause(text, boost, fields)


def bm25_body(
    query: RetrievalQuery, size: int, *, source: Source = SOURCE_EXCLUDES, ja: JaQuery = None
) -> dict[str, Any]:
    return {
        "size": size,
        # No hit counting: lets BM25 skip non-competitive documents (block-max WAND); nothing reads the total.
        "track_total_hits": False,
        "query": {"bool": {"must": [_match(query, ja)], "filter": filters_of(query)}},
        "_source": source,
    }


def knn_clause(
    query: RetrievalQuery, vector: Sequence[float], size: int, knn_options: KnnOptions = DEFAULT_KNN
) -> dict[str, Any]:
    """The kNN search of a query (top-level ``knn``, ``knn`` retriever); ``size`` neighbours, filtered
    inside the search (``k`` counts after filtering); ``knn_options``: candidates and rescoring."""
    knn: dict[str, Any] = {
        "field": "embedding",
        "query_vector": list(vector),
        "k": size,
        "num_candidates": knn_options.candidates(size),
    }
    if knn_options.oversample > 0:
        knn["rescore_vector"] = {"oversample": knn_options.oversample}
    if query.filters:
        knn["filter"] = filters_of(query)
    return knn


def knn_body(
    query: RetrievalQuery, vector: Sequence[float], size: int | None = None, knn_options: KnnOptions = DEFAULT_KNN
) -> dict[str, Any]:
    size = size or query.k
    return {"size": size, "knn": knn_clause(query, vector, size, knn_options), "_source": SOURCE_EXCLUDES}


def script_score_clause(query: RetrievalQuery, vector: Sequence[float], boost: float = 1.0) -> dict[str, Any]:
    base: dict[str, Any] = {"bool": {"filter": filters_of(query)}} if query.filters else {"match_all": {}}
    script = {"source": "cosineSimilarity(params.qv, 'embedding') + 1.0", "params": {"qv": list(vector)}}
    clause: dict[str, Any] = {"query": base, "script": script}
    if boost != 1.0:
        clause["boost"] = boost
    return {"script_score": clause}


def script_score_body(query: RetrievalQuery, vector: Sequence[float], size: int | None = None) -> dict[str, Any]:
    return {"size": size or query.k, "query": script_score_clause(query, vector), "_source": SOURCE_EXCLUDES}


def dense_body(
    method: str, query: RetrievalQuery, vector: Sequence[float], size: int, knn_options: KnnOptions = DEFAULT_KNN
) -> dict[str, Any]:
    """The dense leg of ``method`` (``knn`` or ``script_score``)."""
    if method == "knn":
        return knn_body(query, vector, size, knn_options)
    return script_score_body(query, vector, size)


def bool_body(
    match: Mapping[str, Any], dense: Mapping[str, Any], filters: list[dict[str, Any]], size: int
) -> dict[str, Any]:
    """``bool.should`` of the BM25 clause and the dense clause (a ``knn`` or ``script_score`` query)."""
    query: dict[str, Any] = {"should": [dict(match), dict(dense)], "minimum_should_match": 1}
    if filters:
        query["filter"] = filters
    return {"size": size, "track_total_hits": False, "query": {"bool": query}}


def rrf_retriever_body(
    match: Mapping[str, Any], knn: Mapping[str, Any], filters: list[dict[str, Any]], size: int
) -> dict[str, Any]:
    """Elasticsearch's ``rrf`` retriever over a standard (BM25) and a ``knn`` retriever."""
    standard: dict[str, Any] = {"query": {"bool": {"must": [dict(match)], "filter": filters}}}
    return {
        "size": size,
        "retriever": {
            "rrf": {
                "retrievers": [{"standard": standard}, {"knn": dict(knn)}],
                "rank_constant": RRF_K,
                "rank_window_size": max(size, 50),
            }
        },
    }


def fused_body(
    fusion: Fusion,
    query: RetrievalQuery,
    vector: Sequence[float],
    method: str,
    size: int,
    *,
    ja: JaQuery = None,
    knn_options: KnnOptions = DEFAULT_KNN,
) -> dict[str, Any]:
    """The one-request hybrid body of ``bool`` or ``es_rrf`` fusion."""
    w_bm25, w_dense = query.weights
    if fusion == "es_rrf":
        knn = knn_clause(query, vector, size, knn_options)
        body = rrf_retriever_body(_match(query, ja), knn, filters_of(query), size)
    else:
        if method == "knn":
            dense = knn_clause(query, vector, size, knn_options)
            del dense["k"]  # the knn QUERY (8.12+) takes num_candidates; k only from 8.15 on
            if w_dense != 1.0:
                dense["boost"] = w_dense
            dense_clause: dict[str, Any] = {"knn": dense}
        else:
            dense_clause = script_score_clause(query, vector, w_dense)
        body = bool_body(_match(query, ja, w_bm25), dense_clause, filters_of(query), size)
    body["_source"] = SOURCE_EXCLUDES
    return body


def unembedded_count(access: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """How many documents (of those the caller may read) have no vector: the dense side cannot find them."""
    # ``embedder`` is written with every vector (``exists`` cannot see a ``_source``-only vector on 7.x)
    missing = [{"exists": {"field": "embedding"}}, {"exists": {"field": "embedder"}}]
    query: dict[str, Any] = {"must_not": missing}
    if access:
        query["filter"] = [dict(clause) for clause in access]
    return {"size": 0, "track_total_hits": True, "query": {"bool": query}}
