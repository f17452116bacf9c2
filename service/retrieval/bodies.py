"""Every Elasticsearch body that reads passages, as pure functions of a query (its filters already hold
the scope's: :func:`~hopsearch.service.retrieval.planner.scoped`), a vector and a size.

- BM25: ``multi_match`` ``most_fields`` over ``title`` and ``text``, or ``best_fields`` with ``tie_breaker``
  0.5 (DeepRAG's; ``bm25_query``); a Japanese query searches the index's Japanese fields instead (``ja``:
  kuromoji sub-fields or SudachiPy tokens).
- Dense: top-level ``knn`` (8.x; ``num_candidates`` and ``rescore_vector`` as the index's
  :class:`~hopsearch.service.store.vector_index.KnnOptions` say), exact ``script_score`` cosine (7.17).
- One-request hybrids: ``bool.should`` of the BM25 clause and a dense clause; Elasticsearch's ``rrf``
  retriever over a standard and a ``knn`` retriever.
- The count of documents without a vector (what a dense search cannot see).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hopsearch.service.retrieval.fusion import RRF_K
from hopsearch.service.store.vector_index import KnnOptions
from hopsearch.service.types import Bm25Query, Fusion, RetrievalQuery

SOURCE_EXCLUDES = {"excludes": ["embedding"]}
#: ``num_candidates`` at least 100 (and 10 per hit), no rescoring: what an index without options gets.
DEFAULT_KNN = KnnOptions()
#: ``Settings.bm25_query``'s default (block-max WAND applies; DeepRAG's ``best_fields`` stays a setting).
DEFAULT_BM25: Bm25Query = "most_fields"
Source = bool | Mapping[str, Any]
#: The fields BM25 searches in hopsearch's passages (an attached index's are its field map's).
SEARCHED = ("title", "text")
#: hopsearch's vector field (an attached index's is its field map's).
VECTOR = "embedding"


def source_excludes(vector: str) -> Mapping[str, Any]:
    """``_source`` without the vector field ``vector``."""
    return SOURCE_EXCLUDES if vector == VECTOR else {"excludes": [vector]}


#: A Japanese query's text and fields (:func:`~hopsearch.service.text.japanese.ja_query`), or None.
JaQuery = tuple[str, Sequence[str]] | None


def match_clause(
    text: str, boost: float = 1.0, fields: Sequence[str] = SEARCHED, kind: Bm25Query = DEFAULT_BM25
) -> dict[str, Any]:
    """``multi_match`` of ``kind``: ``best_fields`` keeps DeepRAG's ``tie_breaker`` 0.5 (a ``dis_max`` that
    scores every matching document), ``most_fields`` adds the fields' scores (Lucene skips blocks)."""
    match: dict[str, Any] = {"query": text, "fields": list(fields), "type": kind}
    if kind == "best_fields":
        match["tie_breaker"] = 0.5
    if boost != 1.0:
        match["boost"] = boost
    return {"multi_match": match}


def filters_of(query: RetrievalQuery) -> list[dict[str, Any]]:
    return [dict(f) for f in query.filters]


def match_of(
    query: RetrievalQuery,
    ja: JaQuery,
    boost: float = 1.0,
    searched: Sequence[str] = SEARCHED,
    kind: Bm25Query = DEFAULT_BM25,
) -> dict[str, Any]:
    """Return the BM25 clause over ``searched``; ``ja`` searches a Japanese query's own fields. Full-width Latin,
    digits and signs are searched half-width (``Ｍ－２０４`` as ``M-204``: the analyzers keep them apart)."""
    text, fields = ja if ja is not None else (query.text.translate(_HALF_WIDTH), searched)
    return match_clause(text, boost, fields, kind)


#: Full-width ASCII (U+FF01–U+FF5E) and the ideographic space to their half-width forms.
_HALF_WIDTH = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}


def bm25_body(
    query: RetrievalQuery,
    size: int,
    *,
    source: Source = SOURCE_EXCLUDES,
    ja: JaQuery = None,
    searched: Sequence[str] = SEARCHED,
    excerpt: str | None = None,
    kind: Bm25Query = DEFAULT_BM25,
) -> dict[str, Any]:
    """``excerpt``: a text field whose best passages come back with each hit (:func:`excerpt_of`); ``kind``:
    the ``multi_match`` type (:func:`match_clause`)."""
    body = {
        "size": size,
        # No hit counting: lets BM25 skip non-competitive documents (block-max WAND); nothing reads the total.
        "track_total_hits": False,
        "query": {"bool": {"must": [match_of(query, ja, searched=searched, kind=kind)], "filter": filters_of(query)}},
        "_source": source,
    }
    if excerpt is not None:
        body["highlight"] = excerpt_of(excerpt)
    return body


