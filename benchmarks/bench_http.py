"""Latency of ``POST /{index}/_retrieve`` through the service against the same query sent straight to
Elasticsearch, and sustained requests/s at 16 concurrent clients.

Loopback only; bounded in count and time; stops by itself. It indexes a small synthetic corpus under a
fresh index prefix on the Elasticsearch at ``--es-url`` (deleted afterwards), starts ``hopsearch serve``
as a separate process on a free loopback port, and measures with keep-alive HTTP clients::

    .venv/bin/python benchmarks/bench_http.py --es-url http://127.0.0.1:9200
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
from typing import Any

import httpx

from hopsearch.service.retrieval import bm25_body
from hopsearch.service.settings import load_settings
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


async def timed(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> float:
    started = time.perf_counter()
    response = await client.post(url, json=body)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.text[:300]}")
    return elapsed


async def sequential(client: httpx.AsyncClient, url: str, bodies: list[dict[str, Any]], budget_s: float) -> list[float]:
    out: list[float] = []
    stop = time.monotonic() + budget_s
    for body in bodies:
        if time.monotonic() > stop:
            break
        out.append(await timed(client, url, body))
    return out


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
    return len(latencies) / (time.perf_counter() - started), latencies


async def main(args: argparse.Namespace) -> int:
    rng = random.Random(7)
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    settings = load_settings(es_url=[args.es_url], index_prefix=prefix, embedder="none")
    store = await Store.connect(settings)
    port = free_port()
    env = {
        **os.environ,
        "HOPSEARCH_ES_URL": args.es_url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_EMBEDDER": "none",
        "HOPSEARCH_API_KEYS": KEY,
        "HOPSEARCH_API_PORT": str(port),
        "HOPSEARCH_API_HOST": "127.0.0.1",
        "HOPSEARCH_API_MAX_CONCURRENT_ASKS": "1",
    }
    server: asyncio.subprocess.Process | None = None
    try:
        target = await store.ensure_indices(None)
        docs = corpus(args.docs, rng)
        ok, errors = await store.bulk({"_index": target, "_id": d["doc_id"], "_source": d} for d in docs)
        assert not errors and ok == len(docs)
        await store.refresh(target)
        cli = [sys.executable, "-c", "from hopsearch.cli.main import main; main()", "serve", "--log-level", "warning"]
        server = await asyncio.create_subprocess_exec(*cli, env=env)
        base = f"http://127.0.0.1:{port}"
        queries = [" ".join(rng.choices(WORDS, k=4)) for _ in range(args.requests)]
        service_bodies = [{"query": q, "k": 10} for q in queries]
        es_bodies = [bm25_body(RetrievalQuery(q, k=10), 10) for q in queries]
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        headers = {"Authorization": f"ApiKey {KEY}"}
        async with (
            httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=30) as svc,
            httpx.AsyncClient(base_url=args.es_url, limits=limits, timeout=30) as es,
        ):
            deadline = time.monotonic() + 60
            while True:
                try:
                    if (await svc.get("/_health")).status_code in (200, 503):
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or server.returncode is not None:
                    raise RuntimeError("hopsearch serve did not start")
                await asyncio.sleep(0.2)
            svc_url, es_url = f"/{settings.passages_alias}/_retrieve", f"/{settings.passages_alias}/_search"
            for _ in range(args.warmup):  # JIT-free, but caches, pools and ES query caches warm up
                await timed(svc, svc_url, service_bodies[0])
                await timed(es, es_url, es_bodies[0])
            # Interleave the two so both see the same cluster state.
            direct: list[float] = []
            through: list[float] = []
            stop = time.monotonic() + args.max_seconds / 2
            for svc_body, es_body in zip(service_bodies, es_bodies, strict=True):
                if time.monotonic() > stop:
                    break
                direct.append(await timed(es, es_url, es_body))
                through.append(await timed(svc, svc_url, svc_body))
            rps, loaded = await concurrent(svc, svc_url, service_bodies * 4, args.concurrency, args.max_seconds / 2)
            es_rps, _ = await concurrent(es, es_url, es_bodies * 4, args.concurrency, args.max_seconds / 4)
        p50_d, p95_d = pct(direct, 0.5), pct(direct, 0.95)
        p50_s, p95_s = pct(through, 0.5), pct(through, 0.95)
        print(
            f"corpus: {len(docs)} passages, Elasticsearch {store.info.number}, {len(through)} sequential requests each"
        )
        print(f"{'':36}{'p50 ms':>10}{'p95 ms':>10}{'mean ms':>10}")
        print(f"{'Elasticsearch _search (direct)':36}{p50_d:10.2f}{p95_d:10.2f}{statistics.fmean(direct):10.2f}")
        print(f"{'hopsearch _retrieve (service)':36}{p50_s:10.2f}{p95_s:10.2f}{statistics.fmean(through):10.2f}")
        print(f"{'overhead':36}{p50_s - p50_d:10.2f}{p95_s - p95_d:10.2f}")
        print(
            f"sustained at {args.concurrency} concurrent clients: service {rps:.0f} req/s "
            f"(p50 {pct(loaded, 0.5):.2f} ms, p95 {pct(loaded, 0.95):.2f} ms, {len(loaded)} requests); "
            f"Elasticsearch direct {es_rps:.0f} req/s"
        )
        verdict = "OK" if p50_s - p50_d <= args.target_ms else "OVER TARGET"
        print(f"p50 overhead {p50_s - p50_d:.2f} ms (target <= {args.target_ms} ms): {verdict}")
        return 0
    finally:
        if server is not None:
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
    parser.add_argument("--target-ms", type=float, default=3.0)
    args = parser.parse_args()
    host = httpx.URL(args.es_url).host
    if host not in ("127.0.0.1", "localhost", "::1"):
        parser.error("loopback Elasticsearch only")
    args.requests = min(args.requests, 5000)
    return asyncio.run(main(args))


if __name__ == "__main__":
    raise SystemExit(cli())
