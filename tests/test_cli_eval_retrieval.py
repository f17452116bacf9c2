"""`hopsearch eval retrieval` through click's runner on the bundled 2Wiki slice (real Elasticsearch 8.19,
the local MiniLM embedder), plus the scoring functions themselves."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from hopsearch.cli.main import main
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.config.settings import load_settings
from hopsearch.service.errors import ConfigError
from hopsearch.service.evaluation.recall import GoldItem, query_of, score_titles, summarize, trace_recall
from tests.conftest import EsNode
from tests.scripted_llm import ScriptedLLM, ScriptRequest

SAMPLE = Path(__file__).resolve().parents[1] / "loaders" / "data" / "sample_2wiki.jsonl"


def test_scores_by_title_type_and_gold_count() -> None:
    two = GoldItem("q1", "?", "comparison", frozenset({"A", "B"}), frozenset({"a", "b"}))
    four = GoldItem("q2", "?", "compositional", frozenset({"C", "D", "E", "F"}), frozenset({"c", "d", "e", "f"}))
    report = summarize([score_titles(two, ["A", "x", "B"]), score_titles(four, ["C", "x"])], "10")
    assert report["recall@10"] == round((1.0 + 0.25) / 2, 4) and report["all@10"] == 0.5 and report["n"] == 2
    assert report["by_type"]["comparison"]["all@10"] == 1.0 and report["by_gold"]["4"]["recall@10"] == 0.25
    traces = {"q1": {"steps": [{"kind": "retrieve", "hit_ids": ["a", "z"]}, {"kind": "generate"}]}}
    from_traces = trace_recall([two, four], traces)
    assert from_traces["recall@trace"] == 0.5 and from_traces["n"] == 1 and from_traces["passages"] == 2
    assert query_of("hybrid:bool+rerank", "q", 5).fusion == "bool"
    for bad in ("bm25:rrf", "hybrid:linear", "dense+boost", "sparse"):
        with pytest.raises(ConfigError, match="mode"):
            query_of(bad, "q", 5)


def always_no(request: ScriptRequest) -> str:
    return " no"


def test_eval_retrieval_on_the_bundled_slice(es8_node: EsNode, tmp_path: Path) -> None:
    env = {
        "HOPSEARCH_ES_URL": es8_node.url,
        "HOPSEARCH_INDEX_PREFIX": f"er{uuid.uuid4().hex[:8]}",
        "HOPSEARCH_EMBEDDER": "minilm",
        "HOPSEARCH_STATE_DIR": str(tmp_path / "state"),
        "HOPSEARCH_ES_REQUEST_TIMEOUT": "120",  # a shared 2-core machine: bulk with vectors can be slow
        "COLUMNS": "200",
    }
    runner = CliRunner()
    modes = [
        "--mode",
        "bm25",
        "--mode",
        "dense",
        "--mode",
        "hybrid",
        "--mode",
        "hybrid:bool",
        "--mode",
        "hybrid:es_rrf",
    ]
    first = runner.invoke(main, ["eval", "retrieval", str(SAMPLE), "--corpus-from-context", *modes, "--json"], env=env)
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout[first.stdout.index("{") :])
    assert list(report) == ["bm25", "dense", "hybrid", "hybrid:bool", "hybrid:es_rrf"]
    for block in report.values():
        assert 0.3 < block["recall@10"] <= 1.0 and 0.0 <= block["all@10"] <= block["recall@10"] and block["n"] == 24
        assert set(block["by_type"]) == {"bridge_comparison", "comparison", "compositional"}
        assert set(block["by_gold"]) == {"2", "4"} and block["by_gold"]["4"]["n"] == 5
    assert (report["hybrid"]["fusion"], report["hybrid:bool"]["fusion"]) == ("rrf", "bool")
    assert report["hybrid:es_rrf"]["fusion"] == "rrf" and "licence" in report["hybrid:es_rrf"]["fusion_note"]
    assert report["bm25"]["fusion"] == "none"

    # the strategies' default mode over this index with vectors: hybrid, DualRAG's keywords BM25,
    # the setting where it is set (for DualRAG too)
    async def defaults(**settings: str) -> list[str]:
        values = {"es_url": [es8_node.url], "index_prefix": env["HOPSEARCH_INDEX_PREFIX"], "embedder": "minilm"}
        async with await Runtime.open(load_settings(**values, **settings)) as runtime:
            return [await runtime.retrieval_mode(name) for name in (None, "single", "deeprag", "dualrag")]

    assert asyncio.run(defaults()) == ["hybrid", "hybrid", "hybrid", "bm25"]
    assert asyncio.run(defaults(retrieval_mode="hybrid")) == ["hybrid"] * 4
    assert asyncio.run(defaults(retrieval_mode="bm25")) == ["bm25"] * 4

    # the table, and a strategy's retrieval over whole questions from its traces
    rows = tmp_path / "rows.jsonl"
    with ScriptedLLM(always_no) as llm:
        env_llm = {**env, "HOPSEARCH_LLM_BASE_URL": llm.base_url, "HOPSEARCH_LLM_MODEL": "scripted"}
        answered = runner.invoke(
            main, ["eval", str(SAMPLE), "--strategy", "single", "--limit", "6", "--out", str(rows)], env=env_llm
        )
    assert answered.exit_code == 0, answered.output
    table = runner.invoke(
        main, ["eval", "retrieval", str(SAMPLE), "--mode", "bm25", "-k", "5", "--traces", str(rows)], env=env
    )
    assert table.exit_code == 0, table.output
    assert "recall@5" in table.output and "strategy:single" in table.output and "2 gold" in table.output
    as_json = runner.invoke(
        main, ["eval", "retrieval", str(SAMPLE), "--mode", "bm25", "--traces", str(rows), "--json"], env=env
    )
    traced = json.loads(as_json.stdout[as_json.stdout.index("{") :])["strategy:single"]
    assert traced["n"] == 6 and traced["passages"] >= 3 and 0.0 < traced["recall@trace"] <= 1.0


def test_eval_retrieval_refuses_a_bad_mode_before_any_work() -> None:
    result = CliRunner().invoke(
        main,
        ["eval", "retrieval", str(SAMPLE), "--mode", "hybrid:linear"],
        env={"HOPSEARCH_ES_URL": "http://127.0.0.1:9"},
    )
    assert result.exit_code == 1 and "hybrid:linear" in result.output
