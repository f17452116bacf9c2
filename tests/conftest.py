"""Shared fixtures: real Elasticsearch nodes (7.17 and 8.19 integ-test-zips) and stores over them.

The nodes start once per session, in parallel, as an unprivileged uid on loopback, each in its own
temporary folder. ``HOPSEARCH_TEST_ES7_URL`` / ``HOPSEARCH_TEST_ES8_URL`` point the suite at nodes
that are already running instead (quicker while developing).

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

from hopsearch.cli import esnode
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.errors import HopsearchError
from hopsearch.service.settings import Settings
from hopsearch.service.store import Store

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ES_VERSIONS = {"7.17": "7.17.29", "8.19": "8.19.21"}
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

    def kill(self) -> None:
        assert self.spec is not None, "external node: cannot kill"
        esnode.kill(self.spec)

    def start(self) -> None:
        assert self.spec is not None, "external node: cannot start"
        esnode.start(self.spec)


@pytest.fixture(scope="session")
def es_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, EsNode | str]]:
    """Both nodes, started in parallel. A value that is a string is the reason a node is missing."""
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

    with ThreadPoolExecutor(max_workers=2) as pool:
        nodes.update(dict(pool.map(boot, list(specs))))
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
