"""End to end: one bundled 2WikiMultihopQA question answered by every strategy — single, deeprag,
dualrag, iterative and hyde — with the real local llama.cpp model (the ``llama`` fixture of
``test_e2e_llama``, the code behind ``hopsearch llm up``) over the real Elasticsearch 8.19 with MiniLM
vectors; each run's trace is read back from the traces index and checked.

Under ``CI=true`` a missing model or llama.cpp server fails instead of skipping.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from hopsearch.service.config.settings import Settings
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.llm import LLMClient
from hopsearch.service.outlines.store import EsOutlineStore
from hopsearch.service.retrieval import EsRetriever
from hopsearch.service.store import Store
from hopsearch.service.strategies import STRATEGIES, AskOptions, Budget, build_strategy
from hopsearch.service.strategies.deeprag import DEMONSTRATIONS
from hopsearch.service.text.lang import detect_lang
from hopsearch.service.traces.recorder import ElasticsearchTraceSink
from tests.conftest import EsNode
from tests.scopes import asking
from tests.test_e2e_llama import first_question, llama  # noqa: F401  (the shared local-model fixture)

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]

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


def readme_japanese_quick_start() -> list[str]:
    """The commands of the README's Japanese quick start (the first bash block of "Japanese documents"),
    comments left out."""
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## Japanese documents\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    return [command for command in commands if command and not command.startswith("#")]


def test_the_readme_japanese_quick_start_answers_in_japanese_with_the_local_model(
    llama: Settings,  # noqa: F811
    es8_node: EsNode,
    tmp_path: Path,
) -> None:
    """The quick start's commands as the README writes them (the hopsearch of this environment for
    ``.venv/bin/hopsearch``), over a fresh index prefix: the bundled documents load and the question is
    answered in Japanese, with the name the project document gives."""
    prefix = f"jaqs{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "HOPSEARCH_ES_URL": es8_node.url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_STATE_DIR": str(tmp_path),
        "HOPSEARCH_LLM_BASE_URL": llama.llm_base_url[0],
        "HOPSEARCH_LLM_MODEL": llama.llm_model,
        "COLUMNS": "200",
    }
    hopsearch = str(Path(sys.executable).parent / "hopsearch")
    outputs: list[str] = []
    try:
        for command in readme_japanese_quick_start():
            done = subprocess.run(
                ["bash", "-c", command.replace(".venv/bin/hopsearch", hopsearch)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
            outputs.append(done.stdout)
    finally:
        httpx.delete(f"{es8_node.url}/{prefix}-*", timeout=60)
    [answer] = [line.split(":", 1)[1].strip() for line in outputs[-1].splitlines() if line.startswith("Answer:")]
    assert detect_lang(answer) == "ja" and "高木" in answer, outputs[-1]
    assert "プロジェクト「かざぐるま」概要" in outputs[-1]  # the project document is cited
