"""``hopsearch index … --rebuild`` keeps an operator's aliases on the passages index (issue 40 item 10): on a
real 8.19 node, ``corp-all`` (with a filter) is added to the concrete passages version by hand, a rebuild
deletes that version, and ``corp-all`` then names the new version with its filter, and the load says so."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from hopsearch.cli.main import main
from tests.conftest import EsNode


def test_a_rebuild_moves_an_operators_alias_to_the_new_version(
    es8_node: EsNode, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"ra{uuid.uuid4().hex[:8]}"
    url, corp = es8_node.url, f"{prefix}-corp-all"
    env = {
        "HOPSEARCH_ES_URL": url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_STATE_DIR": str(tmp_path / "state"),
        "HOPSEARCH_EMBEDDER": "none",
    }
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "T", "text": f"river {i}"}) + "\n" for i in range(3))
    )
    runner = CliRunner()
    try:
        first = runner.invoke(main, ["index", "jsonl", str(corpus), "--quiet"], env=env)
        assert first.exit_code == 0, first.output
        old = next(iter(httpx.get(f"{url}/_alias/{prefix}-passages").json()))
        only = {"term": {"doc_id": "d1"}}
        action = {"add": {"index": old, "alias": corp, "filter": only}}
        assert httpx.post(f"{url}/_aliases", json={"actions": [action]}).status_code == 200
        with caplog.at_level(logging.WARNING):
            again = runner.invoke(main, ["index", "jsonl", str(corpus), "--rebuild", "--quiet"], env=env)
        assert again.exit_code == 0, again.output
        assert httpx.head(f"{url}/{old}").status_code == 404  # the old version is gone
        held = httpx.get(f"{url}/_alias/{corp}")
        assert held.status_code == 200, held.text
        (new, spec), *_ = held.json().items()
        assert new != old and new == next(iter(httpx.get(f"{url}/_alias/{prefix}-passages").json()))
        assert spec["aliases"][corp].get("filter") == only
        assert any(corp in r.getMessage() and "moved" in r.getMessage() for r in caplog.records), caplog.text
    finally:
        httpx.delete(f"{url}/{prefix}-*", timeout=60)