#: An excerpt of a long document (an attached index holds whole documents: a connector's ``body``): its
#: best passages by the query, at most this many of about this many characters, in document order.
EXCERPT_FRAGMENTS = 3
EXCERPT_CHARS = 400


def excerpt_of(field: str) -> dict[str, Any]:
    """Return the ``highlight`` that gives a hit's excerpt of ``field``, without tags (plain text for a prompt)."""
    spec = {"fragment_size": EXCERPT_CHARS, "number_of_fragments": EXCERPT_FRAGMENTS, "no_match_size": EXCERPT_CHARS}
    return {"pre_tags": [""], "post_tags": [""], "fields": {field: spec}}


def knn_clause(
    query: RetrievalQuery,
    vector: Sequence[float],
    size: int,
    field: str = VECTOR,
    knn_options: KnnOptions = DEFAULT_KNN,
) -> dict[str, Any]:
    """Return the kNN search of a query (top-level ``knn``, ``knn`` retriever) over the vector ``field``; ``size``
    neighbours, filtered inside the search (``k`` counts after filtering); ``knn_options``: candidates and
    rescoring."""
    knn: dict[str, Any] = {
        "field": field,
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
    query: RetrievalQuery,
    vector: Sequence[float],
    size: int | None = None,
    field: str = VECTOR,
    knn_options: KnnOptions = DEFAULT_KNN,
) -> dict[str, Any]:
    size = size or query.k
    return {"size": size, "knn": knn_clause(query, vector, size, field, knn_options), "_source": source_excludes(field)}


def script_score_clause(
    query: RetrievalQuery, vector: Sequence[float], boost: float = 1.0, field: str = VECTOR
) -> dict[str, Any]:
    base: dict[str, Any] = {"bool": {"filter": filters_of(query)}} if query.filters else {"match_all": {}}
    if "'" in field or "\\" in field:
        raise ValueError(f"a vector field name without quotes or backslashes, not {field!r}")
    script = {"source": f"cosineSimilarity(params.qv, '{field}') + 1.0", "params": {"qv": list(vector)}}
    clause: dict[str, Any] = {"query": base, "script": script}
    if boost != 1.0:
        clause["boost"] = boost
    return {"script_score": clause}


def script_score_body(
    query: RetrievalQuery, vector: Sequence[float], size: int | None = None, field: str = VECTOR
) -> dict[str, Any]:
    clause = script_score_clause(query, vector, field=field)
    return {"size": size or query.k, "query": clause, "_source": source_excludes(field)}


def dense_body(
    method: str,
    query: RetrievalQuery,
    vector: Sequence[float],
    size: int,
    field: str = VECTOR,
    knn_options: KnnOptions = DEFAULT_KNN,
) -> dict[str, Any]:
    """Return the dense leg of ``method`` (``knn`` or ``script_score``) over the vector ``field``."""
    if method == "knn":
        return knn_body(query, vector, size, field, knn_options)
    return script_score_body(query, vector, size, field)


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
    searched: Sequence[str] = SEARCHED,
    field: str = VECTOR,
    knn_options: KnnOptions = DEFAULT_KNN,
    kind: Bm25Query = DEFAULT_BM25,
) -> dict[str, Any]:
    """Return the one-request hybrid body of ``bool`` or ``es_rrf`` fusion (``kind``: the BM25 clause's type)."""
    w_bm25, w_dense = query.weights
    if fusion == "es_rrf":
        match = match_of(query, ja, searched=searched, kind=kind)
        body = rrf_retriever_body(match, knn_clause(query, vector, size, field, knn_options), filters_of(query), size)
    else:
        if method == "knn":
            dense = knn_clause(query, vector, size, field, knn_options)
            del dense["k"]  # the knn QUERY (8.12+) takes num_candidates; k only from 8.15 on
            if w_dense != 1.0:
                dense["boost"] = w_dense
            dense_clause: dict[str, Any] = {"knn": dense}
        else:
            dense_clause = script_score_clause(query, vector, w_dense, field)
        body = bool_body(match_of(query, ja, w_bm25, searched, kind), dense_clause, filters_of(query), size)
    body["_source"] = source_excludes(field)
    return body


def unembedded_count(access: Sequence[Mapping[str, Any]] = (), field: str = VECTOR) -> dict[str, Any]:
    """How many documents (of those the caller may read) have no vector: the dense side cannot find them."""
    # ``embedder`` is written with every vector (``exists`` cannot see a ``_source``-only vector on 7.x);
    # another vector ``field`` (an attached index's, indexed) is asked for alone
    missing = [{"exists": {"field": field}}] + ([{"exists": {"field": "embedder"}}] if field == VECTOR else [])
    query: dict[str, Any] = {"must_not": missing}
    if access:
        query["filter"] = [dict(clause) for clause in access]
    return {"size": 0, "track_total_hits": True, "query": {"bool": query}}
