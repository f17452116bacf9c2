"""Hybrid fusion, filters and the reranker against real Elasticsearch 7.17 and 8.19.

Every fusion path returns the same top hit on a constructed case (where the server cannot run one, it
falls back to client-side RRF and says why); the ``rrf`` retriever is refused cleanly on a Basic
licence; under a trial licence (own 8.19 node) it is attempted, and where the server lacks the
``rank-rrf`` module (the integ-test zip) the refusal falls back just as cleanly.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from hopsearch.cli.local import esnode
from hopsearch.service.config.settings import Settings
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.errors import ConfigError, HopsearchError
from hopsearch.service.retrieval import BoundRetriever
from hopsearch.service.retrieval.bodies import DEFAULT_BM25
from hopsearch.service.retrieval.filters import parse_filters
from hopsearch.service.retrieval.fusion import rrf_groups
from hopsearch.service.retrieval.rerank import HttpReranker
from hopsearch.service.store import Store
from hopsearch.service.strategies.base import describe
from hopsearch.service.strategies.dualrag_knowledge import EntitySearch, gather
from hopsearch.service.types import Fusion, Hit, RetrievalQuery, SearchResult
from tests.conftest import ES_VERSIONS, EsNode, _drop, make_settings, unavailable
from tests.scopes import bound
from tests.scripted_reranker import ScriptedReranker
from tests.test_store import load

QUERY = "Mark Robson Canadian film director born in Montreal Quebec"
FUSIONS: tuple[Fusion, ...] = ("rrf", "bool", "es_rrf")

DOCS = [
    (
        "d1",
        "Handbook",
        "Expense reports are due monthly.",
        {
            "source": "wiki",
            "chunk": 0,
            "indexed_at": "2024-01-10T00:00:00Z",
            "metadata": {"team": "finance", "lang": "en"},
        },
    ),
    (
        "d2",
        "Handbook",
        "Expense reports need a receipt.",
        {
            "source": "wiki",
            "chunk": 1,
            "indexed_at": "2024-03-10T00:00:00Z",
            "metadata": {"team": "finance", "author": "ann", "lang": "en"},
        },
    ),
    (
        "d3",
        "Handbuch",
        "Expense reports auf Deutsch.",
        {
            "source": "drive",
            "chunk": 0,
            "indexed_at": "2024-05-10T00:00:00Z",
            "metadata": {"team": "legal", "lang": "de"},
        },
    ),
]


async def test_every_fusion_path_returns_the_same_top_hit(store: Store, minilm: MiniLMEmbedder) -> None:
    await load(store, minilm)
    retriever = bound(store, minilm)
    results = await retriever.search_many([RetrievalQuery(QUERY, k=3, mode="hybrid", fusion=f) for f in FUSIONS])
    assert [r.hits[0].id for r in results] == ["p1", "p1", "p1"]
    ran = [r.fusion for r in results]
    if store.info.dense_method == "knn":
        assert ran == ["rrf", "bool", "rrf"]  # the shared/CI 8.19 node runs on a Basic licence
        assert "licence" in results[2].fusion_note and "basic" in results[2].fusion_note
    else:  # 7.17 integ-test zip: no vectors on the server, dense scores computed here
        assert ran == ["rrf", "rrf", "rrf"]
        assert "needs vectors" in results[1].fusion_note and "8.14" in results[2].fusion_note
    assert results[0].fusion_note == "" and all(r.dense_method != "none" for r in results)
    assert all(len(r.hits) == 3 and "embedding" not in r.hits[0].source for r in results)
    assert "fusion" in describe(results[2])


@pytest.mark.parametrize("kind", ["most_fields", "best_fields"])
async def test_the_bm25_clause_scores_as_the_nodes_own(es_node: EsNode, minilm: MiniLMEmbedder, kind: str) -> None:
    """``bm25_query`` (``most_fields``, the default, or DeepRAG's ``best_fields`` with ``tie_breaker`` 0.5): a
    bm25 query, hybrid's BM25 leg and a DualRAG step's fused BM25 all score and rank as the node's own
    ``multi_match`` of that kind does, not as the other (whose order on this query is checked to differ, so
    each comparison can fail)."""
    text = "American film directed by Mark Robson"  # p1 (title + text) first with most_fields, p2 with best_fields
    store = await Store.connect(make_settings(es_node.url, bm25_query=kind))
    try:
        index = await load(store, minilm)

        def node(kind: str) -> dict[str, float]:
            match: dict[str, Any] = {"query": text, "fields": ["title", "text"], "type": kind}
            if kind == "best_fields":
                match["tie_breaker"] = 0.5
            answer = httpx.post(f"{es_node.url}/{index}/_search", json={"size": 6, "query": {"multi_match": match}})
            return {hit["_id"]: hit["_score"] for hit in answer.json()["hits"]["hits"]}

        other = "best_fields" if kind == "most_fields" else "most_fields"
        own, theirs = node(kind), node(other)
        ranked = sorted(own, key=lambda i: -own[i])
        assert ranked != sorted(theirs, key=lambda i: -theirs[i])
        retriever = bound(store, minilm)
        bm25, hybrid, boolean = await retriever.search_many(
            [
                RetrievalQuery(text, k=6, mode="bm25"),
                RetrievalQuery(text, k=6, mode="hybrid", legs=True),
                RetrievalQuery(text, k=6, mode="hybrid", fusion="bool", weights=(1.0, 0.0)),  # BM25's order alone
            ]
        )
        assert {h.id: h.score for h in bm25.hits} == pytest.approx(own)
        assert {h.id: h.score for h in hybrid.legs["bm25"]} == pytest.approx(own)
        assert boolean.fusion == ("bool" if es_node.knn else "rrf")
        assert [h.id for h in boolean.hits][: len(ranked)] == ranked
        fused = await retriever.search_fused([[RetrievalQuery(text, k=6)]], 6)
        assert [h.id for h in fused[0]] == ranked
    finally:
        await _drop(store)
        await store.close()


def test_the_default_bm25_clause_is_most_fields() -> None:
    assert Settings().bm25_query == "most_fields" and DEFAULT_BM25 == "most_fields"  # type: ignore[call-arg]


async def test_legs_and_weights(store: Store, minilm: MiniLMEmbedder) -> None:
    await load(store, minilm)
    retriever = bound(store, minilm)
    both, bm25_only, dense_only, bm25, dense, fused = await retriever.search_many(
        [
            RetrievalQuery("film director", k=4, mode="hybrid", legs=True),
            RetrievalQuery("film director", k=4, mode="hybrid", weights=(1.0, 0.0)),
            RetrievalQuery("film director", k=4, mode="hybrid", weights=(0.0, 1.0)),
            RetrievalQuery("film director", k=4, mode="bm25"),
            RetrievalQuery("film director", k=4, mode="dense"),
            RetrievalQuery("film director", k=4, mode="hybrid", fusion="bool", legs=True),
        ]
    )
    assert set(both.legs) == {"bm25", "dense"}
    assert [h.id for h in both.legs["bm25"]] == [h.id for h in bm25.hits]
    assert [h.id for h in both.legs["dense"]] == [h.id for h in dense.hits]
    assert [h.id for h in bm25_only.hits][:3] == [h.id for h in bm25.hits][:3]
    assert [h.id for h in dense_only.hits][:3] == [h.id for h in dense.hits][:3]
    assert set(fused.legs) == {"bm25", "dense"} and fused.hits


async def test_filters_narrow_every_mode(store: Store, minilm: MiniLMEmbedder) -> None:
    index = await store.ensure_indices(minilm)
    vectors = await minilm.embed([f"{t}\n{x}" for _, t, x, _ in DOCS])
    actions = [
        {"_index": index, "_id": i, "_source": {"title": t, "text": x, "doc_id": i, "embedding": v, **extra}}
        for (i, t, x, extra), v in zip(DOCS, vectors, strict=True)
    ]
    assert (await store.bulk(actions, refresh=True))[0] == 3
    retriever = bound(store, minilm)
    cases: list[tuple[list[dict[str, Any]], set[str]]] = [
        ([{"term": {"source": "wiki"}}], {"d1", "d2"}),
        ([{"terms": {"metadata.lang": ["de"]}}], {"d3"}),
        ([{"range": {"indexed_at": {"gte": "2024-02-01", "lt": "2024-04-01"}}}], {"d2"}),
        ([{"exists": {"field": "metadata.author"}}], {"d2"}),
        ([{"or": [{"term": {"metadata.team": "legal"}}, {"range": {"chunk": {"gte": 1}}}]}], {"d2", "d3"}),
        ([{"not": {"term": {"source": "wiki"}}}], {"d3"}),
        ([{"and": [{"term": {"source": "wiki"}}, {"not": [{"exists": {"field": "metadata.author"}}]}]}], {"d1"}),
    ]
    for raw, expected in cases:
        clauses = parse_filters(raw)
        for mode in ("bm25", "dense", "hybrid"):
            [result] = await retriever.search_many([RetrievalQuery("expense reports", k=5, mode=mode, filters=clauses)])  # type: ignore[arg-type]
            assert {h.id for h in result.hits} == expected, (raw, mode)
    scoped = bound(store, minilm, filters=[{"term": {"metadata.lang": "de"}}])  # what an _ask request's filters do
    [inside] = await scoped.search_many([RetrievalQuery("expense reports", k=5)])
    assert [h.id for h in inside.hits] == ["d3"]


async def test_reranker_reorders_the_top_hits(store: Store, minilm: MiniLMEmbedder) -> None:
    await load(store, minilm)
    with ScriptedReranker(favour="volcano") as server:
        reranker = HttpReranker(server.base_url, "scripted-ce", top_n=6)
        retriever = bound(store, minilm, reranker=reranker)
        try:
            plain, reranked, hybrid = await retriever.search_many(
                [
                    RetrievalQuery("film director crust", k=2),
                    RetrievalQuery("film director crust", k=2, rerank=True),
                    RetrievalQuery("film director crust", k=2, mode="hybrid", rerank=True),
                ]
            )
        finally:
            await reranker.aclose()
    assert plain.hits[0].id != "p6" and plain.reranked_by == ""
    assert reranked.hits[0].id == "p6" and reranked.reranked_by == "scripted-ce" and len(reranked.hits) == 2
    assert hybrid.hits[0].id == "p6" and hybrid.hits[0].score >= 1.0
    assert "reranked by scripted-ce" in describe(reranked)
    request = server.requests[0]
    assert request["path"] == "/v1/rerank" and request["model"] == "scripted-ce" and request["top_n"] >= 2
    assert any("Volcano" in d for d in request["documents"])
    with pytest.raises(ConfigError, match="reranker"):
        await bound(store).search_many([RetrievalQuery("x", rerank=True)])


async def test_a_failing_reranker_is_a_clear_error(store: Store) -> None:
    await load(store, None)
    reranker = HttpReranker("http://127.0.0.1:9/v1", "gone", top_n=3)
    try:
        with pytest.raises(HopsearchError, match="reranker at"):
            await bound(store, reranker=reranker).search_many([RetrievalQuery("Mark Robson", rerank=True)])
    finally:
        await reranker.aclose()


@pytest.fixture(scope="module")
def trial_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An own 8.19 node on a trial licence (never the shared node: others use it on Basic)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "hopsearch"
    spec = esnode.NodeSpec(
        version=ES_VERSIONS["8.19"], port=esnode.free_port(), node_dir=tmp_path_factory.mktemp("trial"), cache_dir=cache
    )
    try:
        esnode.start(spec, timeout=240)
    except (HopsearchError, OSError) as exc:
        unavailable(f"Elasticsearch 8.19 for the trial licence could not start: {exc}")
    try:
        answer = httpx.post(f"{spec.url}/_license/start_trial", params={"acknowledge": "true"}, timeout=60)
        assert answer.status_code == 200 and answer.json().get("trial_was_started"), answer.text
        yield spec.url
    finally:
        esnode.stop(spec)


@pytest.fixture
async def trial_store(trial_node: str) -> AsyncIterator[Store]:
    st = await Store.connect(make_settings(trial_node))
    try:
        yield st
    finally:
        await st.client.indices.delete(index=f"{st.settings.index_prefix}-*", allow_no_indices=True)
        await st.close()


async def test_rrf_retriever_under_a_trial_licence(trial_store: Store, minilm: MiniLMEmbedder) -> None:
    await load(trial_store, minilm)
    assert (await trial_store.licence())["license"]["type"] == "trial"
    retriever = bound(trial_store, minilm)
    rrf, es_rrf = await retriever.search_many(
        [RetrievalQuery(QUERY, k=3, mode="hybrid"), RetrievalQuery(QUERY, k=3, mode="hybrid", fusion="es_rrf")]
    )
    assert rrf.hits[0].id == es_rrf.hits[0].id == "p1"
    if "rank-rrf" in trial_store.info.modules:  # a full distribution (HOPSEARCH_TEST_ES8_URL / ES_HOME)
        assert es_rrf.fusion == "es_rrf" and es_rrf.fusion_note == ""
    else:  # the integ-test zip has no rank-rrf module: attempted (licence allows), refused, fallen back
        assert es_rrf.fusion == "rrf" and "refused the rrf retriever" in es_rrf.fusion_note
        assert "unknown retriever" in es_rrf.fusion_note


class ManyOnly:
    """The retriever seen only through ``search_many`` (what a retriever without ``search_fused`` gets)."""

    def __init__(self, inner: BoundRetriever) -> None:
        self.inner = inner

    async def search_many(self, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        return await self.inner.search_many(queries)


def overlapping_corpus(size: int = 240) -> list[tuple[str, str, str]]:
    """Passages whose words overlap across entities and keywords: the lists of one entity share hits and
    RRF has ties (equal ranks in different lists), which fused order must break the same way."""
    names = ["Lethal Weapon", "Richard Donner", "Jaws Spielberg", "Weapon Donner", "Film Jaws"]
    words = ["director", "born", "film", "American", "died", "released", "sequel", "producer"]
    return [
        (
            f"c{n}",
            f"{names[n % 5]} {n}",
            f"{names[(n * 3) % 5]} {words[n % 8]} {words[(n * 5) % 8]} in {1900 + n % 90}; {names[(n + 2) % 5]}.",
        )
        for n in range(size)
    ]


async def test_fused_groups_are_rrf_over_search_many(store: Store, minilm: MiniLMEmbedder) -> None:
    """``search_fused`` (RRF over the raw answer, only the kept hits built) gives exactly the hits of ``rrf``
    over ``search_many``'s lists: ids, scores, titles, texts and sources, in the same order; DualRAG's
    ``gather`` gives the same candidates through either."""
    await load(store, None, overlapping_corpus())
    retriever = bound(store)
    names = ["Lethal Weapon", "Richard Donner", "Jaws Spielberg"]
    searches = [EntitySearch(n.casefold(), n, (n, f"{n} director", f"{n} born")) for n in names]
    searches.append(EntitySearch("zzq", "Zzq", ("zzq", "qqz xxy")))  # no hits at all
    groups = [[RetrievalQuery(k, k=50) for k in s.keywords] for s in searches]
    lengths = [len(g) for g in groups]

    async def both(on: BoundRetriever, size: int) -> tuple[list[list[Hit]], list[list[Hit]]]:
        results = await on.search_many([q for g in groups for q in g])
        return await on.search_fused(groups, size), rrf_groups(lengths, [r.hits for r in results], size=size)

    for size in (50, 10):
        fused, expected = await both(retriever, size)
        assert fused == expected and [len(h) for h in fused][:3] == [size] * 3 and fused[3] == []
    assert len({h.id for r in await retriever.search_many(groups[0]) for h in r.hits}) > 50  # lists differ
    assert (await gather(retriever, searches)).hits == (await gather(ManyOnly(retriever), searches)).hits
    fused, expected = await both(bound(store, filters=[{"term": {"doc_id": "c7"}}]), 50)  # an _ask request's filters
    assert fused == expected and {h.id for hits in fused for h in hits} == {"c7"}
    narrowed = bound(store, filters=[{"terms": {"doc_id": ["c1", "c2", "c5"]}}])
    fused, expected = await both(narrowed, 50)
    assert fused == expected and {h.id for hits in fused for h in hits} <= {"c1", "c2", "c5"}


async def test_fused_groups_with_vectors_in_the_index(store: Store, minilm: MiniLMEmbedder) -> None:
    """Where the index holds vectors (left out of BM25 hits by the node, or stripped here where an index
    without hopsearch's mapping stores them): the same hits as ``rrf`` over ``search_many``, no vector."""
    await load(store, minilm)
    raw = await load(store, minilm, index=f"{store.settings.index_prefix}-raw")  # no _meta: vectors in _source
    cases = ((bound(store, minilm), ("bm25", "hybrid")), (bound(store, index=raw), ("bm25",)))
    for retriever, modes in cases:
        for mode in modes:
            groups = [[RetrievalQuery("film director", k=4, mode=mode), RetrievalQuery("Mark Robson", k=4, mode=mode)]]  # type: ignore[arg-type]
            results = await retriever.search_many(groups[0])
            fused = await retriever.search_fused(groups, 5)
            assert fused == rrf_groups([2], [r.hits for r in results], size=5) and len(fused[0]) >= 3, mode
            assert all("embedding" not in h.source for h in fused[0])
