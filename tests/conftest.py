"""Shared fixtures: real Elasticsearch nodes (7.17, 8.19 and 9.2 integ-test-zips) and stores over them.

The nodes come through the ``pytest-elasticsearch`` plugin and start once per session, in parallel.
The 8.19 and 9.2 nodes are its process executor (``ElasticSearchExecutor``: the node's command line,
pid file, data and log folders, start, wait until it answers, kill, restart, stop), made as its
``elasticsearch_proc`` factory makes one (free ports from ``port_for``, a ``pytest-elasticsearch-*``
temporary folder, the plugin's ``elasticsearch_cluster_name`` / ``elasticsearch_index_store_type``
settings) but started side by side and given :data:`START_TIMEOUT`: the factory's fixtures start one
after another with 60 s each, which a 9.2 node on a loaded machine overruns. The executor's
``executable`` is a two-line script made at run time that runs ``tests/es_executable.py``: the cached
zip's ``bin/elasticsearch`` as an unprivileged uid on the JDK that version runs on (9.x on Java 21+),
as ``hopsearch es up`` runs it (``esnode.command``). The plugin refuses versions below 8.0, so the 7.17
node is started by the project's launcher (``esnode.start``) and handed to the tests through the
plugin's no-process fixture (``es7_noproc``: ``elasticsearch_noproc``).

Your own nodes instead (quicker while developing; the nodes of that version are then not started):

- ``HOPSEARCH_TEST_ES7_URL`` / ``HOPSEARCH_TEST_ES8_URL`` / ``HOPSEARCH_TEST_ES9_URL``: one URL per version;
- the plugin's ``--elasticsearch-host`` / ``--elasticsearch-port`` (or the ``elasticsearch_host`` /
  ``elasticsearch_port`` ini settings): one node, used for the major version it reports (through the
  plugin's ``elasticsearch_nooproc`` fixture). A ``HOPSEARCH_TEST_ES*_URL`` of the same version wins.

Tests on ``es_node`` (and ``store``) run once per version; the run's closing lines name the versions the
nodes reported and how the tests on each ended. Tests that kill and restart a node (``EsNode.kill`` /
``EsNode.start``) need one this run started; a node of your own is never killed.

Under ``CI=true`` an Elasticsearch that cannot be obtained FAILS the tests that need it; elsewhere
those tests are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from mirakuru import ProcessExitedWithError
from port_for import get_port
from pytest_elasticsearch import factories
from pytest_elasticsearch.config import get_config
from pytest_elasticsearch.executor import ElasticSearchExecutor, NoopElasticsearch

from hopsearch.cli.local import esnode
from hopsearch.service.config.settings import Settings
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.errors import HopsearchError
from hopsearch.service.store import Store

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ES_VERSIONS = {"7.17": "7.17.29", "8.19": "8.19.21", "9.2": "9.2.4"}
#: label → what the node reported ("<version> at <url>, <origin>") or why it is missing
NODE_REPORTS: dict[str, str] = {}
#: label → outcome → number of tests that used the node
OUTCOMES: dict[str, dict[str, int]] = {}
_LABELS_OF: dict[str, list[str]] = {}
#: What the three-node cluster tests measured (which path a load took, failed requests…), for the summary.
CLUSTER_LINES: list[str] = []
#: The bundled 2WikiMultihopQA slice (24 questions with their context paragraphs; loaders/data/NOTICE.md).
SAMPLE_QUESTIONS = Path(__file__).resolve().parents[1] / "loaders" / "data" / "sample_2wiki.jsonl"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "hopsearch"
#: The executables handed to pytest-elasticsearch, written by ``es_nodes`` (this process's own folder).
EXECUTABLES = Path(tempfile.gettempdir()) / f"hopsearch-es-bin-{os.getpid()}"
#: The 7.17 node's port, fixed when its no-process fixture is made (the launcher starts it there).
ES7_PORT = esnode.free_port()

es7_noproc = factories.elasticsearch_noproc(host="127.0.0.1", port=ES7_PORT)
#: The versions the plugin's executor starts (it refuses 7.x).
BY_PLUGIN = ("8.19", "9.2")
#: Seconds a node may take to answer (start and restart); three JVMs on two busy cores need minutes.
START_TIMEOUT = 240


def unavailable(reason: str) -> None:
    """Fail under CI, skip elsewhere."""
    if IN_CI:
        pytest.fail(f"required resource missing under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass
class EsNode:
    """A running test node; ``process`` is what started it: the plugin's executor, the launcher's spec
    (7.17), or ``None`` for a node of one's own (not ours to kill)."""

    label: str
    url: str
    process: ElasticSearchExecutor | esnode.NodeSpec | None
    origin: str = "started here"

    @property
    def major(self) -> int:
        return int(self.label.split(".")[0])

    @property
    def knn(self) -> bool:
        """8.x and 9.x search vectors with kNN; the 7.17 integ-test-zip has no vectors (client-side rerank)."""
        return self.major >= 8

    def kill(self) -> None:
        """SIGKILL the node's process group (crash simulation)."""
        assert self.process is not None, "external node: cannot kill"
        if isinstance(self.process, esnode.NodeSpec):
            esnode.kill(self.process)
        else:
            self.process.kill()

    def start(self) -> None:
        """Start the killed node again on its ports and data; return once it is yellow."""
        assert self.process is not None, "external node: cannot start"
        if isinstance(self.process, esnode.NodeSpec):
            esnode.start(self.process, timeout=240)
        else:
            self.process.start()


