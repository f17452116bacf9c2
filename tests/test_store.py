"""The store and retrieval against real Elasticsearch 7.17 and 8.19 (parametrised by ``es_node``)."""

from __future__ import annotations

import pytest

from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.errors import EmbedderMismatch, IndexMissing, StoreError
from hopsearch.service.store import Store
from hopsearch.service.types import RetrievalQuery
from tests.conftest import EsNode, make_settings
from tests.counting_proxy import CountingProxy
from tests.scopes import bound

PASSAGES = [
    ("p1", "Mark Robson", "Mark Robson was a Canadian film director, born in Montreal, Quebec."),
    (
        "p2",
        "The Seventh Victim",
        "The Seventh Victim is a 1943 American horror film directed by Mark Robson.",
    ),
    (
        "p3",
        "Baby Face Morgan",
        "Baby Face Morgan is a 1942 American comedy crime film directed by Arthur Dreifuss.",
    ),
    ("p4", "Arthur Dreifuss", "Arthur Dreifuss was a German-born American film director and choreographer."),
    ("p5", "Photosynthesis", "Plants convert sunlight, water and carbon dioxide into sugar and oxygen."),
    ("p6", "Volcano", "A volcano is a rupture in the crust of a planet where lava and ash escape."),
]


async def load(
    store: Store,
    embedder: MiniLMEmbedder | None,
    docs: list[tuple[str, str, str]] = PASSAGES,
    index: str | None = None,
) -> str:
    target = index or await store.ensure_indices(embedder)
    vectors = await embedder.embed([f"{t}\n{x}" for _, t, x in docs]) if embedder else [None] * len(docs)
    actions = []
    for (doc_id, title, text), vector in zip(docs, vectors, strict=True):
        source: dict[str, object] = {"title": title, "text": text, "source": "jsonl", "doc_id": doc_id}
        if vector is not None:
            source["embedding"] = vector
        actions.append({"_index": target, "_id": doc_id, "_source": source})
    ok, errors = await store.bulk(actions)
    assert (ok, errors) == (len(docs), [])
    await store.refresh(target)
    return target


async def test_capabilities_are_detected(store: Store, es_node: EsNode) -> None:
    if es_node.knn:
        assert store.info.major == es_node.major and store.info.knn and store.info.dense_method == "knn"
    else:
        # The 7.17 integ-test-zip has no vectors module: dense scores are computed client-side.
        assert store.info.major == 7 and not store.info.dense_vector and store.info.dense_method == "rerank"
    assert not store.info.analysis_common and store.analyzer == "standard"


async def test_indices_alias_and_meta(store: Store, minilm: MiniLMEmbedder) -> None:
    index = await store.ensure_indices(minilm)
    assert index == f"{store.settings.passages_alias}-v1"
    assert await store.passages_index() == index
    assert await store.exists(store.settings.outlines_index)
    assert await store.exists(store.settings.traces_index)
    meta = await store.index_meta()
    assert meta["embedder"] == minilm.model_id and meta["dims"] == 384
    assert meta["vector_mode"] == store.info.dense_method and meta["analyzer"] == "standard"
    # idempotent
    assert await store.ensure_indices(minilm) == index


async def test_bm25_finds_the_right_passage(store: Store) -> None:
    await load(store, None)
    [result] = await bound(store).search_many([RetrievalQuery("who directed Baby Face Morgan", k=3)])
    assert result.mode == "bm25" and result.dense_method == "none"
    assert result.hits[0].id == "p3"
    assert "embedding" not in result.hits[0].source


async def test_dense_uses_the_server_capability(store: Store, minilm: MiniLMEmbedder) -> None:
    await load(store, minilm)
    retriever = bound(store, minilm)
    [result] = await retriever.search_many([RetrievalQuery("film maker born in Quebec", k=2, mode="dense")])
    expected = "knn" if store.info.knn else "rerank"
    assert result.dense_method == expected
    assert result.hits[0].id == "p1"
    assert all("embedding" not in hit.source for hit in result.hits)


async def test_dense_rerank_finds_semantic_match_among_bm25_candidates(store: Store, minilm: MiniLMEmbedder) -> None:
    await load(store, minilm)
    [result] = await bound(store, minilm).search_many(
        [RetrievalQuery("how do green plants make food from light", k=1, mode="dense")]
    )
    assert result.hits and result.hits[0].id == "p5"


async def test_hybrid_fuses_both_lists(store: Store, minilm: MiniLMEmbedder) -> None:
    await load(store, minilm)
    [result] = await bound(store, minilm).search_many([RetrievalQuery("Mark Robson director", k=3, mode="hybrid")])
    assert result.mode == "hybrid"
    ids = [hit.id for hit in result.hits]
    assert set(ids) >= {"p1", "p2"}
    assert len(ids) == len(set(ids)) == 3
    # RRF scores: at most 2/(60+1)
    assert all(0 < hit.score <= 2 / 61 + 1e-9 for hit in result.hits)


