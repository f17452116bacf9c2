"""CLI commands through click's runner against the real Elasticsearch: config, init, search,
traces, es status, doctor."""

from __future__ import annotations

import json
import uuid

from click.testing import CliRunner

from hopsearch.cli.main import main
from tests.conftest import EsNode


def env_for(node: EsNode, prefix: str) -> dict[str, str]:
    return {"HOPSEARCH_ES_URL": node.url, "HOPSEARCH_INDEX_PREFIX": prefix, "HOPSEARCH_EMBEDDER": "none"}


def test_config_show_masks_secrets() -> None:
    result = CliRunner().invoke(main, ["config", "show"], env={"HOPSEARCH_ES_API_KEY": "s3cr3t-key"})
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["es_api_key"] == "**********"
    assert "s3cr3t-key" not in result.output


def test_init_search_and_traces(es_node: EsNode) -> None:
    prefix = f"cli{uuid.uuid4().hex[:8]}"
    env = env_for(es_node, prefix)
    runner = CliRunner()
    result = runner.invoke(main, ["init", "--no-embed"], env=env)
    assert result.exit_code == 0, result.output
    assert f"passages index {prefix}-passages-v1" in result.output
    # index two passages straight into ES, then search them through the CLI
    import urllib.request

    for doc_id, title in (("a1", "Glacier"), ("a2", "Desert")):
        body = json.dumps({"title": title, "text": f"{title} facts and figures", "source": "jsonl"}).encode()
        request = urllib.request.Request(
            f"{es_node.url}/{prefix}-passages/_doc/{doc_id}?refresh=true",
            data=body,
            method="PUT",
            headers={"content-type": "application/json"},
        )
        urllib.request.urlopen(request).read()
    result = runner.invoke(main, ["search", "glacier", "--json"], env=env)
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert found["mode"] == "bm25" and [h["_id"] for h in found["hits"]] == ["a1"]

    result = runner.invoke(main, ["traces", "show", "nope"], env=env)
    assert result.exit_code == 1 and "no trace 'nope'" in result.output
    result = runner.invoke(main, ["search", "x", "--mode", "dense"], env=env)
    assert result.exit_code == 1 and "embedder" in result.output.lower()


def test_search_reports_unreachable_elasticsearch() -> None:
    result = CliRunner().invoke(main, ["search", "x"], env={"HOPSEARCH_ES_URL": "http://127.0.0.1:9"})
    assert result.exit_code == 1
    assert "not reachable" in result.output


def test_es_status_reports_not_running(tmp_path: object) -> None:
    result = CliRunner().invoke(
        main, ["es", "status"], env={"HOPSEARCH_ES_PORT": "9", "HOPSEARCH_STATE_DIR": str(tmp_path)}
    )
    assert result.exit_code == 1 and "not running" in result.output


def test_es_up_status_down_as_this_user(tmp_path: object) -> None:
    """`hopsearch es up|status|down` on a node of its own (the suite runs as root in CI)."""
    from hopsearch.cli.local.esnode import free_port

    env = {
        "HOPSEARCH_ES_PORT": str(free_port()),
        "HOPSEARCH_STATE_DIR": str(tmp_path),
        "HOPSEARCH_ES_VERSION": "7.17.29",
    }
    runner = CliRunner()
    try:
        up = runner.invoke(main, ["es", "up"], env=env)
        assert up.exit_code == 0, up.output
        assert "Elasticsearch 7.17.29 is up" in up.output
        status = runner.invoke(main, ["es", "status", "--json"], env=env)
        assert status.exit_code == 0, status.output
        assert json.loads(status.output)["running"] is True
    finally:
        down = runner.invoke(main, ["es", "down"], env=env)
    assert down.exit_code == 0 and "stopped Elasticsearch 7.17.29" in down.output
    after = runner.invoke(main, ["es", "status"], env=env)
    assert after.exit_code == 1
