"""Elasticsearch dies in the middle of a DPR load: the load fails cleanly, the checkpoint survives,
the node comes back with its data and ``resume`` finishes with every passage exactly once."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from hopsearch.loaders.api import load_dpr
from hopsearch.loaders.checkpoint import read_checkpoint
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.errors import StoreError
from hopsearch.service.store import Store
from tests.conftest import EsNode, make_settings
from tests.loader_files import write_dpr

ROWS = 40_000


async def test_kill_elasticsearch_mid_load_then_resume(es8_node: EsNode, tmp_path: Path) -> None:
    if es8_node.process is None:
        pytest.skip("the 8.19 node is one of yours (HOPSEARCH_TEST_ES8_URL or --elasticsearch-port): never killed")
    path = tmp_path / "psgs_w100.tsv"
    write_dpr(path, ROWS, words=60)
    ckpt = tmp_path / "dpr.checkpoint.json"
    opts = LoadOptions(batch_size=250, workers=2, checkpoint=ckpt, dead_letter=tmp_path / "dpr.dl.jsonl")
    settings = make_settings(es8_node.url)
    store = await Store.connect(settings)
    load = asyncio.create_task(load_dpr(store, path, opts))
    try:
        while True:
            await asyncio.sleep(0.02)
            assert not load.done(), "the load finished before Elasticsearch could be killed"
            current = await asyncio.to_thread(read_checkpoint, ckpt)
            if current is not None and current.position > 2_000:
                break
        await asyncio.to_thread(es8_node.kill)
        with pytest.raises(StoreError) as failure:
            await asyncio.wait_for(load, timeout=120)  # fails, does not hang
        assert "--resume" in str(failure.value) and str(ckpt) in str(failure.value)
    finally:
        await store.close()
        if not load.done():
            load.cancel()

    saved = read_checkpoint(ckpt)
    assert saved is not None and not saved.done
    assert 2_000 < saved.position < ROWS + 1  # line numbers: the header is line 1
    assert saved.indexed == saved.read == saved.position - 1

    await asyncio.to_thread(es8_node.start)
    store = await Store.connect(settings)
    try:
        await store.refresh(saved.index)
        assert await store.count(saved.index) >= saved.indexed  # what ES acknowledged survived the kill
        report = await load_dpr(store, path, dataclasses.replace(opts, resume=True))
        assert report.resumed_from == saved.position
        assert (report.read, report.indexed, report.rejected, report.skipped) == (ROWS, ROWS, 0, 0)
        assert report.reconciled
        assert await store.count() == ROWS
        dupes = await store.search(
            settings.passages_alias,
            {"size": 0, "aggs": {"d": {"terms": {"field": "doc_id", "min_doc_count": 2, "size": 5}}}},
        )
        assert dupes["aggregations"]["d"]["buckets"] == []
        assert (await store.get_settings(saved.index))["refresh_interval"] == "1s"
    finally:
        await store.client.indices.delete(index=f"{settings.index_prefix}-*")
        await store.close()
