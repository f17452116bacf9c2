"""Helpers of the three-node cluster tests: a cluster of one version (its members' specs), where an
index's shard copies are, a progress hook that kills a member mid-load, hopsearch served over the whole
cluster (a real uvicorn, a scripted LLM), and a stream of ``_retrieve`` requests that counts failures."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from hopsearch.cli.local import escluster, esnode
from hopsearch.service.api import create_app
from hopsearch.service.config.settings import Settings
from hopsearch.service.store import Store
from tests.api_fixtures import API_KEY, api_settings, load_passages, uvicorn_serving_async
from tests.conftest import CLUSTER_LINES
from tests.llm_fixtures import server_for


@dataclass
class Cluster:
    """A running cluster of one version (``label``, e.g. ``8.19``) and its members."""

    label: str
    specs: list[esnode.NodeSpec]

    @property
    def urls(self) -> list[str]:
        return [spec.url for spec in self.specs]

    def member(self, name: str) -> esnode.NodeSpec:
        return next(spec for spec in self.specs if spec.name == name)

    def report(self, line: str) -> None:
        """One line for the run's closing summary (and the captured output)."""
        text = f"{self.label}: {line}"
        CLUSTER_LINES.append(text)
        print(text)

    async def back(self) -> None:
        """Start every member that does not answer; wait until all are in and the cluster is green."""
        await asyncio.to_thread(escluster.start_cluster, self.specs, timeout=300)
        await asyncio.to_thread(escluster.wait_for_status, self.specs, timeout=300)


async def shard_nodes(store: Store, index: str) -> dict[str, list[str]]:
    """``p`` / ``r`` → names of the nodes holding a started primary / replica of ``index``."""
    response = await store.client.cat.shards(index=index, format="json", h="prirep,state,node")
    rows: list[dict[str, Any]] = getattr(response, "body", response)
    out: dict[str, list[str]] = {"p": [], "r": []}
    for row in rows:
        if row.get("state") == "STARTED" and row.get("node"):
            out[str(row["prirep"])].append(str(row["node"]))
    return out


async def master_name(store: Store) -> str:
    response = await store.client.cat.master(format="json", h="node")
    rows: list[dict[str, Any]] = getattr(response, "body", response)
    return str(rows[0]["node"])


class KillAt:
    """A load's progress hook that SIGKILLs ``victim`` once ``at`` positions are acknowledged: the rest of
    the load runs against a cluster with a member gone (the kill waits for the process to be gone)."""

    def __init__(self, victim: esnode.NodeSpec, at: int) -> None:
        self.victim = victim
        self.at = at
        self.killed_at: int | None = None

    def start(self, total: int | None, done: int, read: int) -> None:
        return None

    def update(self, done: int, read: int, indexed: int, rejected: int, skipped: int) -> None:
        if self.killed_at is None and indexed >= self.at:
            esnode.kill(self.victim)
            self.killed_at = indexed


@contextlib.asynccontextmanager
async def service(cluster: Cluster, script: Any, **overrides: Any) -> AsyncIterator[tuple[str, Settings, Store]]:
    """hopsearch under a real uvicorn with ``HOPSEARCH_ES_URL`` = every member, the sample passages loaded
    (one replica: the cluster has three data nodes) and every index green; yields (URL, settings, store)."""
    with server_for("vllm", script) as llm:
        settings = api_settings(cluster.urls[0], llm, **overrides).model_copy(update={"es_url": cluster.urls})
        store = await Store.connect(settings)
        try:
            await load_passages(store)
            for index in (settings.passages_alias, settings.traces_index, settings.outlines_index):
                assert (await store.wait_for_health(index, timeout_s=120))["status"] == "green", index
            async with uvicorn_serving_async(create_app(settings)) as url:
                yield url, settings, store
        finally:
            with contextlib.suppress(Exception):
                await store.client.indices.delete(index=f"{settings.index_prefix}-*", ignore_unavailable=True)
            await store.close()


def client(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"ApiKey {API_KEY}"}, timeout=120)


@dataclass
class RetrieveStream:
    """``workers`` loops of ``POST /<alias>/_retrieve`` until stopped; each answer is counted under the
    phase it ended in (``phase``, set by the test), as ``ok`` (200 with hits) or ``failed``."""

    http: httpx.AsyncClient
    alias: str
    workers: int = 2
    phase: str = "before"
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                response = await self.http.post(f"/{self.alias}/_retrieve", json={"query": "Lethal Weapon", "k": 3})
                ok = response.status_code == 200 and bool(response.json()["hits"]["hits"])
                why = "" if ok else f"{response.status_code} {response.text[:300]}"
            except httpx.HTTPError as exc:
                ok, why = False, f"{type(exc).__name__}: {exc}"
            self.counts.setdefault(self.phase, Counter())["ok" if ok else "failed"] += 1
            self.counts[self.phase]["slowest_ms"] = max(
                self.counts[self.phase]["slowest_ms"], round((time.monotonic() - began) * 1000)
            )
            if not ok:
                self.failures.append(f"[{self.phase}] {why}")
            await asyncio.sleep(0.1)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._loop()) for _ in range(self.workers)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    def total(self, what: str) -> int:
        return sum(counter[what] for counter in self.counts.values())
