"""Retrieval over the passages index: BM25, dense and hybrid, many queries in ONE ``_msearch``.

- BM25: ``multi_match`` ``best_fields`` over ``title`` and ``text``, ``tie_breaker`` 0.5; a Japanese query
  searches the index's Japanese fields instead (kuromoji sub-fields or SudachiPy tokens, per ``_meta``).
- Dense: top-level ``knn`` (8.x), exact ``script_score`` cosine (7.17 with vectors), or cosine computed
  here over the BM25 candidates where the server has no vectors (``rerank``). The method used is
  reported with every result.
- Hybrid: the fusion asked for where the server can run it (:mod:`.fusion`: client-side RRF by default,
  ``bool.should`` in one request, Elasticsearch's ``rrf`` retriever), else client-side RRF; the fusion
  that ran (and why another did not) is reported with every result.
- Optionally, a cross-encoder reranker (:mod:`.rerank`) reorders the top hits of any mode.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import Any

from hopsearch.service.errors import ConfigError, EmbedderMismatch, StoreError
from hopsearch.service.filters import in_scope
from hopsearch.service.fusion import (
    RRF_K,
    bool_body,
    choose,
    licence_of,
    refused,
    rrf,
    rrf_groups,
    rrf_order,
    rrf_retriever_body,
    split,
    with_score,
)
from hopsearch.service.japanese import ja_query
from hopsearch.service.path_filters import with_relative_paths
from hopsearch.service.rerank import HttpReranker
from hopsearch.service.store import Store
from hopsearch.service.types import (
    DenseMethod,
    Embedder,
    Fusion,
    Hit,
    RetrievalQuery,
    SearchResult,
    embed_queries,
    make_hit,
)

__all__ = ["RRF_K", "EsRetriever", "bm25_body", "cosine", "knn_body", "rrf", "script_score_body"]

SOURCE_EXCLUDES = {"excludes": ["embedding"]}
Source = bool | Mapping[str, Any]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def _hits(response: Mapping[str, Any]) -> list[Hit]:
    """The hits of a search response (ids are strings and scores numbers in Elasticsearch's JSON)."""
    found = response.get("hits")
    if not found:
        return []
    out: list[Hit] = []
    append = out.append
    for raw in found["hits"]:
        source = raw.get("_source") or {}
        append(make_hit(raw["_id"], raw.get("_score") or 0.0, source.get("title", ""), source.get("text", ""), source))
    return out


def _raw_hits(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = response.get("hits")
    return found["hits"] if found else []


def _hit_of(raw: Mapping[str, Any], score: float) -> Hit:
    """A raw hit as :func:`_hits` builds it (vector stripped), with ``score``."""
    source = raw.get("_source") or {}
    hit = make_hit(raw["_id"], score, source.get("title", ""), source.get("text", ""), source)
    return _strip_vector(hit) if "embedding" in source else hit


_RAW_ID: Callable[[Mapping[str, Any]], str] = itemgetter("_id")


def match_clause(text: str, boost: float = 1.0, fields: Sequence[str] = ("title", "text")) -> dict[str, Any]:
    match: dict[str, Any] = {"query": text, "fields": list(fields), "type": "best_fields", "tie_breaker": 0.5}
    if boost != 1.0:
        match["boost"] = boost
    return {"multi_match": match}


def _filters(query: RetrievalQuery) -> list[dict[str, Any]]:
    return [dict(f) for f in query.filters]


JaQuery = tuple[str, Sequence[str]] | None


def _match(query: RetrievalQuery, ja: JaQuery, boost: float = 1.0) -> dict[str, Any]:
    """The BM25 clause; ``ja`` (from :func:`~hopsearch.service.japanese.ja_query`) searches a Japanese
    query's own fields."""
    text, fields = ja if ja is not None else (query.text, ("title", "text"))
    return match_clause(text, boost, fields)


def bm25_body(
    query: RetrievalQuery, size: int, *, source: Source = SOURCE_EXCLUDES, ja: JaQuery = None
) -> dict[str, Any]:
    return {
        "size": size,
        # No hit counting: lets BM25 skip non-competitive documents (block-max WAND); nothing reads the total.
        "track_total_hits": False,
        "query": {"bool": {"must": [_match(query, ja)], "filter": _filters(query)}},
        "_source": source,
    }


def knn_clause(query: RetrievalQuery, vector: Sequence[float], size: int) -> dict[str, Any]:
    """The kNN search of a query (top-level ``knn``, ``knn`` retriever); ``size`` neighbours."""
    knn: dict[str, Any] = {
        "field": "embedding",
        "query_vector": list(vector),
        "k": size,
        "num_candidates": max(100, size * 10),
    }
    if query.filters:
        knn["filter"] = _filters(query)
    return knn


def knn_body(query: RetrievalQuery, vector: Sequence[float], size: int | None = None) -> dict[str, Any]:
    size = size or query.k
    return {"size": size, "knn": knn_clause(query, vector, size), "_source": SOURCE_EXCLUDES}


def _script_score(query: RetrievalQuery, vector: Sequence[float], boost: float = 1.0) -> dict[str, Any]:
    base: dict[str, Any] = {"bool": {"filter": _filters(query)}} if query.filters else {"match_all": {}}
    script = {"source": "cosineSimilarity(params.qv, 'embedding') + 1.0", "params": {"qv": list(vector)}}
    clause: dict[str, Any] = {"query": base, "script": script}
    if boost != 1.0:
        clause["boost"] = boost
    return {"script_score": clause}


def script_score_body(query: RetrievalQuery, vector: Sequence[float], size: int | None = None) -> dict[str, Any]:
    return {"size": size or query.k, "query": _script_score(query, vector), "_source": SOURCE_EXCLUDES}


def fused_body(
    fusion: Fusion, query: RetrievalQuery, vector: Sequence[float], method: str, size: int, *, ja: JaQuery = None
) -> dict[str, Any]:
    """The one-request hybrid body of ``bool`` or ``es_rrf`` fusion."""
    w_bm25, w_dense = query.weights
    if fusion == "es_rrf":
        body = rrf_retriever_body(_match(query, ja), knn_clause(query, vector, size), _filters(query), size)
    else:
        if method == "knn":
            dense = knn_clause(query, vector, size)
            del dense["k"]  # the knn QUERY (8.12+) takes num_candidates; k only from 8.15 on
            if w_dense != 1.0:
                dense["boost"] = w_dense
            dense_clause: dict[str, Any] = {"knn": dense}
        else:
            dense_clause = _script_score(query, vector, w_dense)
        body = bool_body(_match(query, ja, w_bm25), dense_clause, _filters(query), size)
    body["_source"] = SOURCE_EXCLUDES
    return body


@dataclass
class _Plan:
    """The searches of one query in the batch (slot name → position in the ``_msearch``)."""

    size: int
    fusion: Fusion = "none"
    note: str = ""
    slots: dict[str, int] = field(default_factory=dict)


class EsRetriever:
    """The :class:`~hopsearch.service.types.Retriever` over the passages index of a store."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder | None = None,
        *,
        index: str | None = None,
        rerank_candidates: int = 100,
        reranker: HttpReranker | None = None,
        filters: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.index = index or store.settings.passages_alias
        #: filter clauses added to every query (``--source docs``: one corpus of a shared index)
        self.filters = tuple(filters)
        self.rerank_candidates = rerank_candidates
        self.reranker = reranker
        #: Why the server refused its rrf retriever (once refused, client RRF runs without asking again).
        self.rrf_refusal = ""

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

    async def _stored_source(self) -> Source:
        """``_source`` of BM25 hits: as stored when the index holds no vectors (source filtering makes the
        node parse and rewrite every hit, ~0.5 ms of a 50-hit search), else without the vector."""
        meta = await self.store.index_meta(self.index)
        return True if meta.get("embedder") is None else SOURCE_EXCLUDES

    async def search_many(self, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        """Answer every query with ONE ``_msearch`` (two bodies per client-fused hybrid query)."""
        if not queries:
            return []
        queries = await with_relative_paths(self.store, self.index, self._scoped(queries))
        if any(q.rerank for q in queries) and self.reranker is None:
            raise ConfigError("reranking needs a reranker (HOPSEARCH_RERANK_URL and HOPSEARCH_RERANK_MODEL)")
        out = await self._search(queries)
        if self.reranker is not None and any(q.rerank for q in queries):
            out = list(await asyncio.gather(*(self._rerank(r) for r in out)))
        return out

    def _scoped(self, queries: Sequence[RetrievalQuery]) -> Sequence[RetrievalQuery]:
        scoped = (*self.filters, *in_scope())
        if scoped:
            return [replace(q, filters=(*q.filters, *scoped)) for q in queries]
        return queries

    async def search_fused(self, groups: Sequence[Sequence[RetrievalQuery]], size: int) -> list[list[Hit]]:
        """Each group's hits fused by RRF and cut to ``size``, in ONE ``_msearch``: the same hits, in the same
        order, as :func:`rrf` over the group's :meth:`search_many` hits. BM25 without reranking fuses over
        the raw answer (ids and ranks) and builds a :class:`Hit` only for the hits kept (a DualRAG step
        keeps 150 of 450); other modes fuse :meth:`search_many`'s hits."""
        flat = [query for group in groups for query in group]
        lengths = [len(group) for group in groups]
        if any(query.mode != "bm25" or query.rerank for query in flat):
            results = await self.search_many(flat)
            return rrf_groups(lengths, [result.hits for result in results], size=size)
        if not flat:
            return [[] for _ in groups]
        queries = await with_relative_paths(self.store, self.index, self._scoped(flat))
        plain = await self._stored_source()
        meta = await self.store.index_meta(self.index)
        responses = await self.store.msearch(
            [(self.index, bm25_body(q, q.k, source=plain, ja=ja_query(q.text, meta))) for q in queries]
        )
        lists = [_raw_hits(response)[: query.k] for query, response in zip(queries, responses, strict=True)]
        return [
            [_hit_of(raw, score) for raw, score in rrf_order(group, _RAW_ID, size=size)]
            for group in split(lengths, lists)
        ]

    async def _search(self, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        dense_idx = [i for i, q in enumerate(queries) if q.mode != "bm25"]
        method: DenseMethod = "none"
        vectors: dict[int, list[float]] = {}
        if dense_idx:
            method = await self._dense_method()
            assert self.embedder is not None
            embedded = await embed_queries(self.embedder, [queries[i].text for i in dense_idx])
            vectors = dict(zip(dense_idx, embedded, strict=True))
        licence = None
        if any(q.mode == "hybrid" and q.fusion == "es_rrf" for q in queries):
            licence = licence_of(await self.store.licence())
        plain = await self._stored_source()
        meta = await self.store.index_meta(self.index)
        ja = [ja_query(q.text, meta) for q in queries]
        searches: list[tuple[str, dict[str, Any]]] = []
        plans: list[_Plan] = []

        def add(plan: _Plan, slot: str, body: dict[str, Any]) -> None:
            plan.slots[slot] = len(searches)
            searches.append((self.index, body))

        for i, query in enumerate(queries):
            size = max(query.k, self.reranker.top_n) if query.rerank and self.reranker else query.k
            plan = _Plan(size)
            plans.append(plan)
            if query.mode == "hybrid":
                weighted = tuple(query.weights) != (1.0, 1.0)
                plan.fusion, plan.note = choose(query.fusion, self.store.info, method, licence, weighted)
                if plan.fusion == "es_rrf" and self.rrf_refusal:
                    plan.fusion, plan.note = "rrf", f"the server refused the rrf retriever ({self.rrf_refusal})"
            if query.mode == "bm25":
                add(plan, "bm25", bm25_body(query, size, source=plain, ja=ja[i]))
            elif method == "rerank":  # no vectors on the server: cosine here over BM25 candidates
                add(plan, "bm25", bm25_body(query, max(size, self.rerank_candidates), source=True, ja=ja[i]))
            elif plan.fusion in ("bool", "es_rrf"):
                add(plan, "fused", fused_body(plan.fusion, query, vectors[i], method, size, ja=ja[i]))
                if query.legs:
                    self._add_legs(plan, add, query, vectors[i], method, plain, ja[i])
            else:
                if query.mode == "hybrid":
                    add(plan, "bm25", bm25_body(query, size, source=plain, ja=ja[i]))
                body = knn_body if method == "knn" else script_score_body
                add(plan, "dense", body(query, vectors[i], size))
        gap_slot = -1
        if vectors:  # one count more in the same round trip: how much of the index dense cannot see
            gap_slot = len(searches)
            searches.append((self.index, UNEMBEDDED_COUNT))
        keep = any(p.fusion == "es_rrf" for p in plans)
        try:
            responses = await self.store.msearch(searches, keep_errors=keep)
        except StoreError as exc:  # a server without the rrf retriever fails the whole _msearch (a 400)
            if not keep or not refused({"reason": str(exc)}):
                raise
            self.rrf_refusal = str(exc)
            return await self._search(queries)
        unembedded = _total(responses[gap_slot]) if gap_slot >= 0 else 0
        results = [
            self._result(query, plan, responses, vectors.get(i), method, unembedded)
            for i, (query, plan) in enumerate(zip(queries, plans, strict=True))
        ]
        retry = [i for i, r in enumerate(results) if r is None]
        if retry:  # the server refused its rrf retriever for these: client-side RRF instead, said so
            self.rrf_refusal = _reason(responses[plans[retry[0]].slots["fused"]])
            again = await self._search([queries[i] for i in retry])
            for i, result in zip(retry, again, strict=True):
                results[i] = result
        return [r for r in results if r is not None]

    def _add_legs(
        self,
        plan: _Plan,
        add: Any,
        query: RetrievalQuery,
        vector: list[float],
        method: str,
        plain: Source,
        ja: JaQuery,
    ) -> None:
        add(plan, "bm25", bm25_body(query, plan.size, source=plain, ja=ja))
        body = knn_body if method == "knn" else script_score_body
        add(plan, "dense", body(query, vector, plan.size))

    def _result(
        self,
        query: RetrievalQuery,
        plan: _Plan,
        responses: list[dict[str, Any]],
        vector: list[float] | None,
        method: DenseMethod,
        unembedded: int = 0,
    ) -> SearchResult | None:
        for slot, position in plan.slots.items():
            if "error" in responses[position]:
                if slot == "fused" and refused(responses[position]["error"]):
                    return None
                err = responses[position]["error"]
                raise StoreError(f"msearch: {err}", details={"status": responses[position].get("status")})
        took = float(sum(responses[s].get("took", 0) for s in plan.slots.values()))
        bm25 = _hits(responses[plan.slots["bm25"]]) if "bm25" in plan.slots else []
        legs: dict[str, tuple[Hit, ...]] = {}
        if query.mode == "bm25":
            hits = bm25[: plan.size]
        else:
            if method == "rerank":
                assert vector is not None
                dense = sorted(  # a candidate without a vector (--no-embed) has no dense score
                    (with_score(h, cosine(vector, h.source["embedding"])) for h in bm25 if _vector(h)),
                    key=lambda h: -h.score,
                )
                bm25 = bm25[: plan.size]
            else:
                dense = _hits(responses[plan.slots["dense"]]) if "dense" in plan.slots else []
            if query.mode == "dense":
                hits = dense[: plan.size]
            elif "fused" in plan.slots:
                hits = _hits(responses[plan.slots["fused"]])[: plan.size]
            else:
                hits = rrf([bm25, dense], size=plan.size, weights=query.weights)
            if query.legs and query.mode == "hybrid":
                legs = {"bm25": _stripped(bm25[: plan.size]), "dense": _stripped(dense[: plan.size])}
        return SearchResult(
            query=query,
            hits=_stripped(hits),
            mode=query.mode,
            dense_method=method if vector is not None else "none",
            took_ms=took,
            fusion=plan.fusion,
            fusion_note=plan.note,
            legs=legs,
            without_vectors=unembedded if vector is not None else 0,
        )

    async def _rerank(self, result: SearchResult) -> SearchResult:
        if not result.query.rerank or self.reranker is None:
            return result
        hits = await self.reranker.rerank(result.query.text, result.hits)
        return replace(result, hits=tuple(hits[: result.query.k]), reranked_by=self.reranker.model)


def _reason(item: Mapping[str, Any]) -> str:
    err = item.get("error")
    if isinstance(err, dict):
        return f"{err.get('type')}: {err.get('reason')}"
    return str(err)


def _stripped(hits: Sequence[Hit]) -> tuple[Hit, ...]:
    return tuple(_strip_vector(h) if "embedding" in h.source else h for h in hits)


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