async def test_filters_apply(store: Store) -> None:
    await load(store, None)
    [result] = await bound(store).search_many(
        [RetrievalQuery("film director", k=5, filters=[{"terms": {"doc_id": ["p4"]}}])]
    )
    assert [hit.id for hit in result.hits] == ["p4"]


async def test_many_queries_are_one_msearch_round_trip(es_node: EsNode, minilm: MiniLMEmbedder) -> None:
    proxy = CountingProxy(es_node.url)
    url = await proxy.start()
    settings = make_settings(url)
    store = await Store.connect(settings)
    try:
        await load(store, minilm)
        retriever = bound(store, minilm)
        await store.index_meta()  # warm the mapping cache: the batch itself must be one request
        proxy.reset()
        queries = [
            RetrievalQuery("Mark Robson", k=2),
            RetrievalQuery("Arthur Dreifuss", k=2, mode="dense"),
            RetrievalQuery("volcano lava", k=2, mode="hybrid"),
            RetrievalQuery("photosynthesis", k=2),
            RetrievalQuery("Seventh Victim horror", k=2, mode="hybrid"),
        ]
        results = await retriever.search_many(queries)
        assert proxy.total == 1, proxy.paths
        [(method, path)] = list(proxy.paths)
        assert method == "POST" and path.endswith("/_msearch")
        assert all(1 <= len(r.hits) <= 2 for r in results)
        assert results[0].hits[0].id == "p1" and results[1].hits[0].id == "p4"
        assert results[2].hits[0].id == "p6" and results[3].hits[0].id == "p5"
    finally:
        await store.client.indices.delete(index=f"{settings.index_prefix}-*")
        await store.close()
        await proxy.stop()


async def test_alias_swap_is_atomic_and_keeps_meta(store: Store) -> None:
    first = await load(store, None)
    second = await store.create_passages_version(None)
    assert second.endswith("-v2")
    await load(store, None, [("n1", "New", "A brand new corpus about glaciers.")], index=second)
    # before the swap the alias still serves v1
    [before] = await bound(store).search_many([RetrievalQuery("glaciers", k=3)])
    assert before.hits == ()
    removed = await store.swap_alias(second, delete_old=True)
    assert removed == [first]
    assert await store.passages_index() == second
    [after] = await bound(store).search_many([RetrievalQuery("glaciers", k=3)])
    assert [h.id for h in after.hits] == ["n1"]
    assert not await store.exists(first)


async def test_embedder_guard_refuses_foreign_vectors(store: Store, minilm: MiniLMEmbedder) -> None:
    await store.ensure_indices(minilm)
    await store.check_embedder(minilm.model_id, 384)
    with pytest.raises(EmbedderMismatch, match="refusing vectors of 'openai:other'"):
        await store.check_embedder("openai:other", 384)
    with pytest.raises(EmbedderMismatch):
        await store.check_embedder(minilm.model_id, 768)


async def test_bm25_only_index_refuses_vectors_and_dense_queries(store: Store, minilm: MiniLMEmbedder) -> None:
    await store.ensure_indices(None)
    with pytest.raises(EmbedderMismatch, match="without vectors"):
        await store.ensure_indices(minilm)
    with pytest.raises(EmbedderMismatch, match="no vectors"):
        await bound(store, minilm).search_many([RetrievalQuery("x", mode="dense")])


async def test_missing_index_is_a_clear_error(store: Store) -> None:
    with pytest.raises(IndexMissing, match="no such index"):
        await bound(store).search_many([RetrievalQuery("anything")])


async def test_msearch_answers_and_refusals_keep_their_shape(store: Store) -> None:
    """``_msearch`` (through the 8.x client's transport, the API on 7.x): one response per search in
    order; an item's error raises with its reason (404 as IndexMissing) or comes back with
    ``keep_errors``; a request the server refuses as a whole is a StoreError with its status (a 400)."""
    index = await store.ensure_indices(None)
    ok, errors = await store.bulk(
        [{"_index": index, "_id": "a", "_source": {"title": "Alpha", "text": "alpha river"}}], refresh=True
    )
    assert (ok, errors) == (1, [])
    alias = store.settings.passages_alias
    found = await store.msearch([(alias, {"query": {"match": {"text": "river"}}}), (alias, {"size": 0})])
    assert [len(r["hits"]["hits"]) for r in found] == [1, 0] and found[0]["hits"]["hits"][0]["_id"] == "a"
    missing = f"{store.settings.index_prefix}-nosuch"
    with pytest.raises(IndexMissing, match="index_not_found_exception"):
        await store.msearch([(missing, {"size": 1})])
    kept = await store.msearch([(alias, {"size": 1}), (missing, {"size": 1})], keep_errors=True)
    assert "hits" in kept[0] and kept[1]["status"] == 404 and "error" in kept[1]
    with pytest.raises(StoreError) as refused:
        await store.msearch([(alias, {"bogus": 1})])
    assert str(refused.value).startswith(f"Searching [{alias}] failed: parsing_exception: ")
    assert "bogus" in str(refused.value)
    assert refused.value.status == 400 and refused.value.details["status"] == 400
