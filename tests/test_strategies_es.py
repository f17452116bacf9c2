"""HyDE and iterative over the real Elasticsearch (7.17 and 8.19) with the local MiniLM embedder, and
DualRAG's reranking against the entity with it."""

from __future__ import annotations

from typing import Any

from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.llm import LLMClient
from hopsearch.service.retrieval import EsRetriever
from hopsearch.service.store import Store
from hopsearch.service.strategies import AskOptions, HyDE, Iterative
from hopsearch.service.strategies.dualrag_knowledge import EntitySearch, gather, rerank
from hopsearch.service.traces.recorder import ElasticsearchTraceSink
from hopsearch.service.types import Hit
from tests.conftest import EsNode, make_settings
from tests.counting_proxy import CountingProxy
from tests.dual_fixtures import ChatModel
from tests.llm_fixtures import server_for, settings_for
from tests.scopes import asking, bound
from tests.test_store import load


async def test_hyde_searches_dense_and_bm25_in_one_msearch(es_node: EsNode, minilm: MiniLMEmbedder) -> None:
    proxy = CountingProxy(es_node.url)
    store = await Store.connect(make_settings(await proxy.start()))
    try:
        await load(store, minilm)
        await store.index_meta()
        sink = ElasticsearchTraceSink(store, store.settings.traces_index, refresh=True)
        subs = ["Who directed The Seventh Victim?", "Who directed Baby Face Morgan?"]
        model = ChatModel({"decompose": [{"sub_queries": subs}]}, answer="no")
        with server_for("vllm", model) as server:
            async with LLMClient(settings_for(server)) as llm:
                proxy.reset()
                answer = await HyDE(llm, EsRetriever(store, minilm), sink).answer(
                    asking(
                        "Are the directors of The Seventh Victim and Baby Face Morgan from the same country?",
                        AskOptions(k=4),
                        store=store,
                    )
                )
        answer.raise_for_error()
        msearches = [path for (_, path) in proxy.paths.elements() if path.endswith("/_msearch")]
        assert len(msearches) == 1, proxy.paths
        doc = await store.get_document(store.settings.traces_index, answer.trace.trace_id)
        assert doc is not None and doc["status"] == "ok"
        [retrieve] = [s for s in doc["steps"] if s["kind"] == "retrieve"]
        lists = retrieve["details"]["lists"]
        expected = "knn" if es_node.knn else "rerank"
        assert [(x["mode"], x["dense_method"]) for x in lists] == [("dense", expected), ("bm25", "none")] * 2
        assert lists[1]["hit_ids"][0] == "p2" and lists[3]["hit_ids"][0] == "p3"
        assert {"p2", "p3"} <= set(retrieve["hit_ids"]) and len(retrieve["hit_ids"]) == 4
    finally:
        await store.client.indices.delete(index=f"{store.settings.index_prefix}-*")
        await store.close()
        await proxy.stop()


async def test_iterative_over_elasticsearch(store: Store) -> None:
    await load(store, None)
    sink = ElasticsearchTraceSink(store, store.settings.traces_index, refresh=True)
    replies: list[dict[str, Any]] = [
        {"confidence": 0.4, "reasoning": "", "missing_info": "nationality", "next_query": "Mark Robson"},
        {"confidence": 0.9, "reasoning": "found", "missing_info": "", "next_query": ""},
    ]
    with server_for("llamacpp-followup", ChatModel({"assess": replies}, answer="Canadian")) as server:
        async with LLMClient(settings_for(server, "llamacpp-followup")) as llm:
            answer = await Iterative(llm, EsRetriever(store), sink).answer(
                asking("What nationality is the director of The Seventh Victim?", AskOptions(k=2), store=store)
            )
    answer.raise_for_error()
    doc = await store.get_document(store.settings.traces_index, answer.trace.trace_id)
    assert doc is not None and doc["answer"] == "Canadian"
    retrieves = [s for s in doc["steps"] if s["kind"] == "retrieve"]
    assert [s["hit_ids"][0] for s in retrieves] == ["p2", "p1"]
    assert doc["steps"][-1]["decided_by"] == "confidence" and doc["totals"]["retrievals"] == 2
    assert server.requests[1]["response_format"]["type"] == "json_object"  # llama.cpp's grammar form


async def test_dualrag_reranks_against_the_entity(store: Store, minilm: MiniLMEmbedder) -> None:
    await load(store, None)
    searches = [EntitySearch("mark robson", "Mark Robson", ("Seventh Victim 1943 horror", "directed by Mark Robson"))]
    candidates = (await gather(bound(store), searches)).hits
    assert len(candidates["mark robson"]) >= 3 and candidates["mark robson"][0].id == "p2"  # BM25 + RRF order
    by_order = await rerank(None, searches, candidates, top=2)
    by_entity = await rerank(minilm, searches, candidates, top=2)
    assert by_order["mark robson"] == candidates["mark robson"][:2]
    assert by_entity["mark robson"][0].id == "p1"
    assert all(isinstance(hit, Hit) for hit in by_entity["mark robson"])
