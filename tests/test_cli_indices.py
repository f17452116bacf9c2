"""Index management through the CLI against the real Elasticsearch: `indices list|delete` and
`loads list|show` (a report per load under the state folder, with its dead-letter file)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from click.testing import CliRunner

from hopsearch.cli.main import main
from tests.conftest import EsNode


def test_indices_and_loads(es_node: EsNode, tmp_path: Path) -> None:
    prefix = f"ix{uuid.uuid4().hex[:8]}"
    env = {
        "HOPSEARCH_ES_URL": es_node.url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_EMBEDDER": "none",
        "HOPSEARCH_STATE_DIR": str(tmp_path / "state"),
    }
    source = tmp_path / "rows.jsonl"
    source.write_text(
        '{"id": "a", "title": "Glacier", "text": "Glacier facts"}\nnot json\n{"id": "b", "text": "x y"}\n'
    )
    runner = CliRunner()
    try:
        loaded = runner.invoke(main, ["index", "jsonl", str(source), "--quiet", "--allow-rejects"], env=env)
        assert loaded.exit_code == 0, loaded.output

        listed = runner.invoke(main, ["indices", "list", "--json"], env=env)
        assert listed.exit_code == 0, listed.output
        rows = {row["index"]: row for row in json.loads(listed.output)}
        assert set(rows) == {f"{prefix}-passages-v1", f"{prefix}-outlines", f"{prefix}-traces"}
        passages = rows[f"{prefix}-passages-v1"]
        assert passages["aliases"] == [f"{prefix}-passages"] and passages["documents"] == 2
        assert passages["meta"]["embedder"] is None and passages["meta"]["analyzer"]
        table = runner.invoke(main, ["indices", "list"], env=env)
        assert f"{prefix}-passages-v1" in table.output and "documents" in table.output

        past = runner.invoke(main, ["loads", "list", "--json"], env=env)
        assert past.exit_code == 0, past.output
        [load] = json.loads(past.output)
        assert load["report"]["read"] == 3 and load["report"]["rejected"] == 1 and load["dead_letters"] == 1
        assert Path(load["report"]["dead_letter"]).is_file()
        shown = runner.invoke(main, ["loads", "show", load["id"][:20]], env=env)
        assert shown.exit_code == 0 and "first rejections" in shown.output and "invalid JSON" in shown.output
        other = runner.invoke(main, ["loads", "list"], env={**env, "HOPSEARCH_INDEX_PREFIX": "someone-else"})
        assert "no loads recorded" in other.output

        kept = runner.invoke(main, ["indices", "delete", f"{prefix}-traces"], env=env, input="n\n")
        assert kept.exit_code == 1 and "Aborted" in kept.output
        outside = runner.invoke(main, ["indices", "delete", "other-index", "--yes"], env=env)
        assert outside.exit_code == 2 and "only its own indices" in outside.output
        by_alias = runner.invoke(main, ["indices", "delete", f"{prefix}-passages", "--yes"], env=env)
        assert by_alias.exit_code == 0 and f"{prefix}-passages-v1 (alias {prefix}-passages)" in by_alias.output
        left = {row["index"] for row in json.loads(runner.invoke(main, ["indices", "list", "--json"], env=env).output)}
        assert left == {f"{prefix}-outlines", f"{prefix}-traces"}
        everything = runner.invoke(main, ["indices", "delete", "--all"], env=env, input="y\n")
        assert everything.exit_code == 0 and "deleted 2 index(es)" in everything.output
        assert json.loads(runner.invoke(main, ["indices", "list", "--json"], env=env).output) == []
    finally:
        runner.invoke(main, ["indices", "delete", "--all", "--yes"], env=env)