def _write_executables() -> None:
    """The ``executable`` of each executor: ``tests/es_executable.py`` of that version, on this interpreter."""
    EXECUTABLES.mkdir(exist_ok=True)
    script = Path(__file__).with_name("es_executable.py")
    for label in BY_PLUGIN:
        path = EXECUTABLES / f"elasticsearch-{label}"
        path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" {ES_VERSIONS[label]} "$@"\n')
        path.chmod(0o755)


class _Executor(ElasticSearchExecutor):
    """The plugin's executor, asking ``GET /_cluster/health?wait_for_status=yellow`` whether the node is
    up instead of ``HEAD /``: an integ-test-zip has no ``/`` (its ``rest-root`` module is left out: 405)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.url = urlsplit(f"http://{self.host}:{self.port}/_cluster/health?wait_for_status=yellow&timeout=1s")
        self.method = "GET"


def _executor(request: pytest.FixtureRequest, folder: Path, label: str) -> ElasticSearchExecutor:
    """The plugin's executor for the node of ``label``, on loopback, as ``elasticsearch_proc`` makes one."""
    config = get_config(request)
    port = get_port(None)
    transport = get_port(None, exclude_ports=[port])
    assert port is not None and transport is not None
    return _Executor(
        EXECUTABLES / f"elasticsearch-{label}",
        "127.0.0.1",
        port,
        transport,
        folder / f"elasticsearch.{port}.pid",
        folder / "logs",
        folder / f"workdir_{port}",
        config.cluster_name or f"elasticsearch_cluster_{port}",
        "127.0.0.1",
        config.index_store_type,
        timeout=START_TIMEOUT,
    )


def _from_plugin(request: pytest.FixtureRequest, folder: Path, label: str) -> EsNode | str:
    """The node of ``label`` started by the plugin's executor, or why it could not start (with the
    tail of its console)."""
    try:
        proc = _executor(request, folder, label)
        proc.start()
        node = EsNode(label, f"http://{proc.host}:{proc.port}", proc, "started here by pytest-elasticsearch")
        return node
    except Exception as exc:  # the plugin's and mirakuru's own errors (version, timeout, exited)
        console = folder / "console.log"
        tail = console.read_text(errors="replace")[-1500:] if console.is_file() else ""
        return f"Elasticsearch {label} could not start: {type(exc).__name__}: {exc}\n{tail}"


def _own_node(request: pytest.FixtureRequest) -> EsNode | None:
    """The node ``--elasticsearch-host/--elasticsearch-port`` name, labelled by the major it reports."""
    if get_config(request).port is None:
        return None
    noop: NoopElasticsearch = request.getfixturevalue("elasticsearch_nooproc")
    url = f"http://{noop.host}:{noop.port}"
    version = str((esnode.ping(url, timeout=10) or {}).get("version") or "")
    label = next((lb for lb in ES_VERSIONS if version.startswith(lb.split(".")[0] + ".")), None)
    if label is None:
        raise pytest.UsageError(f"--elasticsearch-port: no Elasticsearch 7, 8 or 9 answers at {url} ({version!r})")
    return EsNode(label, url, None, "yours (--elasticsearch-port)")


def _launch_es7(base: Path) -> EsNode | str:
    """The 7.17 node, started by the project's launcher on ``ES7_PORT``."""
    spec = esnode.NodeSpec(version=ES_VERSIONS["7.17"], port=ES7_PORT, node_dir=base, cache_dir=CACHE, heap="512m")
    try:
        esnode.start(spec, timeout=240)
    except (HopsearchError, OSError) as exc:
        return f"Elasticsearch 7.17 could not start: {exc}"
    return EsNode("7.17", spec.url, spec, "started here by the launcher, via elasticsearch_noproc")


