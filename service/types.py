"""Plain data shared across the core: frozen dataclasses and the small protocols at the seams."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from hopsearch.service.access import Scope

RetrievalMode = Literal["bm25", "dense", "hybrid"]
#: How dense scores were actually computed: top-level kNN (8.x), exact script_score (full 7.17),
#: client-side cosine over the BM25 candidates (servers without vectors), or not at all.
DenseMethod = Literal["knn", "script_score", "rerank", "none"]
#: How a hybrid query's two lists became one: Reciprocal Rank Fusion here (``rrf``, the default), one
#: request of ``bool.should`` over ``knn`` + ``match`` (``bool``, 8.12+ knn servers), or Elasticsearch's
#: ``rrf`` retriever (``es_rrf``, licence permitting). ``none`` for bm25 and dense queries.
Fusion = Literal["rrf", "bool", "es_rrf", "none"]
#: The ``multi_match`` type of a BM25 search (``Settings.bm25_query``).
Bm25Query = Literal["best_fields", "most_fields"]


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved passage."""

    id: str
    score: float
    title: str
    text: str
    source: Mapping[str, Any] = field(default_factory=dict)


_new_object = object.__new__
_HIT_SETTERS = tuple(Hit.__dict__[name].__set__ for name in ("id", "score", "title", "text", "source"))


def make_hit(id: str, score: float, title: str, text: str, source: Mapping[str, Any]) -> Hit:
    """Return the same frozen :class:`Hit` as ``Hit(id, score, title, text, source)``, built by its slots
    directly: a frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` (five
    generic calls), twice the cost of this; a DualRAG step builds ~600 hits."""
    hit = _new_object(Hit)
    set_id, set_score, set_title, set_text, set_source = _HIT_SETTERS
    set_id(hit, id)
    set_score(hit, score)
    set_title(hit, title)
    set_text(hit, text)
    set_source(hit, source)
    return hit


@dataclass(frozen=True, slots=True)
class RetrievalQuery:
    """One query of a batch. ``filters`` are Elasticsearch filter clauses (see :mod:`.filters`).

    Hybrid only: ``fusion`` asked for (refused by the server → client RRF, reported), ``weights`` of the
    (bm25, dense) legs, ``legs`` to get both lists back. ``rerank``: pass the top hits through the
    configured reranker."""

    text: str
    k: int = 10
    mode: RetrievalMode = "bm25"
    filters: Sequence[Mapping[str, Any]] = ()
    fusion: Fusion = "rrf"
    weights: tuple[float, float] = (1.0, 1.0)
    legs: bool = False
    rerank: bool = False
    #: 1: also the passages the question and the first hop name (:mod:`~.retrieval.links`); 0: one hop.
    hops: int = 0


@dataclass(frozen=True, slots=True)
class Link:
    """Why a linked passage came in: ``name``, named by ``source`` (``question`` or a passage id), is its title
    (``how`` ``title``), a name it holds (``mention``) or a name its ``names`` field holds (``names``)."""

    name: str
    source: str
    passage: str
    how: Literal["title", "mention", "names"] = "title"

    def shown(self) -> dict[str, str]:
        """As ``_retrieve``'s ``links`` and a retrieve step's ``details.links`` show it."""
        return {"name": self.name, "from": self.source, "passage": self.passage, "how": self.how}


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The hits of one query and the mode actually used to produce them."""

    query: RetrievalQuery
    hits: tuple[Hit, ...]
    mode: RetrievalMode
    dense_method: DenseMethod
    took_ms: float
    fusion: Fusion = "none"
    #: Why the fusion asked for did not run (licence, version), empty when it did.
    fusion_note: str = ""
    #: Both legs' lists (``bm25``, ``dense``) when the query asked for them.
    legs: Mapping[str, tuple[Hit, ...]] = field(default_factory=dict)
    #: The reranker model that reordered the hits, empty when none ran.
    reranked_by: str = ""
    #: dense/hybrid only: documents of the index without a vector (loaded with ``--no-embed``), which
    #: the dense side cannot find; 0 when every document has one (or the query was BM25).
    without_vectors: int = 0
    #: What to say of the index (an older passages schema, and the command that moves it); empty if nothing.
    index_note: str = ""
    #: dense/hybrid only: the index's vector index (``_meta.hopsearch.vector_index``: ``bbq_hnsw`` …;
    #: ``default``: made before it was recorded, Elasticsearch's default; ``none``: exact scores, no index).
    vector_index: str = ""
    #: hops only: the names followed to the linked passages among ``hits`` (:class:`Link`).
    links: tuple[Link, ...] = ()
    #: hops only: why the index searched one hop (an attached index without a keyword field of its titles).
    hops_note: str = ""

    def notes(self) -> dict[str, Any]:
        """Return what the search did beside its hits, as every front end shows it.

        The mode, dense method and fusion always; the other notes only where they say something.
        """
        notes: dict[str, Any] = {"mode": self.mode, "dense_method": self.dense_method, "fusion": self.fusion}
        optional = {
            "vector_index": self.vector_index,
            "fusion_note": self.fusion_note,
            "reranked_by": self.reranked_by,
            "without_vectors": self.without_vectors,
            "index_note": self.index_note,
            "links": [link.shown() for link in self.links],
            "hops_note": self.hops_note,
        }
        return notes | {name: value for name, value in optional.items() if value}


class Retriever(Protocol):
    """Anything that answers a batch of queries in one round trip, over one scope (a strategy's run reads
    through one: :meth:`Searcher.bind`)."""

    async def search_many(self, queries: Sequence[RetrievalQuery]) -> list[SearchResult]: ...


class Searcher(Protocol):
    """Retrieval over any index, bound to one request's scope for each run (the index, the request's
    filters and the caller travel in the scope, never beside it)."""

    def bind(self, scope: Scope) -> Retriever: ...


@runtime_checkable
class NamingRetriever(Protocol):
    """A retriever that knows the company's own names for things (the ``ja_synonyms`` setting): the one
    name a group of synonyms goes by, so DualRAG keys 「研開」 and 「研究開発部」 as one entity."""

    def canonical(self, name: str) -> str: ...


@runtime_checkable
class FusingRetriever(Protocol):
    """A retriever that also answers groups of queries fused per group (RRF, cut to ``size``) in one round
    trip: the same hits in the same order as :func:`~.fusion.rrf` over each group's ``search_many`` hits,
    where it can without building a :class:`Hit` for every hit it does not keep."""

    async def search_fused(self, groups: Sequence[Sequence[RetrievalQuery]], size: int) -> list[list[Hit]]: ...


class Embedder(Protocol):
    """Turns texts into unit-length vectors, in batches."""

    @property
    def model_id(self) -> str: ...

    @property
    def dims(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


@runtime_checkable
class QueryEmbedder(Protocol):
    """An embedder that embeds queries differently from passages (e5's ``query:`` / ``passage:`` prefixes):
    its ``embed`` is for passages, ``embed_queries`` for queries."""

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]: ...


async def embed_queries(embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
    """Query vectors: ``embed_queries`` where the embedder has one, else ``embed``."""
    if isinstance(embedder, QueryEmbedder):
        return await embedder.embed_queries(texts)
    return await embedder.embed(texts)
