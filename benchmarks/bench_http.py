"""Latency of ``POST /{index}/_retrieve`` through the service against the same query sent straight to
Elasticsearch, and sustained requests/s at 16 concurrent clients, as ratios to Elasticsearch direct.

Loopback only; bounded in count and time; stops by itself. It indexes a small synthetic corpus under a
fresh index prefix on the Elasticsearch at ``--es-url`` (deleted afterwards), starts ``hopsearch serve``
as a separate process on a free loopback port, and measures with keep-alive HTTP clients::

    .venv/bin/python benchmarks/bench_http.py --es-url http://127.0.0.1:9200 \
        [--compare ../other-checkout/.venv/bin/python]   # "before": another checkout's service, same run
        [--floor]   # the least any Python service can cost: benchmarks/floor_server.py

Every side is measured interleaved (A B C A B C … for latency, rounds of A B C for throughput) so load
from elsewhere hits all alike. CPU per request of each process is printed where /proc allows (the
benchmark client, each service, and the Elasticsearch node when it runs here): on a small machine the
service, the node and the client share the cores, which caps the throughput ratio (see the numbers).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from hopsearch.service.config.settings import load_settings
from hopsearch.service.retrieval import bm25_body
from hopsearch.service.store import Store
from hopsearch.service.types import RetrievalQuery

WORDS = [
    "river",
    "castle",
    "film",
    "director",
    "novel",
    "war",
    "king",
    "queen",
    "city",
    "music",
    "album",
    "band",
    "football",
    "season",
    "election",
    "president",
    "company",
    "bridge",
    "mountain",
    "island",
    "painter",
    "poet",
    "science",
    "theory",
    "battle",
    "empire",
    "church",
    "school",
]
KEY = "bench-key"


def corpus(size: int, rng: random.Random) -> list[dict[str, Any]]:
    return [
        {
            "title": " ".join(rng.choices(WORDS, k=3)).title(),
            "text": " ".join(rng.choices(WORDS, k=80)),
            "source": "jsonl",
            "doc_id": f"d{i}",
        }
        for i in range(size)
    ]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of a process (Linux /proc), None where unknown."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def listening_pid(port: int) -> int | None:
    """The process listening on a loopback TCP port (Linux /proc; None elsewhere or when not readable)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                return int(proc.name)
        except OSError:
            continue
    return None


@dataclass
class Side:
    """One thing measured: Elasticsearch direct or a service (a ``hopsearch serve`` process)."""

    name: str
    client: httpx.AsyncClient
    url: str
    bodies: list[dict[str, Any]]
    pid: int | None = None
    latencies: list[float] = field(default_factory=list)
    loaded: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)


async def timed(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    response = await client.post(url, json=body)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.text[:300]}")
    return elapsed


async def concurrent(
    client: httpx.AsyncClient, url: str, bodies: list[dict[str, Any]], workers: int, budget_s: float
) -> tuple[float, list[float]]:
    queue = list(reversed(bodies))
    stop = time.monotonic() + budget_s
    latencies: list[float] = []

    async def worker() -> None:
        while queue and time.monotonic() < stop:
            latencies.append(await timed(client, url, queue.pop()))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return time.perf_counter() - started, latencies


async def loaded_round(side: Side, workers: int, budget_s: float, es_pid: int | None) -> None:
    """One throughput round of a side; its wall time, latencies and the CPU each process spent."""
    pids = {"bench client": os.getpid(), "service": side.pid, "elasticsearch": es_pid}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    seconds, latencies = await concurrent(side.client, side.url, side.bodies * 4, workers, budget_s)
    side.seconds += seconds
    side.loaded += latencies
    for name, pid in pids.items():
        start, end = before[name], cpu_seconds(pid)
        if start is not None and end is not None:
            side.cpu[name] = side.cpu.get(name, 0.0) + end - start


FLOOR = str(Path(__file__).with_name("floor_server.py"))


async def start_service(python: str, env: dict[str, str], port: int, floor: bool) -> asyncio.subprocess.Process:
    """``hopsearch serve`` under ``python`` (or the floor server: :mod:`floor_server`)."""
    cli = [python, FLOOR] if floor else [python, "-c", "from hopsearch.cli.main import main; main()", "serve"]
    cli += [] if floor else ["--log-level", "warning"]
    return await asyncio.create_subprocess_exec(*cli, env={**env, "HOPSEARCH_API_PORT": str(port)})


