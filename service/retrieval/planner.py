"""Retrieval as a plan: (queries, their scope, the index's facts, the cluster's capabilities) → the bodies
of ONE ``_msearch`` and, per query, which of them answer it and how they are fused. Pure: no I/O here.

The scope (:class:`~hopsearch.service.access.Scope`: the request's filters and the caller's access
filter) is merged into every query first (:func:`scoped`), so that every body below carries it — BM25,
``knn.filter``, ``script_score``, each fusion leg, the fused bodies — and the count of documents without
a vector carries the access filter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hopsearch.service.access import Scope
from hopsearch.service.attached.fieldmap import (
    EXACT_LINK_KEY,
    HOPSEARCH_FIELDS,
    HOPSEARCH_LINK_KEY,
    Attachment,
    FieldMap,
    LinkKey,
)
from hopsearch.service.errors import ConfigError, EmbedderMismatch, NoVectors
from hopsearch.service.retrieval.bodies import (
    DEFAULT_BM25,
    DEFAULT_KNN,
    JaQuery,
    Source,
    bm25_body,
    dense_body,
    fused_body,
    source_excludes,
    unembedded_count,
)
from hopsearch.service.retrieval.fusion import Licence, choose
from hopsearch.service.store.esclient import ServerInfo
from hopsearch.service.store.indices import TITLE_KEY_VERSION, schema_version
from hopsearch.service.store.vector_index import KnnOptions
from hopsearch.service.text.japanese import Synonyms, ja_query
from hopsearch.service.types import Bm25Query, DenseMethod, Fusion, RetrievalQuery


@dataclass(frozen=True, slots=True)
class IndexFacts:
    """What planning needs of a passages index: its ``_meta.hopsearch`` (embedder, vector mode, Japanese
    analysis), its name and its fields; an attached index's come from its :class:`Attachment`."""

    index: str
    meta: Mapping[str, Any]
    fields: FieldMap = HOPSEARCH_FIELDS
    attachment: Attachment | None = None
    #: The ``ja_synonyms`` setting's groups (Japanese BM25 queries name every term of a group they name).
    synonyms: Synonyms | None = None
    #: Where the second hop looks names up (every index's: ``title.key`` in hopsearch's own passages,
    #: ``title.keyword`` in those made before schema 4, an attached index's as found when attached); None: the
    #: index cannot hop (:attr:`hop_note` says why).
    link_key: LinkKey | None = HOPSEARCH_LINK_KEY

    @classmethod
    def managed(cls, index: str, meta: Mapping[str, Any], synonyms: Synonyms | None = None) -> IndexFacts:
        """hopsearch's own passages index: its link key by the schema it was made under."""
        key = HOPSEARCH_LINK_KEY if schema_version(meta) >= TITLE_KEY_VERSION else EXACT_LINK_KEY
        return cls(index, meta, synonyms=synonyms, link_key=key)

    @classmethod
    def attached(cls, attachment: Attachment) -> IndexFacts:
        key = attachment.title_key.key if attachment.title_key is not None else None
        return cls(attachment.index, attachment.meta(), attachment.fields, attachment, link_key=key)

    @property
    def hop_note(self) -> str:
        """Why a query asking for a second hop over this index searched one (empty where it can hop)."""
        if self.link_key is not None:
            return ""
        known = self.attachment.title_key if self.attachment is not None else None
        why = known.why if known is not None else "no keyword field of its titles is known"
        return f"index [{self.index}] cannot hop: {why}; one hop was searched"

    def bind(self, scope: Scope) -> Scope:
        """``scope`` with this index's readers (an attached index's ACL field, rule and default)."""
        if self.attachment is None:
            return scope
        return self.attachment.bind(scope)

    @property
    def vector(self) -> str:
        return self.fields.vector or "embedding"

    @property
    def excerpt(self) -> str | None:
        """The field whose excerpts BM25 hits carry: an attached index's text (whole documents), else none."""
        return self.fields.text if self.attachment is not None else None

    @property
    def embedder(self) -> str | None:
        value = self.meta.get("embedder")
        return str(value) if value is not None else None

    @property
    def source(self) -> Source:
        """``_source`` of BM25 hits: as stored when the index holds no vectors (source filtering makes the
        node parse and rewrite every hit, ~0.5 ms of a 50-hit search), else without the vector."""
        return True if self.embedder is None else source_excludes(self.vector)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the cluster can do, as learnt (once) by the store: version and modules, licence where a query
    asked for the rrf retriever, and why the server refused that retriever if it did."""

    info: ServerInfo
    licence: Licence | None = None
    rrf_refusal: str = ""


def dense_method(facts: IndexFacts, info: ServerInfo, embedder_id: str | None) -> DenseMethod:
    """How dense scores are computed over this index here; a clear error where they cannot be."""
    if embedder_id is None:
        raise ConfigError("dense and hybrid retrieval need an embedder (HOPSEARCH_EMBEDDER)")
    if facts.embedder is None:
        raise NoVectors(f"index [{facts.index}] holds no vectors (BM25 only); use mode bm25")
    if facts.embedder != embedder_id:
        raise EmbedderMismatch(
            f"index [{facts.index}] holds vectors of {facts.embedder!r}, the query embedder is {embedder_id!r}"
        )
    mode = str(facts.meta.get("vector_mode") or info.dense_method)
    if mode == "knn" and info.knn:
        return "knn"
    if mode == "script_score" and info.dense_method == "script_score":
        return "script_score"
    return "rerank"


def scoped(queries: Sequence[RetrievalQuery], scope: Scope) -> list[RetrievalQuery]:
    """Return the queries with the scope's clauses added to their own filters."""
    clauses = scope.clauses()
    if not clauses:
        return list(queries)
    return [replace(q, filters=(*q.filters, *clauses)) for q in queries]


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """The searches of one query: ``slots`` maps a leg (``bm25``, ``dense``, ``fused``) to its position in the
    ``_msearch``; ``size`` hits are kept (more than ``k`` where a reranker reorders them)."""

    query: RetrievalQuery
    size: int
    fusion: Fusion = "none"
    note: str = ""
    slots: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Plan:
    """One ``_msearch``: its ``(index, body)`` searches, each query's plan, the position of the count of
    documents without vectors (-1: none), and whether item errors come back (rrf retriever asked)."""

    searches: tuple[tuple[str, dict[str, Any]], ...]
    queries: tuple[QueryPlan, ...]
    gap_slot: int = -1
    keep_errors: bool = False


