"""The executor: embeds the dense queries, plans (:mod:`.planner`), runs the plan in ONE ``_msearch`` and
assembles the results (:mod:`.results`); optionally a cross-encoder reranker (:mod:`hopsearch.service.retrieval.rerank`)
reorders the top hits of any mode.

:class:`EsRetriever` serves any index: every call names its :class:`~hopsearch.service.access.Scope`
(index, filters, caller), and :meth:`EsRetriever.bind` gives a strategy a retriever bound to its
request's scope. Where the server refuses its rrf retriever, the store learns it once (a cluster
capability) and the queries are planned again with client-side RRF, said so in their results. Results
leave as the scope's caller may see them (:mod:`.readers`: no ``acl``, ranks where the settings say so).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hopsearch.service.access import Scope
from hopsearch.service.attached.fieldmap import LinkKey, renamed
from hopsearch.service.embedders.factory import embedder_for_id
from hopsearch.service.errors import ConfigError, StoreError
from hopsearch.service.retrieval import links, namelinks
from hopsearch.service.retrieval.bodies import bm25_body, match_of
from hopsearch.service.retrieval.config import RetrievalConfig
from hopsearch.service.retrieval.fusion import licence_of, refused, rrf_groups, rrf_order, split
from hopsearch.service.retrieval.path_filters import with_relative_paths
from hopsearch.service.retrieval.planner import Capabilities, IndexFacts, Sizes, dense_method, plan, scoped
from hopsearch.service.retrieval.readers import shown, shown_hits
from hopsearch.service.retrieval.rerank import HttpReranker
from hopsearch.service.retrieval.results import RAW_ID, hit_of, hits_of, item_reason, raw_hits, result_of, total_of
from hopsearch.service.store import Store
from hopsearch.service.store.indices import schema_note
from hopsearch.service.store.vector_index import knn_options
from hopsearch.service.text.japanese import TOKEN_FIELDS, TOKENS, Synonyms, ja_query, ja_tokens_of
from hopsearch.service.text.lang import detect_lang
from hopsearch.service.types import DenseMethod, Embedder, Hit, Link, RetrievalQuery, SearchResult, embed_queries

log = logging.getLogger(__name__)


class EsRetriever:
    """Retrieval over any passages index of a store (the scope of each call names it)."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder | None = None,
        *,
        rerank_candidates: int = 100,
        reranker: HttpReranker | None = None,
        config: RetrievalConfig | None = None,
    ) -> None:
        self.store = store
        self.config = config or RetrievalConfig()
        self.embedder = embedder
        self.reranker = reranker
        self.sizes = Sizes(reranker.top_n if reranker is not None else None, rerank_candidates)
        #: stored embedder id → its query embedder (:meth:`embedder_for`)
        self._index_embedders: dict[str, Embedder | None] = {}
        path = self.config.ja_synonyms
        self.synonyms = Synonyms.read(path) if path is not None else None

    def embedder_for(self, stored: object) -> Embedder | None:
        """Return the query embedder of an index whose vectors carry the embedder id ``stored`` (issue 33): the
        configured embedder, or the one that produced them where this version knows it (an index built
        before the embedder or its precision changed keeps answering until it is rebuilt), else ``None``."""
        if self.embedder is None or not isinstance(stored, str):
            return None
        if stored not in self._index_embedders:
            found = embedder_for_id(stored, self.config.embedders, configured=self.embedder)
            if found is not None and found is not self.embedder:
                log.info("vectors of %s: their index's queries are embedded with it", stored)
            self._index_embedders[stored] = found
        return self._index_embedders[stored]

    def canonical(self, name: str) -> str:
        """Return the first term of the ``ja_synonyms`` group ``name`` is in, else ``name``."""
        return self.synonyms.canonical(name) if self.synonyms else name

    def bind(self, scope: Scope) -> BoundRetriever:
        """Return this retriever over ``scope`` alone (what a strategy's run reads through)."""
        return BoundRetriever(self, scope)

    async def facts(self, index: str) -> IndexFacts:
        """Return what planning needs of ``index``: an attached index's field map, else its ``_meta.hopsearch``."""
        attachment = await self.store.attachment(index)
        if attachment is not None:
            attachment = await self.store.with_title_key(attachment)  # a record made before hops: found once
            return replace(IndexFacts.attached(attachment), synonyms=self.synonyms)
        return IndexFacts.managed(index, await self.store.index_meta(index), self.synonyms)

    async def search_many(self, scope: Scope, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        """Answer every query over ``scope`` with ONE ``_msearch`` (two bodies per client-fused hybrid query)."""
        if not queries:
            return []
        if any(q.rerank for q in queries) and self.reranker is None:
            raise ConfigError("reranking needs a reranker (HOPSEARCH_RERANK_URL and HOPSEARCH_RERANK_MODEL)")
        facts = await self.facts(scope.index)
        scope = facts.bind(scope)
        queries = renamed(queries, facts.fields)
        scoped_queries = await with_relative_paths(self.store, scope.index, scoped(queries, scope), scope.access())
        out = await self._search(scope, scoped_queries)
        if any(q.hops for q in queries):
            out = await self._hop(facts, out)
        if self.reranker is not None and any(q.rerank for q in queries):
            out = list(await asyncio.gather(*(self._rerank(r) for r in out)))
        note = schema_note(scope.index, facts.meta, scope.acl_default)
        return [shown(scope, replace(r, index_note=note) if note else r) for r in out]

    async def search_fused(
        self, scope: Scope, groups: Sequence[Sequence[RetrievalQuery]], size: int
    ) -> list[list[Hit]]:
        """Each group's hits fused by RRF and cut to ``size``, in ONE ``_msearch``: the same hits, in the same
        order, as :func:`~hopsearch.service.retrieval.fusion.rrf` over the group's :meth:`search_many` hits. BM25
        without reranking fuses over the raw answer (ids and ranks) and builds a :class:`Hit` only for the
        hits kept (a DualRAG step keeps 150 of 450); other modes fuse :meth:`search_many`'s hits."""
        flat = [query for group in groups for query in group]
        lengths = [len(group) for group in groups]
        if any(query.mode != "bm25" or query.rerank or query.hops for query in flat):
            results = await self.search_many(scope, flat)  # without acl already; ranks once fused, below
            fused_lists = rrf_groups(lengths, [result.hits for result in results], size=size)
            return [shown_hits(scope, hits) for hits in fused_lists]
        if not flat:
            return [[] for _ in groups]
        facts = await self.facts(scope.index)
        scope = facts.bind(scope)
        flat = renamed(flat, facts.fields)
        queries = await with_relative_paths(self.store, scope.index, scoped(flat, scope), scope.access())
        searched, excerpt = facts.fields.searched, facts.excerpt
        responses = await self.store.msearch(
            [
                (
                    scope.index,
                    bm25_body(
                        q,
                        q.k,
                        source=facts.source,
                        ja=ja_query(q.text, facts.meta, facts.synonyms),
                        searched=searched,
                        excerpt=excerpt,
                        kind=self.config.bm25_query,
                    ),
                )
                for q in queries
            ]
        )
        lists = [raw_hits(response)[: query.k] for query, response in zip(queries, responses, strict=True)]
        return [
            shown_hits(scope, [hit_of(raw, score, facts.fields) for raw, score in rrf_order(group, RAW_ID, size=size)])
            for group in split(lengths, lists)
        ]

    async def _search(self, scope: Scope, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        facts = await self.facts(scope.index)
        dense_idx = [i for i, q in enumerate(queries) if q.mode != "bm25"]
        method: DenseMethod = "none"
        vectors: dict[int, list[float]] = {}
        if dense_idx:
            embedder = self.embedder_for(facts.embedder) or self.embedder
            method = dense_method(facts, self.store.info, embedder.model_id if embedder else None)
            assert embedder is not None
            embedded = await embed_queries(embedder, [queries[i].text for i in dense_idx])
            vectors = dict(zip(dense_idx, embedded, strict=True))
        kind = index_kind(facts, method)
        config = self.config
        knn = knn_options(kind, self.store.info, config.knn_num_candidates, config.knn_oversample)
        licence = None
        if any(q.mode == "hybrid" and q.fusion == "es_rrf" for q in queries):
            licence = licence_of(await self.store.licence())
        results: list[SearchResult | None] = [None] * len(queries)
        todo = list(range(len(queries)))
        # At most twice: a refusal of the rrf retriever is learnt once, and the second plan never asks for it.
        for _ in range(2):
            caps = Capabilities(self.store.info, licence, self.store.rrf_refusal)
            batch = [queries[i] for i in todo]
            batch_vectors = {n: vectors[i] for n, i in enumerate(todo) if i in vectors}
            planned = plan(
                batch,
                scope,
                facts,
                caps,
                method=method,
                vectors=batch_vectors,
                sizes=self.sizes,
                knn=knn,
                bm25=config.bm25_query,
            )
            try:
                responses = await self.store.msearch(planned.searches, keep_errors=planned.keep_errors)
            except StoreError as exc:  # a server without the rrf retriever fails the whole _msearch (a 400)
                if not planned.keep_errors or not refused({"reason": str(exc)}):
                    raise
                self.store.rrf_refusal = str(exc)
                continue
            unembedded = total_of(responses[planned.gap_slot]) if planned.gap_slot >= 0 else 0
            again: list[int] = []
            for n, (i, query_plan) in enumerate(zip(todo, planned.queries, strict=True)):
                results[i] = result_of(
                    query_plan,
                    responses,
                    batch_vectors.get(n),
                    method,
                    unembedded,
                    facts.fields,
                    kind,
                    index=scope.index,
                )
                if results[i] is None:  # the server refused its rrf retriever for this one
                    if not self.store.rrf_refusal:
                        self.store.rrf_refusal = item_reason(responses[query_plan.slots["fused"]])
                    again.append(i)
            todo = again
            if not todo:
                break
        done = [r for r in results if r is not None]
        if len(done) != len(queries):
            raise StoreError(
                f"Searching [{scope.index}] failed: the rrf retriever was refused twice ({self.store.rrf_refusal})"
            )
        return done

    async def _hop(self, facts: IndexFacts, results: Sequence[SearchResult]) -> list[SearchResult]:
        """Return the second hop of the results whose query asks for one: ONE ``_msearch`` of a title lookup in the
        index's link key and, where the first hop repeats a document, a mention search (each under its
        query's filters, the scope's included), ranked with the first hop (:mod:`.links`). An index without
        a link key (an attached one without a keyword field of its titles) answers with one hop, and its
        results say why."""
        key = facts.link_key
        if key is None:
            return [replace(r, hops_note=facts.hop_note) if r.query.hops > 0 else r for r in results]
        by_names = self.config.hops_names
        hops = [_HopPlan.of(i, r, facts, by_names) for i, r in enumerate(results) if r.query.hops > 0]
        hops = [hop for hop in hops if hop.found.named_by or hop.phrases or hop.names]
        if not hops:
            return list(results)
        bodies = [body for hop in hops for body in self._hop_bodies(hop, facts, key)]
        responses = iter(await self.store.msearch(bodies))
        out = list(results)
        for hop in hops:
            linked = hits_of(next(responses), facts.fields) if hop.found.named_by else []
            mentioned: list[tuple[str, Hit]] = []
            if hop.phrases:
                response = next(responses)
                names = [name for name, _ in hop.phrases]
                for raw, hit in zip(raw_hits(response), hits_of(response, facts.fields), strict=True):
                    name = links.mentioned_by(raw, names)
                    if name is not None:
                        mentioned.append((name, hit))
            result = hop.result
            hits, followed = links.ranked(result.hits, linked, hop.found, result.query.k, mentioned)
            if hop.names is not None:
                hits, followed = _names_placed(hop.names, next(responses), hits, followed, result.query.k, facts)
            out[hop.slot] = replace(result, hits=tuple(hits), links=tuple(followed))
        return out

    def _hop_bodies(self, hop: _HopPlan, facts: IndexFacts, key: LinkKey) -> list[tuple[str, dict[str, Any]]]:
        """Return the title lookup (where names were found) and the mention search (where asked) of one query."""
        query = hop.result.query
        ja = ja_query(query.text, facts.meta, facts.synonyms)
        scored = match_of(query, ja, 1.0, facts.fields.searched, self.config.bm25_query)
        bodies: list[tuple[str, dict[str, Any]]] = []
        if hop.found.named_by:
            names = hop.found.names
            size = namelinks.NAMES_SIZE if hop.names is not None else links.LOOKUP_SIZE
            body = links.lookup_body(query, names, key, facts.source, size=size, scored_by=scored)
            bodies.append((facts.index, body))
        if hop.phrases:
            namers = list(dict.fromkeys(links.document_of(hit) for hit in hop.result.hits[: links.NAMERS]))
            phrases = [phrase for _, phrase in hop.phrases]
            bodies.append((facts.index, links.mention_body(query, phrases, namers, facts.source, scored)))
        if hop.names is not None:
            bodies.append((facts.index, _names_body(hop, facts, scored)))
        return bodies

    async def _rerank(self, result: SearchResult) -> SearchResult:
        if not result.query.rerank or self.reranker is None:
            return result
        hits = await self.reranker.rerank(result.query.text, result.hits)
        return replace(result, hits=tuple(hits[: result.query.k]), reranked_by=self.reranker.model)


@dataclass(frozen=True, slots=True)
class _HopPlan:
    """One result's second hop: its names, and the phrases (each with its name) of its mention search."""

    slot: int
    result: SearchResult
    found: links.Candidates
    phrases: tuple[tuple[str, links.Phrase], ...]
    #: The names lookup (a Japanese question over hopsearch's passages with ``names``), instead of mentions.
    names: namelinks.NamesPlan | None = None

    @classmethod
    def of(cls, slot: int, result: SearchResult, facts: IndexFacts, names: bool) -> _HopPlan:
        """Plan mentions only in hopsearch's own passages (chunks of documents), where the first hop repeats one.

        With ``names`` (the ``hops_names`` setting), the names lookup instead where the index holds names and the
        question is Japanese.
        """
        mentions = facts.attachment is None and links.repeats(result.hits, result.query.k)
        if names and _names_hop(facts, result.query):
            plan = namelinks.names_plan(result.query.text, result.hits, facts.synonyms)
            return cls(slot, result, namelinks.title_candidates(plan), (), plan)
        found = links.candidates(result.query.text, result.hits, mentions=mentions)
        return cls(slot, result, found, _phrases(found, facts))


def _phrases(found: links.Candidates, facts: IndexFacts) -> tuple[tuple[str, links.Phrase], ...]:
    """Return the phrases of a mention search, each with its name (its synonyms' too)."""
    phrases: list[tuple[str, links.Phrase]] = []
    searched = tuple(facts.fields.searched)
    # the names' own words are the fields' words where the index holds SudachiPy tokens of this recipe
    current = facts.meta.get("ja_analysis") == "sudachi" and ja_tokens_of(facts.meta) == TOKENS
    for name in found.mentions:
        if current and name in found.tokens:
            phrases.append((name, (found.tokens[name], TOKEN_FIELDS)))
        else:
            phrases.append((name, links.phrase_of(name, facts.meta, searched)))
        for term in facts.synonyms.terms_of(name) if facts.synonyms else ():
            phrases.append((name, links.phrase_of(term, facts.meta, searched)))
    return tuple(phrases)


def _names_hop(facts: IndexFacts, query: RetrievalQuery) -> bool:
    """Whether ``query``'s second hop is the names lookup: a Japanese question over hopsearch's own
    passages whose ``_meta`` says they hold ``names`` (an index made before them hops as it did)."""
    return facts.attachment is None and isinstance(facts.meta.get("names"), int) and detect_lang(query.text) == "ja"


def _names_body(hop: _HopPlan, facts: IndexFacts, scored: dict[str, Any]) -> dict[str, Any]:
    """One query's names lookup: documents other than its top first-hop passages' (:mod:`.namelinks`)."""
    assert hop.names is not None
    namers = list(dict.fromkeys(links.document_of(hit) for hit in hop.result.hits[: links.NAMERS]))
    return namelinks.names_body(hop.result.query, hop.names, namers, facts.source, scored)


def _names_placed(
    plan: namelinks.NamesPlan,
    response: Any,
    hits: Sequence[Hit],
    followed: Sequence[Link],
    k: int,
    facts: IndexFacts,
) -> tuple[list[Hit], list[Link]]:
    """Return the hits of a names lookup placed among ``hits`` (:func:`.namelinks.placed`), with their links."""
    found = namelinks.linked_of(plan, raw_hits(response), hits_of(response, facts.fields))
    placed, named = namelinks.placed(hits, found, k)
    kept = {hit.id for hit in placed}
    return placed, [link for link in followed if link.passage in kept] + named


def index_kind(facts: IndexFacts, method: DenseMethod) -> str:
    """Return what a dense or hybrid result says of the index's vector index: as its ``_meta`` records it, else
    ``default`` (kNN over an index made before it was recorded) or ``none`` (exact scores)."""
    recorded = facts.meta.get("vector_index")
    if recorded:
        return str(recorded)
    return "default" if method == "knn" else "none"


@dataclass(frozen=True, slots=True)
class BoundRetriever:
    """An :class:`EsRetriever` over one scope: the :class:`~hopsearch.service.types.Retriever` a strategy's
    run reads through, so no query of the run can leave its request's index, filters or caller."""

    retriever: EsRetriever
    scope: Scope

    async def search_many(self, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        return await self.retriever.search_many(self.scope, queries)

    def canonical(self, name: str) -> str:
        return self.retriever.canonical(name)

    async def search_fused(self, groups: Sequence[Sequence[RetrievalQuery]], size: int) -> list[list[Hit]]:
        return await self.retriever.search_fused(self.scope, groups, size)
