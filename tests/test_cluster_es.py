"""Real three-node Elasticsearch clusters on loopback, 8.19 and 7.17 (each started once for the module,
one after the other), and what hopsearch does when members die or restart:

1. a DPR load (the index has one replica) with a member SIGKILLed mid-load — a member without the load's
   shard: the load finishes; the member with its primary (a load runs without replicas): the load stops
   with a clear error and its checkpoint, and resumes once the member is back — exactly the expected
   count and no duplicates either way, no dead letters;
2. questions keep being answered through the HTTP service (a real uvicorn, ``HOPSEARCH_ES_URL`` = all
   three members, a scripted LLM) while the member holding the passages primary is down: every strategy
   answers, retrieval and trace writes go through the other members, the traces are there afterwards;
3. a rolling restart of all three members (stop, start, wait for green, one at a time) under a stream of
   ``_retrieve`` requests: no request fails (a restarting member costs the client a retry on another).

What each test counted goes to the run's closing summary ("Three-node clusters").
Runs in the default suite; ``HOPSEARCH_TEST_CLUSTER=0`` leaves it out while developing, never under
``CI=true``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hopsearch.cli.local import escluster, esnode
from hopsearch.loaders.api import load_dpr
from hopsearch.loaders.model import LoadOptions, LoadReport
from hopsearch.service.errors import HopsearchError, StoreError
from hopsearch.service.store import Store
from hopsearch.service.strategies import STRATEGIES
from tests.api_fixtures import QUESTION, any_strategy_model
from tests.cluster_fixtures import Cluster, KillAt, RetrieveStream, client, master_name, service, shard_nodes
from tests.conftest import ES_VERSIONS, IN_CI, _drop, make_settings
from tests.loader_files import write_dpr

pytestmark = pytest.mark.skipif(
    os.environ.get("HOPSEARCH_TEST_CLUSTER") == "0" and not IN_CI,
    reason="three-node cluster tests left out: HOPSEARCH_TEST_CLUSTER=0",
)
ROWS = 4000
BATCH = 100
#: What the load test changes from the defaults: a short request timeout (a write then waits at most half of
#: it for a lost primary before Elasticsearch answers 503: 5 s instead of 15). The service tests run on the
#: defaults (``es_max_retries`` 2: a member down costs a retry on the next one; 0 fails both tests).
CLIENT = {"es_max_retries": 3, "es_request_timeout": 10.0}


@pytest.fixture(scope="module", params=["8.19", "7.17"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    label = str(request.param)
    cache = Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "hopsearch"
    base = esnode.NodeSpec(
        version=ES_VERSIONS[label],
        port=escluster.free_base_port(3),
        node_dir=tmp_path_factory.mktemp(f"cluster{label}"),
        cache_dir=cache,
    )
    specs = escluster.cluster_specs(base, 3)
    try:
        escluster.start_cluster(specs, timeout=300)
    except HopsearchError as exc:
        pytest.fail(f"the three-node {label} cluster did not start: {exc}")
    try:
        yield Cluster(label, specs)
    finally:
        escluster.stop_cluster(specs)


async def _load(store: Store, tmp_path: Path, hook: KillAt | None, *, resume: bool = False) -> LoadReport:
    options = LoadOptions(
        checkpoint=tmp_path / "cp.json", dead_letter=tmp_path / "dl.jsonl", batch_size=BATCH, resume=resume
    )
    return await load_dpr(store, tmp_path / "psgs.tsv", options, embedder=None, progress=hook)


async def _exact(store: Store, index: str) -> tuple[int, int, list[str]]:
    """(count, distinct doc_ids, doc_ids held by more than one document) of ``index``; the cardinality is
    exact at this size (below its precision threshold)."""
    await store.refresh(index)
    aggs = {
        "ids": {"cardinality": {"field": "doc_id", "precision_threshold": 40000}},
        "twice": {"terms": {"field": "doc_id", "min_doc_count": 2, "size": 10}},
    }
    found = (await store.search(index, {"size": 0, "aggs": aggs}))["aggregations"]
    twice = [str(bucket["key"]) for bucket in found["twice"]["buckets"]]
    return await store.count(index), int(found["ids"]["value"]), twice


@pytest.mark.parametrize("cluster", ["8.19"], indirect=True)
@pytest.mark.parametrize("victim", ["a member without the shard", "the member with the primary"])
async def test_a_member_killed_mid_load_loses_and_duplicates_nothing(
    cluster: Cluster, tmp_path: Path, victim: str
) -> None:
    await cluster.back()  # whole and green, whatever an earlier test left
    store = await Store.connect(make_settings(cluster.urls[0], es_url=cluster.urls, **CLIENT))
    try:
        assert await store.passages_replicas() == 1
        write_dpr(tmp_path / "psgs.tsv", ROWS)
        index = await store.ensure_indices()
        primary = (await shard_nodes(store, index))["p"][0]
        others = [spec for spec in cluster.specs if spec.name != primary]
        target = cluster.member(primary) if victim.startswith("the member with") else others[0]
        was_master = target.name == await master_name(store)
        hook = KillAt(target, at=ROWS // 4)
        try:
            report = await _load(store, tmp_path, hook)
            path = "finished"
        except StoreError as exc:
            # Elasticsearch waited for the lost primary (half the request timeout), then said so: the load
            # stopped with its checkpoint, no document dead-lettered. The member comes back; the load resumes.
            assert "--resume" in str(exc) and "unavailable_shards_exception" in str(exc), exc
            assert not (tmp_path / "dl.jsonl").exists() or not (tmp_path / "dl.jsonl").read_text().strip()
            await cluster.back()
            report = await _load(store, tmp_path, None, resume=True)
            assert report.resumed_from > 0
            path = f"resumed from position {report.resumed_from}"
        assert hook.killed_at is not None and hook.killed_at < ROWS
        cluster.report(
            f"load of {ROWS} DPR rows, {victim} ({target.name}{', the master' if was_master else ''}) killed "
            f"after {hook.killed_at} acknowledged: {path}"
        )
        assert path.startswith("resumed" if victim.startswith("the member with") else "finished")
        assert report.reconciled and (report.read, report.indexed, report.rejected) == (ROWS, ROWS, 0)
        assert await _exact(store, index) == (ROWS, ROWS, [])
        await cluster.back()
        assert (await store.wait_for_health(index, timeout_s=120))["status"] == "green"
        assert await _exact(store, index) == (ROWS, ROWS, [])
    finally:
        await _drop(store)
        await store.close()


async def test_questions_are_answered_while_a_member_is_down(cluster: Cluster) -> None:
    await cluster.back()
    async with service(cluster, any_strategy_model) as (url, settings, store):
        alias = settings.passages_alias
        index = await store.passages_index()
        assert index is not None
        victim = cluster.member((await shard_nodes(store, index))["p"][0])
        traces_primary = (await shard_nodes(store, settings.traces_index))["p"][0]
        await asyncio.to_thread(esnode.kill, victim)
        trace_ids: list[str] = []
        async with client(url) as http:
            for n, name in enumerate([*STRATEGIES, *STRATEGIES]):
                answer = await http.post(f"/{alias}/_ask", json={"question": f"{QUESTION} ({n})", "strategy": name})
                assert answer.status_code == 200, (name, answer.text)
                body = answer.json()
                assert body["answer"] and body["trace_stored"] is True, (name, body)
                trace_ids.append(body["trace_id"])
                found = await http.post(f"/{alias}/_retrieve", json={"query": "Richard Donner", "k": 2})
                assert found.status_code == 200 and found.json()["hits"]["hits"], found.text
            await cluster.back()
            for trace_id in trace_ids:
                stored = await http.get(f"/_traces/{trace_id}")
                assert stored.status_code == 200 and stored.json()["found"], stored.text
        await store.refresh(settings.traces_index)
        assert await store.count(settings.traces_index) == len(trace_ids)
        cluster.report(
            f"{len(trace_ids)} questions ({', '.join(STRATEGIES)}) answered and traced with {victim.name} "
            f"(passages primary; traces primary on {traces_primary}) down; all {len(trace_ids)} traces there after"
        )


async def test_a_rolling_restart_fails_no_retrieve_request(cluster: Cluster) -> None:
    await cluster.back()
    async with service(cluster, any_strategy_model) as (url, settings, _store), client(url) as http:
        stream = RetrieveStream(http, settings.passages_alias)
        stream.start()
        try:
            await asyncio.sleep(1.0)
            for spec in cluster.specs:
                stream.phase = f"{spec.name} stopping"
                await asyncio.to_thread(esnode.stop, spec)
                stream.phase = f"{spec.name} down"
                await asyncio.to_thread(esnode.launch, spec)
                await asyncio.to_thread(escluster.wait_answering, spec)
                stream.phase = f"{spec.name} rejoining"
                await asyncio.to_thread(escluster.wait_for_status, cluster.specs, timeout=300)
            stream.phase = "after"
            await asyncio.sleep(1.0)
        finally:
            await stream.stop()
    phases = "; ".join(f"{phase}: {dict(counts)}" for phase, counts in stream.counts.items())
    cluster.report(
        f"rolling restart of 3 members under a _retrieve stream: {stream.total('ok')} answered, "
        f"{stream.total('failed')} failed ({phases})"
    )
    assert stream.failures == [], stream.failures[:5]
    for spec in cluster.specs:  # the stream really ran while each member was away
        assert stream.counts[f"{spec.name} down"]["ok"] > 0, stream.counts
