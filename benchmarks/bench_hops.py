"""What one hop costs: p50/p95 of the search use case (what ``POST /{index}/_retrieve`` calls) with
``hops`` 0 and 1, interleaved in one run, over a synthetic corpus whose passages name each other's titles
(so every hop looks names up and finds some; it measures cost, not selectivity).

    .venv/bin/python benchmarks/bench_hops.py --es-url http://127.0.0.1:9200 --passages 5000 --queries 200

Indexes under a fresh prefix (deleted afterwards); BM25; prints the numbers and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
import uuid

from hopsearch.service import usecases
from hopsearch.service.access import ADMIN
from hopsearch.service.config.settings import load_settings
from hopsearch.service.requests import Query
from hopsearch.service.runtime import Runtime

FIRST = ["Anna", "Boris", "Clara", "David", "Elena", "Felix", "Greta", "Hugo", "Irene", "Jonas", "Karla", "Liam"]
LAST = ["Berg", "Costa", "Dorn", "Ehrlich", "Falk", "Gruber", "Hahn", "Imhof", "Jansen", "Kraus", "Lang", "Moser"]
WORDS = [
    "river",
    "city",
    "film",
    "school",
    "music",
    "village",
    "painter",
    "novel",
    "bridge",
    "harbour",
    "theatre",
    "station",
    "garden",
    "museum",
]


def title(rng: random.Random, n: int) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)} {n}"


def corpus(n: int, seed: int = 7) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    titles = [title(rng, i) for i in range(n)]
    rows = []
    for t in titles:
        named = ", ".join(rng.sample(titles, 3))
        words = " ".join(rng.choice(WORDS) for _ in range(60))
        rows.append((t, f"{t} worked with {named} on the {words}."))
    return rows


async def measure(runtime: Runtime, text: str, hops: int) -> float:
    started = time.perf_counter()
    request = usecases.search_request(runtime, [Query(text, k=10, mode="bm25", hops=hops)], caller=ADMIN)
    await usecases.search(runtime, request)
    return (time.perf_counter() - started) * 1000


async def main(args: argparse.Namespace) -> None:
    settings = load_settings(es_url=[args.es_url], index_prefix=f"bhop{uuid.uuid4().hex[:6]}", embedder="none")
    async with await Runtime.open(settings) as runtime:
        try:
            target = await runtime.store.ensure_indices(None)
            rows = corpus(args.passages)
            for start in range(0, len(rows), 2000):
                actions = [
                    {"_index": target, "_id": f"p{start + i}", "_source": {"title": t, "text": x, "acl": ["public"]}}
                    for i, (t, x) in enumerate(rows[start : start + 2000])
                ]
                await runtime.store.bulk(actions)
            await runtime.store.refresh(target)
            rng = random.Random(3)
            questions = [f"Where did {rng.choice(rows)[0]} study the {rng.choice(WORDS)}?" for _ in range(args.queries)]
            for q in questions[:20]:  # warm up both paths
                await measure(runtime, q, 0)
                await measure(runtime, q, 1)
            times: dict[int, list[float]] = {0: [], 1: []}
            for q in questions:
                for hops in (0, 1):
                    times[hops].append(await measure(runtime, q, hops))
        finally:
            await runtime.store.client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True)
    p50 = {h: statistics.median(v) for h, v in times.items()}
    p95 = {h: statistics.quantiles(v, n=20)[18] for h, v in times.items()}
    print(f"{args.passages} passages, {args.queries} queries, bm25, k=10 (search use case, one node)")
    for h in (0, 1):
        print(f"hops={h}: p50 {p50[h]:.2f} ms, p95 {p95[h]:.2f} ms")
    print(f"ratio hops=1 / hops=0: p50 {p50[1] / p50[0]:.2f}x, p95 {p95[1] / p95[0]:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--es-url", default="http://127.0.0.1:9200")
    parser.add_argument("--passages", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=200)
    asyncio.run(main(parser.parse_args()))
