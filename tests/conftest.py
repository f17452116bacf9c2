"""Shared fixtures: real Elasticsearch nodes (7.17, 8.19 and 9.2 integ-test-zips) and stores over them.

The nodes start once per session, in parallel, as an unprivileged uid on loopback, each in its own
temporary folder (9.x on a Java 21+ JDK: ``esnode.find_java``). ``HOPSEARCH_TEST_ES7_URL`` /
``HOPSEARCH_TEST_ES8_URL`` / ``HOPSEARCH_TEST_ES9_URL`` point the suite at nodes that are already
running instead (quicker while developing). Tests on ``es_node`` (and ``store``) run once per version;
the run's closing lines name the versions the nodes reported and how the tests on each ended.

Under ``CI=true`` an Elasticsearch that cannot be obtained FAILS the tests that need it; elsewhere
those tests are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from hopsearch.cli.local import esnode
from hopsearch.service.config.settings import Settings
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.errors import HopsearchError
from hopsearch.service.store import Store

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ES_VERSIONS = {"7.17": "7.17.29", "8.19": "8.19.21", "9.2": "9.2.4"}
#: label → what the node reported ("<version> at <url>, started here|external") or why it is missing
NODE_REPORTS: dict[str, str] = {}
#: label → outcome → number of tests that used the node
OUTCOMES: dict[str, dict[str, int]] = {}
_LABELS_OF: dict[str, list[str]] = {}
#: What the three-node cluster tests measured (which path a load took, failed requests…), for the summary.
CLUSTER_LINES: list[str] = []
#: The bundled 2WikiMultihopQA slice (24 questions with their context paragraphs; loaders/data/NOTICE.md).
SAMPLE_QUESTIONS = Path(__file__).resolve().parents[1] / "loaders" / "data" / "sample_2wiki.jsonl"


def unavailable(reason: str) -> None:
    """Fail under CI, skip elsewhere."""
    if IN_CI:
        pytest.fail(f"required resource missing under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass
class EsNode:
    """A running test node; ``spec`` is ``None`` for an external node (not ours to kill)."""

    label: str
    url: str
    spec: esnode.NodeSpec | None

    @property
    def major(self) -> int:
        return int(self.label.split(".")[0])

    @property
    def knn(self) -> bool:
        """8.x and 9.x search vectors with kNN; the 7.17 integ-test-zip has no vectors (client-side rerank)."""
        return self.major >= 8

    def kill(self) -> None:
        assert self.spec is not None, "external node: cannot kill"
        esnode.kill(self.spec)

    def start(self) -> None:
        assert self.spec is not None, "external node: cannot start"
        esnode.start(self.spec)


@pytest.fixture(scope="session")
def es_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, EsNode | str]]:
    """The nodes, started in parallel. A value that is a string is the reason a node is missing."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "hopsearch"
    base = tmp_path_factory.mktemp("es")
    nodes: dict[str, EsNode | str] = {}
    specs: dict[str, esnode.NodeSpec] = {}
    for label, version in ES_VERSIONS.items():
        external = os.environ.get(f"HOPSEARCH_TEST_ES{label.split('.')[0]}_URL")
        if external:
            nodes[label] = EsNode(label, external.rstrip("/"), None)
            continue
        specs[label] = esnode.NodeSpec(
            version=version, port=esnode.free_port(), node_dir=base / label, cache_dir=cache, heap="512m"
        )

    def boot(label: str) -> tuple[str, EsNode | str]:
        try:
            esnode.start(specs[label], timeout=240)
        except (HopsearchError, OSError) as exc:
            return label, f"Elasticsearch {label} could not start: {exc}"
        return label, EsNode(label, specs[label].url, specs[label])

    with ThreadPoolExecutor(max_workers=max(1, len(specs))) as pool:
        nodes.update(dict(pool.map(boot, list(specs))))
    for label, node in nodes.items():
        if isinstance(node, str):
            NODE_REPORTS[label] = f"missing: {node.splitlines()[0]}"
            continue
        info = esnode.ping(node.url, timeout=10) or {}
        origin = "external" if node.spec is None else "started here"
        NODE_REPORTS[label] = f"{info.get('version')} at {node.url}, {origin}"
    yield nodes
    for spec in specs.values():
        esnode.stop(spec)


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