async def wait_ready(client: httpx.AsyncClient, server: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if (await client.get("/_health")).status_code in (200, 503):
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or server.returncode is not None:
            raise RuntimeError("hopsearch serve did not start")
        await asyncio.sleep(0.2)


def report(sides: list[Side], docs: int, version: str, args: argparse.Namespace, load: str) -> None:
    es, services = sides[0], sides[1:]
    print(
        f"corpus: {docs} passages, Elasticsearch {version}, {len(es.latencies)} sequential requests per side; "
        f"load average at the start {load}, at the end {_load()}"
    )
    print(f"{'':38}{'p50 ms':>9}{'p95 ms':>9}{'mean ms':>9}{'p50 ratio':>11}")
    p50_es = pct(es.latencies, 0.5)
    for side in sides:
        p50 = pct(side.latencies, 0.5)
        print(
            f"{side.name:38}{p50:9.2f}{pct(side.latencies, 0.95):9.2f}{statistics.fmean(side.latencies):9.2f}"
            f"{p50 / p50_es:10.2f}x"
        )
    es_rps = len(es.loaded) / es.seconds
    print(f"sustained at {args.concurrency} concurrent clients ({args.rounds} interleaved rounds):")
    for side in sides:
        rps = len(side.loaded) / side.seconds
        cpu = ", ".join(f"{name} {seconds * 1000 / len(side.loaded):.2f}" for name, seconds in side.cpu.items())
        print(
            f"  {side.name:36}{rps:7.0f} req/s ({rps / es_rps:.2f}x), p50 {pct(side.loaded, 0.5):.1f} ms, "
            f"p95 {pct(side.loaded, 0.95):.1f} ms; CPU ms per request: {cpu}"
        )
    if es.pid is not None:
        print("  (the node's CPU counts every request it served meanwhile: other users of a shared node too)")
    for side in services:
        p50_ratio = pct(side.latencies, 0.5) / p50_es
        rps_ratio = len(side.loaded) / side.seconds / es_rps
        print(
            f"{side.name}: p50 {p50_ratio:.2f}x of Elasticsearch direct (target <= 1.15x: "
            f"{'OK' if p50_ratio <= 1.15 else 'OVER'}), throughput {rps_ratio:.2f}x (target >= 0.9x: "
            f"{'OK' if rps_ratio >= 0.9 else 'UNDER'})"
        )


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def main(args: argparse.Namespace) -> int:
    load = _load()
    rng = random.Random(7)
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    settings = load_settings(es_url=[args.es_url], index_prefix=prefix, embedder="none")
    store = await Store.connect(settings)
    env = {
        **os.environ,
        "HOPSEARCH_ES_URL": args.es_url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_EMBEDDER": "none",
        "HOPSEARCH_API_KEYS": KEY,
        "HOPSEARCH_API_HOST": "127.0.0.1",
        "HOPSEARCH_API_MAX_CONCURRENT_ASKS": "1",
    }
    pythons = [("hopsearch _retrieve (service)", sys.executable, False)]
    pythons += [(f"compared: {Path(python).parents[2].name}", python, False) for python in args.compare]
    if args.floor:
        pythons.append(("floor: bare ASGI + aiohttp proxy", sys.executable, True))
    servers: list[asyncio.subprocess.Process] = []
    try:
        target = await store.ensure_indices(None)
        docs = corpus(args.docs, rng)
        ok, errors = await store.bulk({"_index": target, "_id": d["doc_id"], "_source": d} for d in docs)
        assert not errors and ok == len(docs)
        await store.refresh(target)
        queries = [" ".join(rng.choices(WORDS, k=4)) for _ in range(args.requests)]
        service_bodies = [{"query": q, "k": 10} for q in queries]
        es_bodies = [bm25_body(RetrievalQuery(q, k=10), 10) for q in queries]
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        headers = {"Authorization": f"ApiKey {KEY}", "Accept-Encoding": "identity"}
        alias = settings.passages_alias
        es_port = httpx.URL(args.es_url).port or 9200
        es_pid = listening_pid(es_port)
        # No compression on either side: httpx asks for gzip by default, Elasticsearch then compresses its
        # answer (the service's own client never asks for it, and uvicorn does not compress).
        plain = {"Accept-Encoding": "identity"}
        direct = httpx.AsyncClient(base_url=args.es_url, headers=plain, limits=limits, timeout=30)
        sides = [Side("Elasticsearch _search (direct)", direct, f"/{alias}/_search", es_bodies)]
        for name, python, floor in pythons:
            port = free_port()
            servers.append(await start_service(python, env, port, floor))
            client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers, limits=limits, timeout=30)
            sides.append(Side(name, client, f"/{alias}/_retrieve", service_bodies, servers[-1].pid))
        for side, server in zip(sides[1:], servers, strict=True):
            await wait_ready(side.client, server)
        for _ in range(args.warmup):  # caches, pools and the node's query path warm up
            for side in sides:
                await timed(side.client, side.url, side.bodies[0])
        stop = time.monotonic() + args.max_seconds / 2
        for number in range(len(queries)):  # interleaved, so every side sees the same cluster state
            if time.monotonic() > stop:
                break
            for side in sides:
                side.latencies.append(await timed(side.client, side.url, side.bodies[number]))
        budget = args.max_seconds / 2 / args.rounds / len(sides)
        for _ in range(args.rounds):
            for side in sides:
                await loaded_round(side, args.concurrency, budget, es_pid)
        report(sides, len(docs), store.info.number, args, load)
        for side in sides:
            await side.client.aclose()
        return 0
    finally:
        for server in servers:
            server.terminate()
            try:
                await asyncio.wait_for(server.wait(), 10)
            except TimeoutError:
                server.kill()
                await server.wait()
        await store.client.indices.delete(index=f"{prefix}-*", allow_no_indices=True)
        await store.close()


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--es-url", default="http://127.0.0.1:9200", help="a loopback Elasticsearch")
    parser.add_argument("--docs", type=int, default=2000, help="synthetic passages to index")
    parser.add_argument("--requests", type=int, default=500, help="sequential requests per side")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-seconds", type=float, default=40.0, help="time cap of the measurements")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved throughput rounds per side")
    parser.add_argument("--floor", action="store_true", help="also measure benchmarks/floor_server.py")
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="PYTHON",
        help="also serve with this interpreter (another checkout's .venv/bin/python: the 'before')",
    )
    args = parser.parse_args()
    host = httpx.URL(args.es_url).host
    if host not in ("127.0.0.1", "localhost", "::1"):
        parser.error("loopback Elasticsearch only")
    args.requests = min(args.requests, 5000)
    return asyncio.run(main(args))


if __name__ == "__main__":
    raise SystemExit(cli())