@dataclass(frozen=True, slots=True)
class Sizes:
    """How many hits a query asks of Elasticsearch: ``rerank_top_n`` where a reranker reorders its hits
    (None: no reranker), ``rerank_candidates`` BM25 candidates where cosine is computed here."""

    rerank_top_n: int | None = None
    rerank_candidates: int = 100

    def of(self, query: RetrievalQuery) -> int:
        return max(query.k, self.rerank_top_n) if query.rerank and self.rerank_top_n is not None else query.k


def plan(
    queries: Sequence[RetrievalQuery],
    scope: Scope,
    facts: IndexFacts,
    caps: Capabilities,
    *,
    method: DenseMethod = "none",
    vectors: Mapping[int, Sequence[float]] | None = None,
    sizes: Sizes = Sizes(),
    knn: KnnOptions = DEFAULT_KNN,
    bm25: Bm25Query = DEFAULT_BM25,
) -> Plan:
    """Return the plan of ``queries`` (already :func:`scoped`) over ``facts.index``: ``vectors`` holds the query
    vector of each dense or hybrid query by position, ``method`` how dense scores are computed, ``knn`` how
    the index's kNN searches run (:func:`~hopsearch.service.store.vector_index.knn_options`), ``bm25`` the
    ``multi_match`` type of the BM25 clauses."""
    vectors = vectors or {}
    index = facts.index
    plain = facts.source
    searches: list[tuple[str, dict[str, Any]]] = []
    plans: list[QueryPlan] = []
    for i, query in enumerate(queries):
        size = sizes.of(query)
        fusion: Fusion = "none"
        note = ""
        if query.mode == "hybrid":
            weighted = tuple(query.weights) != (1.0, 1.0)
            fusion, note = choose(query.fusion, caps.info, method, caps.licence, weighted)
            if fusion == "es_rrf" and caps.rrf_refusal:
                fusion, note = "rrf", f"the server refused the rrf retriever ({caps.rrf_refusal})"
        ja: JaQuery = ja_query(query.text, facts.meta, facts.synonyms)
        bodies = _bodies(
            query, fusion, method, vectors.get(i), size, plain, sizes.rerank_candidates, ja, facts, knn, bm25
        )
        slots = {}
        for slot, body in bodies:
            slots[slot] = len(searches)
            searches.append((index, body))
        plans.append(QueryPlan(query, size, fusion, note, slots))
    gap_slot = -1
    # one count more in the same round trip: how much of the index dense cannot see (of an attached index,
    # where its vectors are indexed: ``exists`` cannot see numbers kept only in ``_source``)
    if vectors and (facts.attachment is None or method != "rerank"):
        gap_slot = len(searches)
        searches.append((index, unembedded_count(scope.access(), facts.vector)))
    keep = any(p.fusion == "es_rrf" for p in plans)
    return Plan(tuple(searches), tuple(plans), gap_slot, keep)


def _bodies(
    query: RetrievalQuery,
    fusion: Fusion,
    method: DenseMethod,
    vector: Sequence[float] | None,
    size: int,
    plain: Source,
    candidates: int,
    ja: JaQuery,
    facts: IndexFacts,
    knn: KnnOptions = DEFAULT_KNN,
    kind: Bm25Query = DEFAULT_BM25,
) -> list[tuple[str, dict[str, Any]]]:
    """Return the searches of one query, by leg."""
    searched, field, excerpt = facts.fields.searched, facts.vector, facts.excerpt

    def bm25(n: int, source: Source) -> tuple[str, dict[str, Any]]:
        return "bm25", bm25_body(query, n, source=source, ja=ja, searched=searched, excerpt=excerpt, kind=kind)

    if query.mode == "bm25":
        return [bm25(size, plain)]
    assert vector is not None, "a dense or hybrid query is planned with its vector"
    if method == "rerank":  # no vectors on the server: cosine here over BM25 candidates
        return [bm25(max(size, candidates), True)]
    if fusion in ("bool", "es_rrf"):
        fused = fused_body(
            fusion, query, vector, method, size, ja=ja, searched=searched, field=field, knn_options=knn, kind=kind
        )
        out = [("fused", fused)]
        if query.legs:
            out += [bm25(size, plain), ("dense", dense_body(method, query, vector, size, field, knn))]
        return out
    lexical = [bm25(size, plain)] if query.mode == "hybrid" else []
    return [*lexical, ("dense", dense_body(method, query, vector, size, field, knn))]
