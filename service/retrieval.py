"""Retrieval over the passages index: BM25, dense and hybrid, many queries in ONE ``_msearch``.

- BM25: ``multi_match`` ``best_fields`` over ``title`` and ``text``, ``tie_breaker`` 0.5; a Japanese query
  searches the index's Japanese fields instead (kuromoji sub-fields or SudachiPy tokens, per ``_meta``).
- Dense: top-level ``knn`` (8.x), exact ``script_score`` cosine (7.17 with vectors), or cosine computed
  here over the BM25 candidates where the server has no vectors (``rerank``). The method used is
  reported with every result.
- Hybrid: Reciprocal Rank Fusion (k = 60) of the BM25 and dense lists, client-side.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from hopsearch.service.errors import ConfigError, EmbedderMismatch
from hopsearch.service.japanese import ja_query
from hopsearch.service.store import Store
from hopsearch.service.types import DenseMethod, Embedder, Hit, RetrievalQuery, SearchResult, embed_queries

RRF_K = 60
SOURCE_EXCLUDES = {"excludes": ["embedding"]}


def rrf(lists: Sequence[Sequence[Hit]], *, k: int = RRF_K, size: int | None = None) -> list[Hit]:
    """Reciprocal Rank Fusion: score(d) = Σ 1 / (k + rank_i(d)), ranks from 1. Ties keep first-seen order."""
    scores: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for hits in lists:
        for rank, hit in enumerate(hits, start=1):
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (k + rank)
            first.setdefault(hit.id, hit)
    order = sorted(scores, key=lambda doc_id: -scores[doc_id])
    return [_with_score(first[doc_id], scores[doc_id]) for doc_id in order[:size]]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def _with_score(hit: Hit, score: float) -> Hit:
    return Hit(id=hit.id, score=score, title=hit.title, text=hit.text, source=hit.source)


def _hits(response: Mapping[str, Any]) -> list[Hit]:
    out = []
    for raw in response.get("hits", {}).get("hits", []):
        source = raw.get("_source") or {}
        out.append(
            Hit(
                id=str(raw["_id"]),
                score=float(raw.get("_score") or 0.0),
                title=str(source.get("title", "")),
                text=str(source.get("text", "")),
                source=source,
            )
        )
    return out


SourceFilter = bool | Mapping[str, Any]


def bm25_body(
    query: RetrievalQuery,
    size: int,
    *,
    source: SourceFilter = SOURCE_EXCLUDES,
    ja: tuple[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """``ja`` (from :func:`~hopsearch.service.japanese.ja_query`) searches a Japanese query's own fields."""
    text, fields = ja if ja is not None else (query.text, ("title", "text"))
    match = {
        "multi_match": {
            "query": text,
            "fields": list(fields),
            "type": "best_fields",
            "tie_breaker": 0.5,
        }
    }
    return {
        "size": size,
        # No hit counting: lets BM25 skip non-competitive documents (block-max WAND); nothing reads the total.
        "track_total_hits": False,
        "query": {"bool": {"must": [match], "filter": [dict(f) for f in query.filters]}},
        "_source": source,
    }


def knn_body(query: RetrievalQuery, vector: Sequence[float]) -> dict[str, Any]:
    knn: dict[str, Any] = {
        "field": "embedding",
        "query_vector": list(vector),
        "k": query.k,
        "num_candidates": max(100, query.k * 10),
    }
    if query.filters:
        knn["filter"] = [dict(f) for f in query.filters]
    return {"size": query.k, "knn": knn, "_source": SOURCE_EXCLUDES}


def script_score_body(query: RetrievalQuery, vector: Sequence[float]) -> dict[str, Any]:
    base: dict[str, Any] = (
        {"bool": {"filter": [dict(f) for f in query.filters]}} if query.filters else {"match_all": {}}
    )
    return {
        "size": query.k,
        "query": {
            "script_score": {
                "query": base,
                "script": {
                    "source": "cosineSimilarity(params.qv, 'embedding') + 1.0",
                    "params": {"qv": list(vector)},
                },
            }
        },
        "_source": SOURCE_EXCLUDES,
    }


