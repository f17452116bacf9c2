"""`hopsearch eval retrieval` on questions over indexed documents (``supporting`` = file names, the shape of
``tests/data/ja_questions.jsonl``): the records parse, bad ones name their line, and the CLI scores the
Japanese test corpus loaded by `index docs` (BM25 over SudachiPy tokens) on 7.17, 8.19 and 9.2."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from hopsearch.cli.main import main
from hopsearch.loaders.questions import read_questions
from hopsearch.service.errors import InputError
from hopsearch.service.evaluation.documents import files_found
from hopsearch.service.evaluation.recall import GoldItem, score_titles
from hopsearch.service.types import make_hit
from tests.conftest import EsNode
from tests.ja_corpus import QUESTIONS, build_corpus
from tests.scripted_llm import ScriptedLLM, ScriptRequest


def always_no(request: ScriptRequest) -> str:
    return " no"


def test_docs_records_parse_and_match_by_file_name(tmp_path: Path) -> None:
    records = read_questions(QUESTIONS)
    assert len(records) == 30 and {r.dataset for r in records} == {"docs"}
    first = records[0]
    assert first.supporting == ("project-kazaguruma.md", "hr-transfer-2025-10.html") and first.answers == (
        "物流システム部長",
    )
    item = GoldItem("q", "?", "", frozenset(first.supporting), by="file")
    hits = [
        make_hit("a", 1.0, "t", "x", {"path": "/data/docs/project-kazaguruma.md"}),
        make_hit("b", 1.0, "t", "y", {}),
    ]
    assert item.names(hits) == ["project-kazaguruma.md", ""] and score_titles(item, item.names(hits)).recall == 0.5
    assert files_found((frozenset({"a-0", "a-1"}), frozenset({"b-0"})), ["a-1", "x-0"]) == 0.5
    assert files_found((), ["a-1"]) is None
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q1", "supporting": ["a.md"]}\n{"question": "q2", "supporting": "a.md"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl.*2.*supporting"):
        read_questions(bad)


def test_eval_retrieval_scores_supporting_documents(es_node: EsNode, tmp_path: Path) -> None:
    env = {
        "HOPSEARCH_ES_URL": es_node.url,
        "HOPSEARCH_INDEX_PREFIX": f"erd{uuid.uuid4().hex[:8]}",
        "HOPSEARCH_EMBEDDER": "none",
        "HOPSEARCH_STATE_DIR": str(tmp_path / "state"),
        "COLUMNS": "200",
    }
    runner = CliRunner()
    corpus = build_corpus(tmp_path / "ja")
    try:
        loaded = runner.invoke(main, ["index", "docs", str(corpus), "--quiet"], env=env)
        assert loaded.exit_code == 0, loaded.output
        result = runner.invoke(main, ["eval", "retrieval", str(QUESTIONS), "-k", "5", "--json"], env=env)
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout[result.stdout.index("{") :])
        assert list(report) == ["bm25"]
        block = report["bm25"]
        # every question needs two documents; SudachiPy BM25 finds most of them in the top 5, not all
        assert block["n"] == 30 and block["by_gold"]["2"]["n"] == 30
        assert 0.8 <= block["recall@5"] < 1.0 and block["all@5"] <= block["recall@5"]
        table = runner.invoke(main, ["eval", "retrieval", str(QUESTIONS), "-k", "1", "--markdown"], env=env)
        assert table.exit_code == 0 and "| bm25 |" in table.output
        one = json.loads(
            runner.invoke(main, ["eval", "retrieval", str(QUESTIONS), "-k", "1", "--json"], env=env).stdout
        )["bm25"]
        assert one["recall@1"] <= 0.5 and one["all@1"] == 0.0  # one passage names one document

        # a strategy's evidence: the supporting documents among the passages it cited and retrieved
        rows = tmp_path / "rows.jsonl"
        with ScriptedLLM(always_no) as llm:
            env_llm = {**env, "HOPSEARCH_LLM_BASE_URL": llm.base_url, "HOPSEARCH_LLM_MODEL": "scripted"}
            answered = runner.invoke(
                main,
                ["eval", str(QUESTIONS), "--strategy", "single", "--limit", "4", "--out", str(rows), "--json"],
                env=env_llm,
            )
        assert answered.exit_code == 0, answered.output
        summary = json.loads(answered.stdout[answered.stdout.index("{") :])["all"]
        per_row = [json.loads(line) for line in rows.read_text(encoding="utf-8").splitlines()]
        recalls = [r["evidence_recall"] for r in per_row]
        assert all(r in (0.0, 0.5, 1.0) for r in recalls) and sum(recalls) >= 3  # of 2 documents each
        assert summary["evidence_recall"] == sum(recalls) / 4
        traced = runner.invoke(main, ["eval", "retrieval", str(QUESTIONS), "--traces", str(rows), "--json"], env=env)
        assert traced.exit_code == 0, traced.output
        trace = json.loads(traced.stdout[traced.stdout.index("{") :])["strategy:single"]
        assert trace["n"] == 4 and trace["recall@trace"] >= summary["evidence_recall"]
    finally:
        httpx.delete(f"{es_node.url}/{env['HOPSEARCH_INDEX_PREFIX']}-*", timeout=60)
