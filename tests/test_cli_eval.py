"""`hopsearch eval` through click's runner: a real Elasticsearch, the bundled 2Wiki questions' contexts as
the corpus, a scripted OpenAI-compatible model that answers from the retrieved context."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from click.testing import CliRunner

from hopsearch.cli.main import main
from tests.conftest import EsNode
from tests.scripted_llm import ScriptedLLM, ScriptRequest


def answer_yes_or_first_title(request: ScriptRequest) -> str:
    # A "model" that answers comparison questions "no" and others with nothing useful.
    return " no" if "same country" in request.prompt else " I do not know"


def test_eval_scores_writes_rows_and_traces(es8_node: EsNode, sample_questions_path: Path, tmp_path: Path) -> None:
    prefix = f"ev{uuid.uuid4().hex[:8]}"
    out = tmp_path / "rows.jsonl"
    with ScriptedLLM(answer_yes_or_first_title) as server:
        env = {
            "HOPSEARCH_ES_URL": es8_node.url,
            "HOPSEARCH_INDEX_PREFIX": prefix,
            "HOPSEARCH_EMBEDDER": "none",
            "HOPSEARCH_LLM_BASE_URL": server.base_url,
            "HOPSEARCH_LLM_MODEL": "scripted",
            "COLUMNS": "200",
            "HOPSEARCH_STATE_DIR": str(tmp_path / "state"),
        }
        args = ["eval", str(sample_questions_path), "--strategy", "single", "--limit", "3", "--corpus-from-context"]
        result = CliRunner().invoke(main, [*args, "--out", str(out), "--concurrency", "2"], env=env)
    assert result.exit_code == 0, result.output
    assert re.search(r"corpus: indexed \d+ context passages \(0 already present; 0 rejected", result.output)
    assert [p.name.split(".")[-2:] for p in sorted((tmp_path / "state" / "loads").iterdir())] == [
        ["checkpoint", "json"],
        ["deadletter", "jsonl"],
    ]
    assert "single on sample_2wiki.jsonl" in result.output and "bridge_comparison" in result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and {r["type"] for r in rows} <= {"bridge_comparison", "compositional", "comparison"}
    first = next(r for r in rows if r["question"].startswith("Are both directors of films Baby Face Morgan"))
    assert (first["prediction"], first["gold"], first["em"], first["f1"]) == ("no", ["no"], 1.0, 1.0)
    assert all(r["retrievals"] == 1 and r["llm_calls"] >= 1 and r["tokens_in"] > 0 for r in rows)
    assert all(len(r["trace_id"]) == 32 and r["error"] is None for r in rows)
    # the summary as JSON agrees with the rows
    with ScriptedLLM(answer_yes_or_first_title) as server:
        env["HOPSEARCH_LLM_BASE_URL"] = server.base_url
        again = CliRunner().invoke(
            main, [*args[:-1], "--json", "--out", str(tmp_path / "again.jsonl")], env=env, catch_exceptions=False
        )
    assert again.exit_code == 0, again.output
    summary = json.loads(again.output[again.output.index("{") :])
    assert summary["all"]["n"] == 3 and summary["all"]["em"] == sum(r["em"] for r in rows) / 3


def test_eval_names_a_bad_question_file(tmp_path: Path) -> None:
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"question": "x", "answer": "y", "context": []}\n{"oops": 1}\n')
    result = CliRunner().invoke(main, ["eval", str(bad)], env={"HOPSEARCH_ES_URL": "http://127.0.0.1:9"})
    assert result.exit_code == 1
    assert f"{bad}:2" in result.output and "not a HotpotQA" in result.output
