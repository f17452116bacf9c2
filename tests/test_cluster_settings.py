"""Cluster-aware index settings on the single test nodes: shards and replicas of the passages index
(settings and CLI), the default replica count, and a load that drops replicas and restores them."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from hopsearch.cli.main import main
from hopsearch.loaders.api import load_dpr
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.errors import StoreError
from hopsearch.service.store import Store
from tests.conftest import EsNode, make_settings
from tests.loader_files import write_dpr


async def test_the_passages_body_carries_the_configured_shards_and_replicas(store: Store) -> None:
    assert store.passages_body(None)["settings"]["number_of_shards"] == 1
    assert store.passages_body(None)["settings"]["number_of_replicas"] == 0
    wide = Store(make_settings(store.settings.es_url[0], passages_shards=3, passages_replicas=2), None, store.info)
    body = wide.passages_body(None)
    assert (body["settings"]["number_of_shards"], body["settings"]["number_of_replicas"]) == (3, 2)
    assert wide.passages_body(None, replicas=1)["settings"]["number_of_replicas"] == 1


async def test_one_data_node_gets_no_replica_by_default(store: Store) -> None:
    assert (await store.cluster_health())["number_of_data_nodes"] == 1
    assert await store.passages_replicas() == 0
    index = await store.ensure_indices(None)
    assert (await store.get_settings(index))["number_of_replicas"] == "0"
    health = await store.wait_for_health(index, timeout_s=30)
    assert health["status"] == "green" and not health["timed_out"]


async def test_a_load_drops_replicas_and_restores_the_configured_count(es_node: EsNode, tmp_path: Path) -> None:
    settings = make_settings(es_node.url, passages_shards=2, passages_replicas=1)
    async with await Store.connect(settings) as store:
        try:
            path = tmp_path / "psgs.tsv"
            write_dpr(path, 300)
            options = LoadOptions(checkpoint=tmp_path / "cp.json", dead_letter=tmp_path / "dead.jsonl", batch_size=100)
            report = await load_dpr(store, path, options, embedder=None)
            assert report.indexed == 300 and report.reconciled
            index = await store.passages_index()
            assert index is not None
            values = await store.get_settings(index)
            assert (values["number_of_shards"], values["number_of_replicas"]) == ("2", "1")
            assert values.get("refresh_interval") != "-1"
            # One node cannot hold the replica: yellow is what "placed where it can be" means here.
            health = await store.wait_for_health(index, timeout_s=30)
            assert health["status"] == "yellow" and not health["timed_out"]
            assert await store.count(index) == 300
        finally:
            await store.client.indices.delete(index=f"{settings.index_prefix}-*")


async def test_a_load_waits_for_the_copies_es_wait_for_active_shards_asks_for(es_node: EsNode, tmp_path: Path) -> None:
    """``2`` on one node: the load keeps the replica that a second copy needs (it cannot be placed here),
    every ``_bulk`` waits for two active copies, Elasticsearch answers 503 after the write timeout (half
    the request timeout) and the load stops with that error and its checkpoint, nothing dead-lettered.
    ``all`` (every copy there is; a load has none but the primary) loads."""
    settings = make_settings(es_node.url, es_wait_for_active_shards="2", es_request_timeout=4)
    path = tmp_path / "psgs.tsv"
    write_dpr(path, 300)
    dead = tmp_path / "dead.jsonl"
    async with await Store.connect(settings) as store:
        try:
            options = LoadOptions(checkpoint=tmp_path / "cp.json", dead_letter=dead, batch_size=100)
            with pytest.raises(StoreError) as stopped:
                await load_dpr(store, path, options, embedder=None)
            assert "unavailable_shards_exception" in str(stopped.value) and "--resume" in str(stopped.value)
            assert not dead.exists() or not dead.read_text().strip()
            index = await store.passages_index()
            assert index is not None and (await store.get_settings(index))["number_of_replicas"] == "0"
            every = make_settings(es_node.url, es_wait_for_active_shards="all", index_prefix=settings.index_prefix)
            async with await Store.connect(every) as all_copies:
                options = LoadOptions(checkpoint=tmp_path / "cp2.json", dead_letter=dead, batch_size=100)
                report = await load_dpr(all_copies, path, options, embedder=None)
            assert (report.indexed, report.rejected) == (300, 0) and await store.count(index) == 300
        finally:
            await store.client.indices.delete(index=f"{settings.index_prefix}-*")


def test_init_takes_shards_and_replicas(es_node: EsNode, tmp_path: Path) -> None:
    prefix = f"cl{uuid.uuid4().hex[:8]}"
    env = {
        "HOPSEARCH_ES_URL": es_node.url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_STATE_DIR": str(tmp_path / "state"),
        "HOPSEARCH_EMBEDDER": "none",
    }
    try:
        result = CliRunner().invoke(main, ["init", "--no-embed", "--shards", "2", "--replicas", "0"], env=env)
        assert result.exit_code == 0, result.output
        got = httpx.get(f"{es_node.url}/{prefix}-passages/_settings").json()
        index_settings = next(iter(got.values()))["settings"]["index"]
        assert (index_settings["number_of_shards"], index_settings["number_of_replicas"]) == ("2", "0")
    finally:
        httpx.delete(f"{es_node.url}/{prefix}-*")
