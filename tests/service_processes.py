"""Real ``hopsearch serve`` processes for the tests: this virtualenv's console script in its own session
(so the whole group, uvicorn's supervisor and its workers, can be stopped), its output in a log file,
configured only through its environment (every inherited ``HOPSEARCH_*`` variable is dropped)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from hopsearch.cli.local import esnode, process
from tests.api_fixtures import API_KEY


@dataclass(frozen=True)
class Served:
    url: str
    log: Path
    pid: int


def scripted_service(es_url: str, prefix: str, llm_url: str, **more: str) -> dict[str, str]:
    """The ``HOPSEARCH_*`` settings of a served process over ``prefix`` on ``es_url``, BM25 only, behind the
    tests' API key, answering with the scripted LLM at ``llm_url``; ``more`` adds or overrides."""
    return {
        "HOPSEARCH_ES_URL": es_url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_EMBEDDER": "none",
        "HOPSEARCH_API_KEYS": API_KEY,
        "HOPSEARCH_LLM_BASE_URL": llm_url,
        "HOPSEARCH_LLM_MODEL": "scripted",
        **more,
    }


def serve_env(values: Mapping[str, str]) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("HOPSEARCH_")}
    env.update(values)
    return env


@contextlib.contextmanager
def hopsearch_serve(env: Mapping[str, str], log: Path, *, workers: int = 1) -> Iterator[Served]:
    """``hopsearch serve --workers N`` on a free loopback port, until ``/_health/live`` answers."""
    port = esnode.free_port()
    script = Path(sys.executable).parent / "hopsearch"
    command = [str(script), "serve", "--port", str(port), "--workers", str(workers), "--log-level", "warning"]
    child = process.spawn(command, log, env=serve_env(env))
    url = f"http://127.0.0.1:{port}"
    try:
        process.wait_ready(
            child, lambda: process.probe(f"{url}/_health/live"), timeout=120, what="hopsearch serve", log_path=log
        )
        yield Served(url, log, child.pid)
    finally:
        process.stop_group(child.pid, timeout=15)


def process_figures(text: str) -> tuple[str, dict[str, float]]:
    """(pid, requests served by route template and status) from one ``/_metrics`` answer."""
    pid = ""
    served: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "hopsearch_process_info":
                pid = sample.labels["pid"]
            if sample.name == "hopsearch_http_requests_total":
                key = f"{sample.labels['method']} {sample.labels['route']} {sample.labels['status']}"
                served[key] = sample.value
    return pid, served
