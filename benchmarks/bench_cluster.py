"""Cluster benchmark: ``_retrieve`` through one service process vs two, and a DPR load on one node vs three.

    .venv/bin/python benchmarks/bench_cluster.py [--rows 100000] [--seconds 15] [--clients 16] [--port 19640]

One run, in this order:

1. Starts a three-node Elasticsearch 8.19 cluster (``hopsearch.cli.local.escluster``, 256m heaps, HTTP ports
   ``--port``…``--port+2``) and one single node (``--port+5``, 256m heap), each in a temporary folder.
2. Load: the same generated DPR file (``--rows`` passages, benchmarks/bench_load.py's generator, BM25 only)
   with ``hopsearch index dpr FILE --no-embed`` (a subprocess) into the single node (1 shard, 0 replicas)
   and into the cluster (3 shards, one replica restored after the load and waited for: the time includes
   building the replicas). Rows/s = rows / the loader's wall time.
3. ``_retrieve``: against the cluster's index, ``--clients`` concurrent clients (keep-alive, 3-word
   queries, k = 10) for ``--seconds`` through ONE ``hopsearch serve`` process, then through TWO (two
   processes on two ports, half the clients each: what two replicas behind a balancer see). Requests/s,
   median latency, and how many each process served (from its own ``/_metrics``).
4. Stops every node and process it started.

On a 2-core machine every process (clients, service, nodes) shares the same two cores: the ratios say
what this machine allows, not what a cluster of real machines does (docs/capacity.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_load import VOCAB, generate  # noqa: E402
from hopsearch.cli.local import escluster, esnode, process  # noqa: E402
from tests.service_processes import process_figures, serve_env  # noqa: E402

VERSION = "8.19.21"
PREFIX = "benchcluster"


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "hopsearch"


def load(urls: list[str], path: Path, rows: int, state: Path, shards: int, replicas: int) -> float:
    """``hopsearch index dpr`` in a subprocess; returns rows/s over its wall time."""
    env = serve_env(
        {
            "HOPSEARCH_ES_URL": ",".join(urls),
            "HOPSEARCH_INDEX_PREFIX": PREFIX,
            "HOPSEARCH_STATE_DIR": str(state),
            "HOPSEARCH_EMBEDDER": "none",
            "HOPSEARCH_PASSAGES_SHARDS": str(shards),
            "HOPSEARCH_PASSAGES_REPLICAS": str(replicas),
        }
    )
    command = [str(Path(sys.executable).parent / "hopsearch"), "index", "dpr", str(path), "--no-embed", "--quiet"]
    began = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, check=False)
    took = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"load failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    count = int(httpx.get(f"{urls[0]}/{PREFIX}-passages/_count", timeout=60).json()["count"])
    if count != rows:
        raise RuntimeError(f"loaded {count} rows, expected {rows}")
    return rows / took


@contextlib.contextmanager
def services(urls: list[str], count: int, logs: Path, port: int) -> Iterator[list[str]]:
    """``count`` ``hopsearch serve`` processes on ports ``port``, ``port+1``, …"""
    env = {"HOPSEARCH_ES_URL": ",".join(urls), "HOPSEARCH_INDEX_PREFIX": PREFIX, "HOPSEARCH_EMBEDDER": "none"}
    script = str(Path(sys.executable).parent / "hopsearch")
    children = []
    try:
        for n in range(count):
            command = [script, "serve", "--port", str(port + n), "--log-level", "warning"]
            log = logs / f"serve-{port + n}.log"
            children.append(process.spawn(command, log, env=serve_env(env)))
            url = f"http://127.0.0.1:{port + n}"
            process.wait_ready(
                children[-1], lambda u=url: process.probe(f"{u}/_health/live"), timeout=120, what="serve", log_path=log
            )
        yield [f"http://127.0.0.1:{port + n}" for n in range(count)]
    finally:
        for child in children:
            process.stop_group(child.pid, timeout=15)


async def drive(urls: list[str], clients: int, seconds: float) -> tuple[int, int, float, list[float]]:
    """(answered, failed, seconds, latencies): ``clients`` loops, spread over ``urls`` in turn."""
    rng = random.Random(5)
    latencies: list[float] = []
    failed = 0
    deadline = 0.0

    async def client(url: str, http: httpx.AsyncClient) -> None:
        nonlocal failed
        while time.perf_counter() < deadline:
            body = {"query": " ".join(rng.choices(VOCAB, k=3)), "k": 10}
            began = time.perf_counter()
            response = await http.post(f"{url}/{PREFIX}-passages/_retrieve", json=body)
            if response.status_code == 200:
                latencies.append(time.perf_counter() - began)
            else:
                failed += 1

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=30, limits=limits) as http:
        for url in urls:  # warm up each process (its runtime, the node caches)
            for _ in range(20):
                await http.post(f"{url}/{PREFIX}-passages/_retrieve", json={"query": "the film", "k": 10})
        began = time.perf_counter()
        deadline = began + seconds
        await asyncio.gather(*(client(urls[n % len(urls)], http) for n in range(clients)))
        took = time.perf_counter() - began
        served = [process_figures((await http.get(f"{url}/_metrics")).text) for url in urls]
    per_process = [int(figures.get("POST /{index}/_retrieve 200", 0)) for _, figures in served]
    print(f"    served per process (incl. 20 warm-up each): {per_process}", flush=True)
    return len(latencies), failed, took, latencies


def retrieve_runs(urls: list[str], args: argparse.Namespace, logs: Path) -> dict[int, float]:
    rates: dict[int, float] = {}
    for count in (1, 2):
        with services(urls, count, logs, args.port + 10) as served:
            cpu = os.times()
            answered, failed, took, latencies = asyncio.run(drive(served, args.clients, args.seconds))
            client_cpu = sum(os.times()[:2]) - sum(cpu[:2])
        rates[count] = answered / took
        median = statistics.median(latencies) * 1000 if latencies else float("nan")
        print(
            f"  {count} service process(es): {rates[count]:,.0f} requests/s ({answered} in {took:.1f} s, "
            f"{failed} failed), median {median:.1f} ms, client {client_cpu:.1f} CPU-s",
            flush=True,
        )
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--port", type=int, default=19640, help="first HTTP port (cluster: port..port+2)")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        work = Path(tmp)
        base = esnode.NodeSpec(version=VERSION, port=args.port, node_dir=work / "cluster", cache_dir=cache_dir())
        members = escluster.cluster_specs(base, 3)
        single = esnode.NodeSpec(
            version=VERSION, port=args.port + 5, node_dir=work / "single", cache_dir=cache_dir(), heap="256m"
        )
        for spec in [*members, single]:
            if esnode.ping(spec.url) is not None:
                raise SystemExit(f"port {spec.port} is taken: choose another --port")
        path = work / "psgs.tsv"
        generate(path, args.rows)
        try:
            began = time.perf_counter()
            escluster.start_cluster(members)
            esnode.start(single, timeout=240)
            print(f"nodes up in {time.perf_counter() - began:.0f} s (3-node cluster + 1 single node, 256m heaps)")
            urls = [spec.url for spec in members]
            print(f"DPR load of {args.rows:,} passages (hopsearch index dpr --no-embed):", flush=True)
            one = load([single.url], path, args.rows, work / "state-1", shards=1, replicas=0)
            print(f"  1 node  (1 shard, 0 replicas):                      {one:,.0f} rows/s", flush=True)
            three = load(urls, path, args.rows, work / "state-3", shards=3, replicas=1)
            print(f"  3 nodes (3 shards, 1 replica built after the load): {three:,.0f} rows/s", flush=True)
            print(f"  ratio 3 nodes / 1 node: {three / one:.2f}")
            print(f"_retrieve, {args.clients} clients, {args.seconds:g} s each, against the 3-node cluster:")
            rates = retrieve_runs(urls, args, work)
            print(f"  ratio 2 processes / 1: {rates[2] / rates[1]:.2f}")
        finally:
            escluster.stop_cluster(members)
            esnode.stop(single)
    print(
        "(2 cores shared by clients, service processes and nodes: the ratios are this machine's, see docs/capacity.md)"
    )


if __name__ == "__main__":
    main()
