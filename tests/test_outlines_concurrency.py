"""Outline saves and trace writes under concurrency, on real Elasticsearch 7.17 and 8.19.

Two separate worker processes (the way two service processes share an index) each save the same entity
ten times at once, every save with its own fact; optimistic concurrency (``if_seq_no`` /
``if_primary_term``, re-read and merge on 409) must keep all twenty facts. Plain read-merge-write loses
most of them.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from hopsearch.service.errors import VersionConflict
from hopsearch.service.outlines.model import EntityOutline
from hopsearch.service.outlines.store import EsOutlineStore
from hopsearch.service.store import Store
from hopsearch.service.traces.recorder import ElasticsearchTraceSink

#: One worker process: connect, say it is ready, wait for the go file, then save its facts all at once.
WORKER = r"""
import asyncio, sys, time
from datetime import UTC, datetime
from pathlib import Path
from hopsearch.service.outlines.store import EsOutlineStore
from hopsearch.service.outlines.model import EntityOutline, Fact
from hopsearch.service.config.settings import Settings
from hopsearch.service.store import Store

url, prefix, first, count, ready, go = sys.argv[1:]

async def main() -> None:
    store = await Store.connect(Settings(es_url=[url], index_prefix=prefix, embedder="none"))
    outlines = EsOutlineStore(store)
    await store.cluster_health()
    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.005)

    async def save(n: int) -> None:
        fact = Fact(f"fact number {n}", f"question {n}", "sub", (f"p-{n}",), "m", datetime.now(UTC), f"t-{n}")
        await outlines.save([EntityOutline("default", "Mark Robson", (f"alias {n}",), (fact,))])

    try:
        await asyncio.gather(*(save(n) for n in range(int(first), int(first) + int(count))))
    finally:
        await store.close()

asyncio.run(main())
"""


async def test_twenty_concurrent_saves_from_two_processes_lose_no_fact(store: Store, tmp_path: Path) -> None:
    await store.ensure_side_indices()
    url = store.settings.es_url[0]
    go = tmp_path / "go"
    readies = [tmp_path / f"ready-{i}" for i in range(2)]
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            WORKER,
            url,
            store.settings.index_prefix,
            str(10 * i),
            "10",
            str(ready),
            str(go),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        for i, ready in enumerate(readies)
    ]
    for _ in range(2400):
        if all(ready.exists() for ready in readies) or any(w.returncode is not None for w in workers):
            break
        await asyncio.sleep(0.05)
    go.touch()
    outputs = [(await w.communicate())[0].decode() for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    outline = await EsOutlineStore(store).get("default", "Mark Robson")
    assert outline is not None
    assert sorted(f.summary for f in outline.facts) == sorted(f"fact number {n}" for n in range(20))
    assert sorted(outline.aliases) == sorted(f"alias {n}" for n in range(20))


class StaleStore(Store):
    """A store whose reads always return the first version seen (every conditional write then loses)."""

    async def get_versioned(self, index: str, doc_id: str) -> tuple[dict[str, object], int, int] | None:
        found = await super().get_versioned(index, doc_id)
        return (found[0], 0, 1) if found else None


async def test_a_save_that_keeps_losing_gives_up_with_a_clear_error(store: Store) -> None:
    await store.ensure_side_indices()
    outlines = EsOutlineStore(store)
    await outlines.save([EntityOutline("default", "Mark Robson", ("first",))])
    await outlines.save([EntityOutline("default", "Mark Robson", ("second",))])  # seq_no moves past 0
    stale = EsOutlineStore(StaleStore(store.settings, store.client, store.info))
    try:
        await stale.save([EntityOutline("default", "Mark Robson", ("third",))])
    except VersionConflict as exc:
        assert exc.status == 409 and exc.details["attempts"] >= 2
        assert "Mark Robson" in str(exc) and "gave up" in str(exc)
    else:
        raise AssertionError("a save against a stale version must fail")
    outline = await outlines.get("default", "Mark Robson")
    assert outline is not None and outline.aliases == ("first", "second")


async def test_a_retried_trace_write_neither_duplicates_nor_overwrites(store: Store) -> None:
    await store.ensure_side_indices()
    sink = ElasticsearchTraceSink(store, store.settings.traces_index, refresh=True)
    await sink.write("trace-1", {"trace_id": "trace-1", "question": "first"})
    await sink.write("trace-1", {"trace_id": "trace-1", "question": "retry"})
    assert await store.count(store.settings.traces_index) == 1
    doc = await store.get_document(store.settings.traces_index, "trace-1")
    assert doc is not None and doc["question"] == "first" and not sink.pending
