"""What one hop costs: p50/p95 of the search use case (what ``POST /{index}/_retrieve`` calls) with
``hops`` 0 and 1, interleaved in one run, over a synthetic corpus whose passages name each other's titles
(so every hop looks names up and finds some; it measures cost, not selectivity).

    .venv/bin/python benchmarks/bench_hops.py --es-url http://127.0.0.1:9200 --passages 5000 --queries 200

``--chunks N`` makes each document N passages (one ``doc_id`` and title), so the first hop repeats documents
and the hop's mention search runs beside its title lookup (the costlier case). Indexes under a fresh prefix
(deleted afterwards, ``--keep`` keeps it and ``--prefix`` reuses it); BM25; prints the numbers and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
import uuid
from pathlib import Path

from hopsearch.service.access import ADMIN
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.config.settings import load_settings
from hopsearch.service.requests import Query
from hopsearch.service.text.names import names_of

SAMPLE = Path(__file__).resolve().parents[1] / "loaders" / "data" / "sample_2wiki.jsonl"

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


def corpus(n: int, chunks: int = 1, seed: int = 7) -> list[tuple[str, str]]:
    """``n`` passages, ``chunks`` a document (a document's passages share its title)."""
    rng = random.Random(seed)
    titles = [title(rng, i) for i in range(0, n, chunks)]
    rows = []
    for i in range(n):
        t = titles[i // chunks]
        named = ", ".join(rng.sample(titles, 3))
        words = " ".join(rng.choice(WORDS) for _ in range(60))
        rows.append((t, f"{t} worked with {named} on the {words}."))
    return rows


async def measure(runtime: Runtime, text: str, hops: int) -> float:
    started = time.perf_counter()
    request = await usecases.search_request(runtime, [Query(text, k=10, mode="bm25", hops=hops)], caller=ADMIN)
    await usecases.search(runtime, request)
    return (time.perf_counter() - started) * 1000


async def twowiki(args: argparse.Namespace) -> None:
    """The 2Wiki sample shipped in the repository: its questions' context paragraphs as passages (with their
    ``names``), recall@10 and all@10 of the supporting titles, hops 0 and 1, and p50 of each (interleaved)."""
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    paragraphs = {t: " ".join(sentences) for row in rows for t, sentences in row["context"]}
    settings = load_settings(es_url=[args.es_url], index_prefix=f"bhw{uuid.uuid4().hex[:6]}", embedder="none")
    async with await Runtime.open(settings) as runtime:
        try:
            target = await runtime.store.ensure_indices(None)
            named = "names" in await runtime.store.index_meta(target)  # an index made before names has none
            actions = []
            for i, (t, x) in enumerate(paragraphs.items()):
                source = {"title": t, "text": x, "acl": ["public"], "doc_id": f"d{i}"}
                source |= {"names": names_of(x, "en")} if named else {}
                actions.append({"_index": target, "_id": f"p{i}", "_source": source})
            await runtime.store.bulk(actions)
            await runtime.store.refresh(target)
            scores = {h: [0.0, 0.0] for h in (0, 1)}
            times: dict[int, list[float]] = {0: [], 1: []}
            for round_ in range(4):
                for row in rows:
                    supporting = {t for t, _ in row["supporting_facts"]}
                    for hops in (0, 1):
                        started = time.perf_counter()
                        query = [Query(row["question"], k=10, mode="bm25", hops=hops)]
                        request = await usecases.search_request(runtime, query, caller=ADMIN)
                        [result] = await usecases.search(runtime, request)
                        if round_:
                            times[hops].append((time.perf_counter() - started) * 1000)
                        else:
                            found = {hit.title for hit in result.hits[:10]}
                            scores[hops][0] += len(found & supporting) / len(supporting) / len(rows)
                            scores[hops][1] += float(supporting <= found) / len(rows)
        finally:
            await runtime.store.client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True)
    p50 = {h: statistics.median(v) for h, v in times.items()}
    print(f"2Wiki sample: {len(rows)} questions, {len(paragraphs)} paragraphs, bm25, k=10")
    for h in (0, 1):
        print(f"hops={h}: recall@10 {scores[h][0]:.3f}, all@10 {scores[h][1]:.3f}, p50 {p50[h]:.2f} ms")
    print(f"ratio hops=1 / hops=0: p50 {p50[1] / p50[0]:.2f}x")


async def load(runtime: Runtime, rows: list[tuple[str, str]], chunks: int) -> None:
    target = await runtime.store.ensure_indices(None)
    for start in range(0, len(rows), 2000):
        actions = []
        for i, (t, x) in enumerate(rows[start : start + 2000], start=start):
            source = {"title": t, "text": x, "acl": ["public"], "doc_id": f"d{i // chunks}", "chunk": i % chunks}
            actions.append({"_index": target, "_id": f"p{i}", "_source": source})
        await runtime.store.bulk(actions)
    await runtime.store.refresh(target)


async def main(args: argparse.Namespace) -> None:
    if args.twowiki:
        await twowiki(args)
        return
    prefix = args.prefix or f"bhop{uuid.uuid4().hex[:6]}"
    settings = load_settings(es_url=[args.es_url], index_prefix=prefix, embedder="none")
    rows = corpus(args.passages, args.chunks)
    async with await Runtime.open(settings) as runtime:
        try:
            if not await runtime.store.exists(settings.passages_alias):
                await load(runtime, rows, args.chunks)
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
            if not args.keep:
                await runtime.store.client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True)
    p50 = {h: statistics.median(v) for h, v in times.items()}
    p95 = {h: statistics.quantiles(v, n=20)[18] for h, v in times.items()}
    print(
        f"{args.passages} passages ({args.chunks} a document), {args.queries} queries, bm25, k=10 "
        f"(search use case, one node; prefix {prefix})"
    )
    for h in (0, 1):
        print(f"hops={h}: p50 {p50[h]:.2f} ms, p95 {p95[h]:.2f} ms")
    print(f"ratio hops=1 / hops=0: p50 {p50[1] / p50[0]:.2f}x, p95 {p95[1] / p95[0]:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--es-url", default="http://127.0.0.1:9200")
    parser.add_argument("--passages", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=1, help="passages a document (repeats: the mention search)")
    parser.add_argument("--prefix", default=None, help="an index prefix to reuse (loaded if missing)")
    parser.add_argument("--keep", action="store_true", help="keep the index")
    parser.add_argument("--twowiki", action="store_true", help="recall and p50 on the shipped 2Wiki sample instead")
    asyncio.run(main(parser.parse_args()))
