"""End to end: one bundled 2WikiMultihopQA question answered by every strategy — single, deeprag,
dualrag, iterative and hyde — with the real local llama.cpp model (the ``llama`` fixture of
``test_e2e_llama``, the code behind ``hopsearch llm up``) over the real Elasticsearch 8.19 with MiniLM
vectors; each run's trace is read back from the traces index and checked.

Under ``CI=true`` a missing model or llama.cpp server fails instead of skipping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hopsearch.service.config.settings import Settings
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.llm import LLMClient
from hopsearch.service.outlines.store import EsOutlineStore
from hopsearch.service.retrieval import EsRetriever
from hopsearch.service.store import Store
from hopsearch.service.strategies import STRATEGIES, AskOptions, Budget, build_strategy
from hopsearch.service.strategies.deeprag import DEMONSTRATIONS
from hopsearch.service.traces.recorder import ElasticsearchTraceSink
from tests.scopes import asking
from tests.test_e2e_llama import first_question, llama  # noqa: F401  (the shared local-model fixture)

pytestmark = pytest.mark.e2e

#: What each strategy's trace must contain besides the final answer step.
EXPECTED_KINDS = {
    "single": {"retrieve"},
    "deeprag": {"generate"},
    "dualrag": {"reason"},
    "iterative": {"retrieve", "assess"},
    "hyde": {"decompose", "hyde", "retrieve"},
}


async def index_with_vectors(store: Store, embedder: MiniLMEmbedder, record: dict[str, Any]) -> set[str]:
    target = await store.ensure_indices(embedder)
    rows = [
        (f"{record['_id']}-{n}", title, " ".join(sentences)) for n, (title, sentences) in enumerate(record["context"])
    ]
    vectors = await embedder.embed([f"{title}\n{text}" for _, title, text in rows])
    actions = [
        {
            "_index": target,
            "_id": doc_id,
            "_source": {"title": title, "text": text, "source": "jsonl", "doc_id": doc_id, "embedding": vector},
        }
        for (doc_id, title, text), vector in zip(rows, vectors, strict=True)
    ]
    ok, errors = await store.bulk(actions)
    assert errors == [] and ok == len(actions)
    await store.refresh(target)
    return {doc_id for doc_id, _, _ in rows}


async def test_every_strategy_answers_one_2wiki_question_with_the_local_model(
    llama: Settings,  # noqa: F811
    store8: Store,
    minilm: MiniLMEmbedder,
    sample_questions_path: Path,
) -> None:
    record = first_question(sample_questions_path)
    question = str(record["question"])
    ids = await index_with_vectors(store8, minilm, record)
    retriever = EsRetriever(store8, minilm)
    sink = ElasticsearchTraceSink(store8, store8.settings.traces_index, refresh=True)
    budget = Budget(max_steps=3, max_retrievals=6, max_llm_calls=30, timeout_s=300.0)
    traces: dict[str, str] = {}
    async with LLMClient(llama) as llm:
        assert await llm.engine() == "llamacpp"
        for name in STRATEGIES:
            strategy = build_strategy(
                name, llm=llm, retriever=retriever, sink=sink, store=store8, embedder=minilm, settings=llama
            )
            demos = DEMONSTRATIONS if name == "deeprag" else ""
            options = AskOptions(max_depth=4, k=3, max_tokens=32, demonstrations=demos, budget=budget)
            answer = await strategy.answer(asking(question, options, store=store8))
            answer.raise_for_error()
            traces[name] = answer.trace.trace_id
    assert set(traces) == {"single", "deeprag", "dualrag", "iterative", "hyde"}
    for name, trace_id in traces.items():
        doc = await store8.get_document(store8.settings.traces_index, trace_id)
        assert doc is not None, name
        assert (doc["strategy"], doc["status"], doc["question"]) == (name, "ok", question)
        assert doc["model"] == llama.llm_model and doc["answer"] is not None, name
        kinds = [step["kind"] for step in doc["steps"]]
        assert EXPECTED_KINDS[name] <= set(kinds), (name, kinds)
        assert kinds[-1] == "answer" or name == "deeprag", (name, kinds)
        for key in ("retrievals", "llm_calls", "tokens_in", "tokens_out"):
            assert doc["totals"][key] == sum(step[key] for step in doc["steps"]), (name, key)
        assert doc["totals"]["llm_calls"] >= 1 and doc["totals"]["tokens_in"] > 0, name
        hits = {hit for step in doc["steps"] if step["kind"] == "retrieve" for hit in step["hit_ids"]}
        assert hits <= ids, name
    # DualRAG's schema-constrained roles parsed on the tiny model; what it summarised is stored.
    dual = await store8.get_document(store8.settings.traces_index, traces["dualrag"])
    assert dual is not None
    reasons = [s for s in dual["steps"] if s["kind"] == "reason"]
    assert reasons and all(isinstance(s["details"]["value"]["need_retrieve"], bool) for s in reasons)
    kept = [s for s in dual["steps"] if s["kind"] == "summarize" and not s["details"]["dropped"]]
    if kept:
        stored = await EsOutlineStore(store8).search(llama.outline_namespace, kept[0]["output"][:200])
        assert stored, kept[0]