@pytest.fixture(scope="session")
def es_nodes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, EsNode | str]]:
    """The nodes (a value that is a string is the reason a node is missing)."""
    nodes: dict[str, EsNode | str] = {}
    for label in ES_VERSIONS:
        external = os.environ.get(f"HOPSEARCH_TEST_ES{label.split('.')[0]}_URL")
        if external:
            nodes[label] = EsNode(label, external.rstrip("/"), None, "external")
    own = _own_node(request)
    if own is not None:
        nodes.setdefault(own.label, own)
    _write_executables()
    starts = {
        label: (_launch_es7, (tmp_path_factory.mktemp("es7"),))
        if label == "7.17"
        else (_from_plugin, (request, tmp_path_factory.mktemp(f"pytest-elasticsearch-{label}"), label))
        for label in ES_VERSIONS
        if label not in nodes
    }
    with ThreadPoolExecutor(max_workers=max(1, len(starts))) as pool:
        started = {label: pool.submit(fn, *args) for label, (fn, args) in starts.items()}
        nodes.update({label: future.result() for label, future in started.items()})
    if isinstance(nodes["7.17"], EsNode) and isinstance(nodes["7.17"].process, esnode.NodeSpec):
        noop: NoopElasticsearch = request.getfixturevalue("es7_noproc")  # the plugin's view of it
        assert nodes["7.17"].url == f"http://{noop.host}:{noop.port}"
    for label in ES_VERSIONS:
        node = nodes[label]
        if isinstance(node, str):
            NODE_REPORTS[label] = f"missing: {node.splitlines()[0]}"
            continue
        info = esnode.ping(node.url, timeout=10) or {}
        NODE_REPORTS[label] = f"{info.get('version')} at {node.url}, {node.origin}"
    yield nodes
    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(_stop, [node for node in nodes.values() if isinstance(node, EsNode)]))
    shutil.rmtree(EXECUTABLES, ignore_errors=True)


def _stop(node: EsNode) -> None:
    """Stop a node this run started (the executor's data folder goes with it, as the plugin's fixture does)."""
    if isinstance(node.process, esnode.NodeSpec):
        esnode.stop(node.process)
    elif isinstance(node.process, ElasticSearchExecutor):
        with contextlib.suppress(ProcessExitedWithError):
            node.process.stop()
        shutil.rmtree(node.process.works_path, ignore_errors=True)


@pytest.fixture(scope="session", params=list(ES_VERSIONS))
def es_node(request: pytest.FixtureRequest, es_nodes: dict[str, EsNode | str]) -> EsNode:
    node = es_nodes[request.param]
    if isinstance(node, str):
        unavailable(node)
        raise AssertionError("unreachable")
    return node


@pytest.fixture(scope="session")
def es8_node(es_nodes: dict[str, EsNode | str]) -> EsNode:
    """The 8.19 node alone (for tests that need kNN or that only need one server)."""
    node = es_nodes["8.19"]
    if isinstance(node, str):
        unavailable(node)
        raise AssertionError("unreachable")
    return node


@pytest.fixture(scope="session")
def minilm() -> MiniLMEmbedder:
    try:
        embedder = MiniLMEmbedder()
        embedder.embed_sync(["warm up"])
    except HopsearchError as exc:
        unavailable(f"local embedder: {exc}")
    return embedder


def make_settings(url: str, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "es_url": [url],
        "index_prefix": f"t{uuid.uuid4().hex[:10]}",
        "embedder": "none",
        "vector_cache_mb": 0,  # no vectors from earlier runs (a test that wants the cache names its own folder)
        "seed": False,  # the strategies' own loops; seeded runs have their tests (test_seed_es.py)
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


async def _drop(store: Store) -> None:
    prefix = store.settings.index_prefix
    with contextlib.suppress(Exception):
        await store.client.indices.delete(index=f"{prefix}-*", allow_no_indices=True, ignore_unavailable=True)


@pytest.fixture
async def store(es_node: EsNode) -> AsyncIterator[Store]:
    """A connected store on a fresh index prefix (indices not created yet), per ES version."""
    st = await Store.connect(make_settings(es_node.url))
    try:
        yield st
    finally:
        await _drop(st)
        await st.close()


@pytest.fixture
async def store8(es8_node: EsNode) -> AsyncIterator[Store]:
    """Like ``store``, on the 8.19 node only."""
    st = await Store.connect(make_settings(es8_node.url))
    try:
        yield st
    finally:
        await _drop(st)
        await st.close()


@pytest.fixture(scope="session")
def sample_questions_path() -> Path:
    """The bundled question file (in the repository: tests never read outside it)."""
    assert SAMPLE_QUESTIONS.is_file(), SAMPLE_QUESTIONS
    return SAMPLE_QUESTIONS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        labels = []
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "es_node" in callspec.params:
            labels.append(str(callspec.params["es_node"]))
        if "es8_node" in getattr(item, "fixturenames", ()) and "8.19" not in labels:
            labels.append("8.19")
        if labels:
            _LABELS_OF[item.nodeid] = labels


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        for label in _LABELS_OF.get(report.nodeid, []):
            counts = OUTCOMES.setdefault(label, {})
            counts[report.outcome] = counts.get(report.outcome, 0) + 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The closing lines: the Elasticsearch versions this run actually tested against (and what the
    three-node cluster tests counted)."""
    if CLUSTER_LINES:
        terminalreporter.section("Three-node clusters")
        for line in CLUSTER_LINES:
            terminalreporter.write_line(line)
    if not _LABELS_OF:
        return
    terminalreporter.section("Elasticsearch versions tested")
    for label in ES_VERSIONS:
        counts = OUTCOMES.get(label, {})
        outcome = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "no tests ran"
        terminalreporter.write_line(f"{label}: {NODE_REPORTS.get(label, 'not started')} — {outcome}")
