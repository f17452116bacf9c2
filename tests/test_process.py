"""``cli/local/process.py``: the one way local servers are started, probed and stopped — over real processes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hopsearch.cli.local.esnode import free_port
from hopsearch.cli.local.process import alive, probe, spawn, stop_group, wait_ready
from hopsearch.service.errors import NodeError


def test_a_server_is_started_probed_until_ready_and_stopped(tmp_path: Path) -> None:
    (tmp_path / "ready.json").write_text(json.dumps({"status": "green"}))
    port = free_port()
    command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)]
    process = spawn(command, tmp_path / "server.log")
    try:
        url = f"http://127.0.0.1:{port}"
        found = wait_ready(
            process,
            lambda: probe(f"{url}/ready.json"),
            timeout=60,
            what="http.server",
            log_path=tmp_path / "server.log",
        )
        assert found == {"status": "green"} and alive(process.pid)
        assert probe(f"{url}/missing.json") is None  # 404: not ready
    finally:
        assert stop_group(process.pid, timeout=10)
    assert not alive(process.pid) and probe(f"http://127.0.0.1:{port}/ready.json", timeout=0.5) is None
    assert not stop_group(process.pid, timeout=1)  # already gone


def test_a_server_that_exits_fails_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    process = spawn([sys.executable, "-c", "import sys; print('bad model file'); sys.exit(3)"], log)
    with pytest.raises(NodeError, match=r"(?s)exited with 3.*bad model file"):
        wait_ready(process, lambda: None, timeout=60, what="the server", log_path=log)
