"""A real three-node Elasticsearch 8.19 cluster on loopback (started once for the module).

Runs in the default suite (about 45 s on two cores); ``HOPSEARCH_TEST_CLUSTER=0`` leaves it out while
developing, never under ``CI=true``.
A DPR load survives a data node killed mid-load (finished, or resumed once the node is back: exactly the
expected count, no duplicates); with the replica restored, reads and trace writes go on through the other
nodes while one is down.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hopsearch.cli import escluster, esnode
from hopsearch.loaders.api import load_dpr
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.errors import HopsearchError
from hopsearch.service.store import Store
from tests.conftest import ES_VERSIONS, IN_CI, _drop, make_settings
from tests.loader_files import write_dpr

pytestmark = pytest.mark.skipif(
    os.environ.get("HOPSEARCH_TEST_CLUSTER") == "0" and not IN_CI,
    reason="three-node cluster tests left out: HOPSEARCH_TEST_CLUSTER=0",
)
ROWS = 3000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[esnode.NodeSpec]]:
    cache = Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "hopsearch"
    base = esnode.NodeSpec(
        version=ES_VERSIONS["8.19"],
        port=esnode.free_port(),
        node_dir=tmp_path_factory.mktemp("cluster"),
        cache_dir=cache,
    )
    specs = escluster.cluster_specs(base, 3)
    try:
        escluster.start_cluster(specs, timeout=300)
    except HopsearchError as exc:
        pytest.fail(f"the three-node cluster did not start: {exc}")
    yield specs
    escluster.stop_cluster(specs)


async def test_a_node_killed_mid_load_loses_and_duplicates_nothing(
    cluster: list[esnode.NodeSpec], tmp_path: Path
) -> None:
    urls = [spec.url for spec in cluster]
    settings = make_settings(urls[0], es_url=urls, es_max_retries=3)
    store = await Store.connect(settings)
    try:
        assert await store.passages_replicas() == 1
        path = tmp_path / "psgs.tsv"
        write_dpr(path, ROWS)
        options = LoadOptions(checkpoint=tmp_path / "cp.json", dead_letter=tmp_path / "dl.jsonl", batch_size=200)
        load = asyncio.create_task(load_dpr(store, path, options, embedder=None))
        await asyncio.sleep(1.0)
        esnode.kill(cluster[2])
        try:
            report = await load
        except HopsearchError:
            # The load runs without replicas: a killed node may take a primary with it. Bring it back, resume.
            escluster.start_cluster(cluster, timeout=300)
            resumed = LoadOptions(
                checkpoint=tmp_path / "cp.json", dead_letter=tmp_path / "dl.jsonl", batch_size=200, resume=True
            )
            report = await load_dpr(store, path, resumed, embedder=None)
        assert report.reconciled and report.rejected == 0
        index = await store.passages_index()
        assert index is not None
        await store.refresh(index)
        assert await store.count(index) == ROWS
        ids = await store.search(index, {"size": 0, "aggs": {"ids": {"cardinality": {"field": "doc_id"}}}})
        assert ids["aggregations"]["ids"]["value"] == ROWS

        # With the replica restored, a node down costs nothing: reads and trace writes use the other two.
        escluster.start_cluster(cluster, timeout=300)
        assert (await store.wait_for_health(index, timeout_s=120))["status"] == "green"
        await store.ensure_side_indices()
        esnode.kill(cluster[2])
        for n in range(10):
            found = await store.search(index, {"size": 1, "query": {"match_all": {}}})
            assert found["hits"]["hits"]
            assert await store.create_document(settings.traces_index, f"t-{n}", {"trace_id": f"t-{n}"})
    finally:
        await _drop(store)
        await store.close()