class EsRetriever:
    """The :class:`~hopsearch.service.types.Retriever` over the passages index of a store."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder | None = None,
        *,
        index: str | None = None,
        rerank_candidates: int = 100,
        filters: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.index = index or store.settings.passages_alias
        #: filter clauses added to every query (``--source docs``: one corpus of a shared index)
        self.filters = tuple(filters)
        self.rerank_candidates = rerank_candidates

    async def _dense_method(self) -> DenseMethod:
        if self.embedder is None:
            raise ConfigError("dense and hybrid retrieval need an embedder (HOPSEARCH_EMBEDDER)")
        meta = await self.store.index_meta(self.index)
        if meta.get("embedder") is None:
            raise EmbedderMismatch(f"index [{self.index}] holds no vectors (BM25 only); use mode bm25")
        if meta.get("embedder") != self.embedder.model_id:
            raise EmbedderMismatch(
                f"index [{self.index}] holds vectors of {meta.get('embedder')!r}, the query embedder is "
                f"{self.embedder.model_id!r}"
            )
        mode = str(meta.get("vector_mode") or self.store.info.dense_method)
        if mode == "knn" and self.store.info.knn:
            return "knn"
        if mode == "script_score" and self.store.info.dense_method == "script_score":
            return "script_score"
        return "rerank"

    async def _stored_source(self) -> SourceFilter:
        """``_source`` of BM25 hits: as stored when the index holds no vectors (source filtering makes the
        node parse and rewrite every hit, ~0.5 ms of a 50-hit search), else without the vector."""
        meta = await self.store.index_meta(self.index)
        return True if meta.get("embedder") is None else SOURCE_EXCLUDES

    async def search_many(self, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        """Answer every query with ONE ``_msearch`` (two bodies per hybrid query on vector servers)."""
        if not queries:
            return []
        if self.filters:
            queries = [dataclasses.replace(q, filters=(*q.filters, *self.filters)) for q in queries]
        dense_idx = [i for i, q in enumerate(queries) if q.mode != "bm25"]
        method: DenseMethod = "none"
        vectors: dict[int, list[float]] = {}
        if dense_idx:
            method = await self._dense_method()
            assert self.embedder is not None
            embedded = await embed_queries(self.embedder, [queries[i].text for i in dense_idx])
            vectors = dict(zip(dense_idx, embedded, strict=True))
        plain = await self._stored_source()
        meta = await self.store.index_meta(self.index)
        ja = [ja_query(q.text, meta) for q in queries]
        searches: list[tuple[str, dict[str, Any]]] = []
        plan: list[dict[str, int]] = []
        for i, query in enumerate(queries):
            slots: dict[str, int] = {}
            if query.mode == "bm25" or method == "rerank":
                size = max(query.k, self.rerank_candidates) if query.mode != "bm25" else query.k
                slots["bm25"] = len(searches)
                source: SourceFilter = True if query.mode != "bm25" else plain
                searches.append((self.index, bm25_body(query, size, source=source, ja=ja[i])))
            else:
                if query.mode == "hybrid":
                    slots["bm25"] = len(searches)
                    searches.append((self.index, bm25_body(query, query.k, source=plain, ja=ja[i])))
                slots["dense"] = len(searches)
                body = knn_body if method == "knn" else script_score_body
                searches.append((self.index, body(query, vectors[i])))
            plan.append(slots)
        gap_slot = -1
        if vectors:  # one count more in the same round trip: how much of the index dense cannot see
            gap_slot = len(searches)
            searches.append((self.index, UNEMBEDDED_COUNT))
        responses = await self.store.msearch(searches)
        unembedded = _total(responses[gap_slot]) if gap_slot >= 0 else 0
        results = []
        for i, (query, slots) in enumerate(zip(queries, plan, strict=True)):
            took = float(sum(responses[s].get("took", 0) for s in slots.values()))
            bm25 = _hits(responses[slots["bm25"]]) if "bm25" in slots else []
            if query.mode == "bm25":
                hits = [_strip_vector(h) for h in bm25[: query.k]]  # a meta read before a rebuild swap
            else:
                if method == "rerank":
                    dense = sorted(  # a candidate without a vector (--no-embed) has no dense score
                        (_with_score(h, cosine(vectors[i], h.source["embedding"])) for h in bm25 if _vector(h)),
                        key=lambda h: -h.score,
                    )
                    bm25 = bm25[: query.k]
                else:
                    dense = _hits(responses[slots["dense"]])
                hits = dense[: query.k] if query.mode == "dense" else rrf([bm25, dense], size=query.k)
                hits = [_strip_vector(h) for h in hits]
            results.append(
                SearchResult(
                    query=query,
                    hits=tuple(hits),
                    mode=query.mode,
                    dense_method=method if i in vectors else "none",
                    took_ms=took,
                    without_vectors=unembedded if i in vectors else 0,
                )
            )
        return results


def without_vectors_note(count: int) -> str:
    """What a dense or hybrid result says when part of the index has no vectors."""
    return (
        f"{count:,} documents of the index have no vector (loaded with --no-embed?): the dense side cannot "
        "find them; load them again with the embedder"
    )


UNEMBEDDED_COUNT: dict[str, Any] = {
    "size": 0,
    "track_total_hits": True,
    # ``embedder`` is written with every vector (``exists`` cannot see a ``_source``-only vector on 7.x)
    "query": {"bool": {"must_not": [{"exists": {"field": "embedding"}}, {"exists": {"field": "embedder"}}]}},
}


def _total(response: dict[str, Any]) -> int:
    total = response.get("hits", {}).get("total", 0)
    return int(total.get("value", 0) if isinstance(total, dict) else total)


def _vector(hit: Hit) -> bool:
    return bool(hit.source.get("embedding"))


def _strip_vector(hit: Hit) -> Hit:
    if "embedding" not in hit.source:
        return hit
    source = {k: v for k, v in hit.source.items() if k != "embedding"}
    return Hit(id=hit.id, score=hit.score, title=hit.title, text=hit.text, source=source)
