"""Benchmark of one DualRAG step on the real Elasticsearch and a delayed scripted LLM server.

    .venv/bin/python benchmarks/bench_dualrag.py [--passages 400] [--runs 40] [--delay 0.5]
        [--es-url http://127.0.0.1:9200]   # a running node instead of one of its own
        [--profile]   # cProfile of the step: where hopsearch's own time goes

1. Retrieval: 3 entities x 3 keywords (k = 50 each) as ONE ``_msearch`` (what DualRAG does) versus
   nine sequential searches, both through the same merge; median over ``--runs`` after a warm-up. Then
   the node alone: the same nine bodies as one ``_msearch`` vs nine ``_search`` with a bare aiohttp
   session (no client library, no parsing, no merge), the ceiling of that ratio on this machine. Then
   hopsearch's step against that node (target <= 1.25x), interleaved with the step as it was before
   ``search_fused`` (``search_many``: every hit built, RRF over the hits), with each one's client CPU.
2. Summaries: the Knowledge Summarizer for 3 entities concurrently (``asyncio.gather``, what DualRAG
   does) against a scripted server that answers each call after ``--delay`` seconds, versus the
   same 3 calls one after the other.

Starts its own Elasticsearch 8.19 node (hopsearch.cli.local.esnode, integ-test-zip from the cache) on a free
port in a temporary folder (or uses the one at ``--es-url``), indexes passages from the shared
2WikiMultihopQA sample (their context paragraphs; synthetic passages when the sample is absent), and
stops the node at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the scripted LLM server lives with the tests

from hopsearch.cli.local import esnode  # noqa: E402
from hopsearch.service.access import ADMIN, Scope  # noqa: E402
from hopsearch.service.config.settings import load_settings  # noqa: E402
from hopsearch.service.llm import LLMClient  # noqa: E402
from hopsearch.service.requests import AskRequest  # noqa: E402
from hopsearch.service.retrieval import EsRetriever, bm25_body  # noqa: E402
from hopsearch.service.retrieval.config import RetrievalConfig  # noqa: E402
from hopsearch.service.store import Store  # noqa: E402
from hopsearch.service.strategies.base import RunContext  # noqa: E402
from hopsearch.service.strategies.dualrag_knowledge import (  # noqa: E402
    RETRIEVE_K,
    EntitySearch,
    gather,
    queries_of,
    summarize,
)
from hopsearch.service.traces.recorder import TraceRecorder  # noqa: E402
from hopsearch.service.types import Hit, RetrievalQuery, Retriever, SearchResult  # noqa: E402
from tests.scripted_llm import ScriptedLLM  # noqa: E402

SAMPLE = ROOT.parent / "shared" / "data" / "2wiki_dev100.jsonl"
ES_VERSION = "8.19.21"


def passages(limit: int) -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    if SAMPLE.is_file():
        with SAMPLE.open() as lines:
            for line in lines:
                for title, sentences in json.loads(line)["context"]:
                    if title not in seen:
                        seen.add(title)
                        found.append((f"w{len(found)}", title, " ".join(sentences)))
    topics = ["film", "director", "river", "composer", "album", "city", "footballer", "novel", "painter"]
    while len(found) < limit:  # synthetic filler when the sample is absent or short
        n = len(found)
        found.append((f"s{n}", f"Entity {n}", f"Entity {n} is a {topics[n % 9]} born in {1800 + n % 200}."))
    return found[:limit]


class Sequential:
    """The same retriever, one query per round trip (the baseline)."""

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner

    async def search_many(self, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        return [(await self.inner.search_many([query]))[0] for query in queries]


class ManyOnly:
    """The same retriever seen only through ``search_many``: one ``_msearch``, every hit built, RRF over
    the hits (the step before ``search_fused``, and what any retriever without it gets)."""

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner

    async def search_many(self, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        return await self.inner.search_many(queries)


class NoRetrieval:
    """The summaries need no retrieval."""

    async def search_many(self, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        return []


async def medians_ms(actions: Sequence[Callable[[], Awaitable[object]]], runs: int, warm: int = 3) -> list[float]:
    """Median wall time of each action; runs interleaved (A B A B ...) so load spikes hit both alike."""
    for _ in range(warm):
        for action in actions:
            await action()
    times: list[list[float]] = [[] for _ in actions]
    for _ in range(runs):
        for number, action in enumerate(actions):
            started = time.perf_counter()
            await action()
            times[number].append((time.perf_counter() - started) * 1000)
    return [statistics.median(samples) for samples in times]


async def bench_retrieval(url: str, corpus: list[tuple[str, str, str]], runs: int, profile: bool = False) -> None:
    settings = load_settings(es_url=[url], index_prefix=f"bench{uuid.uuid4().hex[:8]}", embedder="none")
    store = await Store.connect(settings)
    try:
        target = await store.ensure_indices(None)
        actions = [
            {"_index": target, "_id": i, "_source": {"title": t, "text": x, "source": "jsonl", "doc_id": i}}
            for i, t, x in corpus
        ]
        ok, errors = await store.bulk(actions, refresh=True)
        assert not errors and ok == len(corpus), errors[:3]
        titles = [t for _, t, _ in corpus[:3]]
        searches = [
            EntitySearch(t.casefold(), t, (t, f"{t} director", f"{t} born")) for t in titles
        ]  # 3 entities x 3 keywords
        retriever = EsRetriever(store, config=RetrievalConfig.of(store.settings)).bind(
            Scope(store.settings.passages_alias, ADMIN)
        )
        sequential = Sequential(retriever)
        batched = (await gather(retriever, searches)).hits
        one_by_one = (await gather(sequential, searches)).hits
        assert {k: [h.id for h in v] for k, v in batched.items()} == {
            k: [h.id for h in v] for k, v in one_by_one.items()
        }, "the two ways must find the same passages"
        one, nine = await medians_ms(
            [lambda: gather(retriever, searches), lambda: gather(sequential, searches)],
            runs,
            warm=max(20, runs // 2),  # a fresh node's JIT needs a few hundred queries
        )
        print(
            f"DualRAG retrieval step: 3 entities x 3 keywords (k=50 each) over {ok} passages, "
            f"Elasticsearch {store.info.number}, median of {runs} runs"
        )
        print(f"  one _msearch (9 queries):   {one:8.2f} ms")
        print(f"  nine sequential searches:   {nine:8.2f} ms")
        print(f"  speed-up: {nine / one:.2f}x (target >= 3x)")
        bodies = [bm25_body(query, query.k, source=True) for query in queries_of(searches, "bm25", RETRIEVE_K)]
        raw_one, raw_nine = await node_alone(url, target, bodies, runs)
        print("  the node alone, same 9 bodies, bare aiohttp (no client library, no parsing, no merge):")
        print(f"    one _msearch {raw_one:.2f} ms, nine _search {raw_nine:.2f} ms: {raw_nine / raw_one:.2f}x")
        many = ManyOnly(retriever)
        assert (await gather(many, searches)).hits == batched, "search_fused must give the same hits"
        [(ours, ours_cpu), (before, before_cpu)], node = await client_over_node(
            url,
            target,
            bodies,
            [lambda: gather(retriever, searches), lambda: gather(many, searches)],
            runs,
        )
        print("  hopsearch's step vs the node alone, interleaved in one run (same _msearch body):")
        print(
            f"    hopsearch {ours:.2f} ms, node {node:.2f} ms: {ours / node:.2f}x (target <= 1.25x); "
            f"client CPU {ours_cpu:.2f} ms per step"
        )
        print(
            f"    before (search_many, every hit built, RRF over hits): {before:.2f} ms: {before / node:.2f}x; "
            f"client CPU {before_cpu:.2f} ms per step"
        )
        print(f"    load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if profile:
            await profiled(lambda: gather(retriever, searches), runs)
    finally:
        await store.client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True)
        await store.close()


async def profiled(step: Callable[[], Awaitable[object]], runs: int, top: int = 18) -> None:
    """cProfile over ``runs`` steps: the functions that take hopsearch's (and its libraries') own time
    (the waits for the node show as the event loop's ``select``/``poll``)."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(runs):
        await step()
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
    print(f"  cProfile of {runs} steps, by own time:")
    print("\n".join("    " + line for line in out.getvalue().splitlines() if line.strip())[:6000])


def bare_session(url: str) -> aiohttp.ClientSession:
    """The bare HTTP session of the node's baselines. Without ``Accept-Encoding`` (aiohttp sends
    ``gzip, deflate`` by default): Elasticsearch then gzips a 150 KB answer and aiohttp inflates it, a
    cost the Elasticsearch client never pays (it does not ask for compression), which made the node
    look slower than hopsearch's whole step."""
    return aiohttp.ClientSession(url, skip_auto_headers=("Accept-Encoding",))


async def node_alone(url: str, index: str, bodies: Sequence[dict[str, Any]], runs: int) -> tuple[float, float]:
    """One ``_msearch`` vs nine ``_search`` requests of the same bodies with a bare aiohttp session
    (the HTTP library under the Elasticsearch client)."""
    dumps = orjson.dumps
    batch = b"".join(dumps({"index": index}) + b"\n" + dumps(body) + b"\n" for body in bodies)
    singles = [dumps(body) for body in bodies]
    async with bare_session(url) as http:

        async def one() -> None:
            async with http.post("/_msearch", data=batch, headers={"content-type": "application/x-ndjson"}) as reply:
                reply.raise_for_status()
                await reply.read()

        async def nine() -> None:
            for body in singles:
                async with http.post(
                    f"/{index}/_search", data=body, headers={"content-type": "application/json"}
                ) as reply:
                    reply.raise_for_status()
                    await reply.read()

        times = await medians_ms([one, nine], runs, warm=max(20, runs // 2))
    return times[0], times[1]


async def client_over_node(
    url: str,
    index: str,
    bodies: Sequence[dict[str, Any]],
    steps: Sequence[Callable[[], Awaitable[object]]],
    runs: int,
) -> tuple[list[tuple[float, float]], float]:
    """Medians of each of hopsearch's ways to run the retrieval step and of the node answering the same
    ``_msearch`` over bare aiohttp (A B … node, A B … node), each step's client CPU per step (process time,
    a noisy machine's best view of hopsearch's own work; older objects frozen for the garbage collector),
    and the node's median."""
    dumps = orjson.dumps
    batch = b"".join(dumps({"index": index}) + b"\n" + dumps(body) + b"\n" for body in bodies)
    async with bare_session(url) as http:

        async def node() -> None:
            async with http.post("/_msearch", data=batch, headers={"content-type": "application/x-ndjson"}) as reply:
                reply.raise_for_status()
                await reply.read()

        times = await medians_ms([*steps, node], runs, warm=max(20, runs // 2))
        cpu = [0.0] * len(steps)
        numbered = list(enumerate(steps))
        # The process's older objects frozen: a full collection of them (a few ms, every ~70 steps) would
        # otherwise land on whichever step happens to be running and swing a figure by ~0.2 ms per step.
        gc.collect()
        gc.freeze()
        try:
            for run in range(runs):  # interleaved too, the order reversed every other run (A B, B A, ...)
                for number, step in numbered if run % 2 else numbered[::-1]:
                    started = time.process_time()
                    await step()
                    cpu[number] += time.process_time() - started
        finally:
            gc.unfreeze()
    return [(times[n], cpu[n] * 1000 / runs) for n in range(len(steps))], times[-1]


async def bench_summaries(delay: float, runs: int) -> None:
    with ScriptedLLM(lambda request: "A short summary.", delay_first=10**9, delay_s=delay) as server:
        settings = load_settings(
            llm_base_url=[server.base_url], llm_model="scripted", llm_engine="vllm", llm_timeout=30.0
        )
        async with LLMClient(settings) as llm:
            request = AskRequest("q", Scope("passages", ADMIN), strategy="dualrag")
            hit = Hit("p1", 1.0, "Title", "Some passage text.")
            jobs = [(EntitySearch(f"e{n}", f"Entity {n}", (f"Entity {n}",)), [hit]) for n in range(3)]

            def context() -> RunContext:
                recorder = TraceRecorder("q", "dualrag", llm.model, {})
                return RunContext(llm, NoRetrieval(), recorder, request, time.monotonic() + 600)

            async def concurrent() -> None:
                await summarize(context(), "q", "", [], jobs)

            async def serial() -> None:
                for job in jobs:
                    await summarize(context(), "q", "", [], [job])

            together, apart = (ms / 1000 for ms in await medians_ms([concurrent, serial], runs, warm=1))
    print(f"Summaries: 3 entities, scripted server answering after {delay:.3f} s per call, median of {runs} runs")
    print(f"  concurrent (asyncio.gather): {together:.3f} s = {together / delay:.2f}x one call (target <= 1.2x)")
    print(f"  serial, one after the other: {apart:.3f} s = {apart / delay:.2f}x one call")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=400)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--delay", type=float, default=0.5)
    parser.add_argument("--summary-runs", type=int, default=5)
    parser.add_argument("--es-url", help="use this running Elasticsearch (loopback) instead of starting one")
    parser.add_argument("--profile", action="store_true", help="cProfile the step: where hopsearch's time goes")
    args = parser.parse_args()
    if args.es_url:  # a node that runs already (loopback): no node of its own to start
        asyncio.run(bench_retrieval(args.es_url, passages(args.passages), args.runs, args.profile))
        asyncio.run(bench_summaries(args.delay, args.summary_runs))
        return 0
    cache = load_settings().cache_dir
    with tempfile.TemporaryDirectory(prefix="bench-es-") as folder:
        spec = esnode.NodeSpec(
            version=ES_VERSION, port=esnode.free_port(), node_dir=Path(folder) / "node", cache_dir=cache
        )
        esnode.start(spec, timeout=300)
        try:
            asyncio.run(bench_retrieval(spec.url, passages(args.passages), args.runs, args.profile))
        finally:
            esnode.stop(spec)
    asyncio.run(bench_summaries(args.delay, args.summary_runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
