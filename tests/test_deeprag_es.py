"""DeepRAG and single over the real Elasticsearch (7.17 and 8.19), traces written to the traces
index and read back; on a vLLM-like and a llama.cpp-like scripted server."""

from __future__ import annotations

import pytest

from hopsearch.service.llm import LLMClient
from hopsearch.service.retrieval import EsRetriever
from hopsearch.service.store import Store
from hopsearch.service.strategies import AskOptions, Budget, DeepRAG, SingleRetrieval
from hopsearch.service.traces.recorder import ElasticsearchTraceSink
from tests.llm_fixtures import PASSAGES, DeepRAGModel, PlanStep, fallback_for, server_for, settings_for
from tests.scopes import asking

FLAVOURS_ES = ["vllm", "llamacpp-followup"]
MODEL = DeepRAGModel(
    [
        PlanStep("Who directed Lethal Weapon?", "search", "Richard Donner"),
        PlanStep("When did Richard Donner die?", "intermediate", "2021"),
    ],
    final="2021",
)
QUESTION = "When did the director of Lethal Weapon die?"


async def loaded(store: Store) -> EsRetriever:
    target = await store.ensure_indices(None)
    actions = [
        {
            "_index": target,
            "_id": doc_id,
            "_source": {"title": t, "text": x, "source": "jsonl", "doc_id": doc_id},
        }
        for doc_id, t, x in PASSAGES
    ]
    ok, errors = await store.bulk(actions)
    assert (ok, errors) == (len(PASSAGES), [])
    await store.refresh(target)
    return EsRetriever(store)


@pytest.mark.parametrize("flavour", FLAVOURS_ES)
async def test_deeprag_context_comes_from_elasticsearch_and_the_trace_lands_there(store: Store, flavour: str) -> None:
    retriever = await loaded(store)
    sink = ElasticsearchTraceSink(store, store.settings.traces_index, refresh=True)
    with server_for(flavour, MODEL) as server:
        async with LLMClient(settings_for(server, flavour)) as llm:
            answer = await DeepRAG(llm, retriever, sink, stop_fallback=fallback_for(flavour)).answer(
                asking(QUESTION, AskOptions(), store=store)
            )
    answer.raise_for_error()
    assert answer.text == "2021"
    context_prompts = [p for p in server.prompts if "\nContext: " in p and p.endswith("Intermediate answer:")]
    assert context_prompts
    context = context_prompts[0].rsplit("\nContext: ", 1)[1]
    assert context.startswith("[1] Title: Lethal Weapon Text: Lethal Weapon is a 1987 action film")
    assert context.count("] Title: ") == 3  # 3 passages per retrieval
    assert answer.citations[0].id == "p-lethal"

    doc = await store.get_document(store.settings.traces_index, answer.trace.trace_id)
    assert doc is not None
    assert (doc["strategy"], doc["status"], doc["answer"]) == ("deeprag", "ok", "2021")
    generate = [s for s in doc["steps"] if s["kind"] == "generate"]
    assert [s["decision"] for s in generate] == ["retrieve", "parametric", "final"]
    retrieve = next(s for s in doc["steps"] if s["kind"] == "retrieve")
    assert retrieve["queries"] == ["Who directed Lethal Weapon?"] and retrieve["hit_ids"][0] == "p-lethal"
    for key in ("retrievals", "llm_calls", "tokens_in", "tokens_out", "retries"):
        assert doc["totals"][key] == sum(s[key] for s in doc["steps"]), key
    # The mapping indexes decisions as keywords: Kibana can aggregate them.
    found = await store.search(
        store.settings.traces_index, {"query": {"term": {"steps.decision": "retrieve"}}, "size": 1}
    )
    assert found["hits"]["hits"][0]["_id"] == answer.trace.trace_id


async def test_a_failed_run_writes_its_trace_with_the_error(store: Store) -> None:
    retriever = await loaded(store)
    sink = ElasticsearchTraceSink(store, store.settings.traces_index, refresh=True)
    with server_for("vllm", MODEL, hang=True) as server:
        async with LLMClient(settings_for(server, llm_timeout=0.3, llm_retries=1)) as llm:
            answer = await DeepRAG(llm, retriever, sink).answer(
                asking(QUESTION, AskOptions(budget=Budget(timeout_s=1.5)), store=store)
            )
    assert answer.error is not None
    doc = await store.get_document(store.settings.traces_index, answer.trace.trace_id)
    assert doc is not None and doc["status"] == "error"
    assert doc["error"]["type"] in {"LLMTimeout", "LLMUnavailable"} and doc["answer"] is None


async def test_single_over_elasticsearch(store: Store) -> None:
    retriever = await loaded(store)
    sink = ElasticsearchTraceSink(store, store.settings.traces_index, refresh=True)
    with server_for("vllm", lambda r: " Richard Donner\nmore") as server:
        async with LLMClient(settings_for(server)) as llm:
            answer = await SingleRetrieval(llm, retriever, sink).answer(
                asking("Who directed Lethal Weapon?", AskOptions(k=2), store=store)
            )
    answer.raise_for_error()
    assert answer.text == "Richard Donner" and answer.citations[0].id == "p-lethal"
    assert "[1] Title: Lethal Weapon Text:" in server.prompts[0]
    doc = await store.get_document(store.settings.traces_index, answer.trace.trace_id)
    assert doc is not None and doc["totals"]["retrievals"] == 1
