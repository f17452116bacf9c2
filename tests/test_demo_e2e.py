"""`hopsearch demo` end to end: a fresh local Elasticsearch and llama.cpp server of its own, the
bundled corpus, a deeprag answer with its trace stored in Elasticsearch; then a fast idempotent
re-run and `--down`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from hopsearch.cli.local.esnode import free_port
from tests.conftest import unavailable

pytestmark = pytest.mark.e2e

HOPSEARCH = str(Path(sys.executable).parent / "hopsearch")


def run(env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HOPSEARCH, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


def test_demo_end_to_end(tmp_path: Path) -> None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        unavailable("llama-cpp-python is not installed (pip install -e '.[llm]')")
    env = dict(os.environ)
    env.update(
        {
            "HOPSEARCH_STATE_DIR": str(tmp_path / "state"),
            "HOPSEARCH_ES_PORT": str(free_port()),
            "HOPSEARCH_LLM_PORT": str(free_port()),
            "HOPSEARCH_INDEX_PREFIX": "demo",
            "COLUMNS": "200",
        }
    )
    for key in ("HOPSEARCH_ES_URL", "HOPSEARCH_LLM_BASE_URL", "HOPSEARCH_CONFIG"):
        env.pop(key, None)
    try:
        first = run(env, "demo")
        assert first.returncode == 0, first.stdout + first.stderr
        out = first.stdout
        assert "Elasticsearch 8.19" in out and "green" in out
        assert "llama.cpp server" in out
        indexed = re.search(r"sample corpus: (\d+) passages indexed, (\d+) already there", out)
        assert indexed and int(indexed.group(1)) > 100 and indexed.group(2) == "0", out
        assert "asking with deeprag" in out and "answer:" in out and "decisions:" in out
        assert "hopsearch demo --down" in out
        trace_id = re.search(r"trace ([0-9a-f]{32})", out)
        assert trace_id, out
        es_url = f"http://127.0.0.1:{env['HOPSEARCH_ES_PORT']}"
        with urllib.request.urlopen(f"{es_url}/demo-traces/_doc/{trace_id.group(1)}") as response:
            doc = json.loads(response.read())["_source"]
        assert doc["strategy"] == "deeprag"
        assert doc["question"].startswith("What is the date of death of the director of film Song Of The Gringo")
        assert doc["steps"] and any(step.get("decision") for step in doc["steps"])
        assert doc["totals"]["llm_calls"] == sum(step["llm_calls"] for step in doc["steps"]) >= 1
        assert doc["totals"]["tokens_out"] == sum(step["tokens_out"] for step in doc["steps"]) > 0

        again = run(env, "demo")
        assert again.returncode == 0, again.stdout + again.stderr
        assert re.search(r"sample corpus: 0 passages indexed, \d+ already there", again.stdout), again.stdout
    finally:
        down = run(env, "demo", "--down", timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "LLM server: stopped" in down.stdout and "Elasticsearch: stopped" in down.stdout
