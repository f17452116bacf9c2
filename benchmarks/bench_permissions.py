"""The principal filter's cost: ``_retrieve`` and a DualRAG retrieval step for callers with 10 and 1,000
principals who may read 1%, 10% and 100% of 100,000 passages, as ratios to the same request unfiltered
(an admin), measured interleaved in one run.

    .venv/bin/python benchmarks/bench_permissions.py --es-url http://127.0.0.1:9200 \
        [--passages 100000] [--runs 60]

1. In process (the filter alone): the same query bound to an admin scope and to each caller's scope
   (``EsRetriever.bind``) — one ``_retrieve``-shaped BM25 search (k 10), and DualRAG's step (3 entities x 3
   keywords, k 50 each, one ``_msearch``).
2. Over HTTP, the key lookup included: ``hopsearch serve`` as a separate process, ``POST
   /{index}/_retrieve`` with the flat admin key against a stored key per caller (``hopsearch keys create``),
   so every filtered request also pays the lookup of its key.

Passage ``n`` carries ``acl`` ``group:all``, plus ``group:ten`` when ``n % 10 == 0`` and ``group:one`` when
``n % 100 == 0``; a caller reads 1%, 10% or 100% through one of those and holds 9 or 999 more principals
that match nothing (``group:f<i>``), as an employee in many groups does. Synthetic text: Zipf-drawn words
(``bench_capacity.passages``). The index is made under a fresh prefix and deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_capacity import passages  # noqa: E402
from benchmarks.bench_dualrag import medians_ms  # noqa: E402
from hopsearch.service.access import ADMIN, Caller, Scope  # noqa: E402
from hopsearch.service.config.settings import load_settings  # noqa: E402
from hopsearch.service.retrieval import EsRetriever  # noqa: E402
from hopsearch.service.retrieval.config import RetrievalConfig  # noqa: E402
from hopsearch.service.store import Store  # noqa: E402
from hopsearch.service.strategies.dualrag_knowledge import EntitySearch, gather  # noqa: E402
from hopsearch.service.types import RetrievalQuery  # noqa: E402

SHARES = {"1%": "group:one", "10%": "group:ten", "100%": "group:all"}
SIZES = (10, 1000)


def acl_of(n: int) -> list[str]:
    acl = ["group:all"]
    if n % 10 == 0:
        acl.append("group:ten")
    if n % 100 == 0:
        acl.append("group:one")
    return acl


def principals_for(share: str, size: int) -> list[str]:
    return [SHARES[share], *(f"group:f{i}" for i in range(size - 1))]


async def load(store: Store, count: int, merge: int = 0) -> tuple[str, list[str]]:
    rows, _ = passages(count)
    target = await store.ensure_indices(None)
    began = time.perf_counter()
    for start in range(0, count, 2000):
        actions = [
            {
                "_index": target,
                "_id": f"p{n}",
                "_source": {"title": t, "text": x, "source": "jsonl", "doc_id": f"p{n}", "acl": acl_of(n)},
            }
            for n, (t, x) in enumerate(rows[start : start + 2000], start)
        ]
        ok, errors = await store.bulk(actions, refresh=False)
        assert not errors and ok == len(actions), errors[:3]
        print(f"\r  loaded {start + len(actions):,}/{count:,}", end="", flush=True)
    await store.client.indices.refresh(index=target)
    print(f" in {time.perf_counter() - began:.0f} s")
    if merge:
        await store.client.indices.forcemerge(index=target, max_num_segments=merge, request_timeout=1800)
    segments = await store.client.cat.segments(index=target, format="json")
    print(f"  {len(segments)} segments (largest {max(int(s['docs.count']) for s in segments):,} passages)")
    titles = [t for t, _ in rows[1 :: max(1, count // 200)]][:200]
    return target, titles


def report(label: str, base: float, rows: dict[str, float]) -> None:
    print(f"  {label}: unfiltered (admin) {base:.2f} ms")
    for name, value in rows.items():
        print(f"    {name:<22} {value:7.2f} ms  {value / base:5.2f}x")


async def in_process(store: Store, titles: list[str], runs: int) -> None:
    retriever = EsRetriever(store, config=RetrievalConfig.of(store.settings))
    alias = store.settings.passages_alias
    scopes = {"admin": Scope(alias, ADMIN)}
    for share in SHARES:
        for size in SIZES:
            scopes[f"{share} readable, {size} pr."] = Scope(alias, Caller.of(principals_for(share, size)))
    bound = {name: retriever.bind(scope) for name, scope in scopes.items()}
    cursor = iter(range(10**9))

    def retrieve(name: str) -> Callable[[], Awaitable[object]]:
        async def one() -> object:
            title = titles[next(cursor) % len(titles)]
            return await bound[name].search_many([RetrievalQuery(text=title, k=10, mode="bm25")])

        return one

    def step(name: str) -> Callable[[], Awaitable[object]]:
        async def one() -> object:
            n = next(cursor)
            chosen = [titles[(n + i) % len(titles)] for i in range(3)]
            searches = [EntitySearch(t.casefold(), t, (t, f"{t} director", f"{t} born")) for t in chosen]
            return (await gather(bound[name], searches)).hits

        return one

    names = list(bound)
    for label, make in (("_retrieve (k 10, BM25)", retrieve), ("DualRAG step (3 x 3 keywords, k 50)", step)):
        times = await medians_ms([make(name) for name in names], runs, warm=max(10, runs // 3))
        report(f"{label}, in process, median of {runs}", times[0], dict(zip(names[1:], times[1:], strict=True)))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def over_http(es_url: str, prefix: str, titles: list[str], runs: int) -> None:
    admin_key = uuid.uuid4().hex
    env = {
        **os.environ,
        "HOPSEARCH_ES_URL": es_url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_EMBEDDER": "none",
        "HOPSEARCH_API_KEYS": admin_key,
    }
    hopsearch = str(Path(sys.executable).with_name("hopsearch"))
    keys: dict[str, str] = {}
    for share in SHARES:
        for size in SIZES:
            name = f"bench-{share.rstrip('%')}-{size}"
            args = [hopsearch, "keys", "create", name, "--json"]
            for value in principals_for(share, size):
                args += ["--principal", value]
            made = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
            keys[f"{share} readable, {size} pr."] = json.loads(made.stdout)["key"]
    port = free_port()
    server = subprocess.Popen(
        [hopsearch, "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/_health/live", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        index = f"{prefix}-passages"
        secrets = {"admin": admin_key, **keys}
        cursor = iter(range(10**9))

        async def measure() -> list[float]:
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:

                def call(secret: str) -> Callable[[], Awaitable[object]]:
                    async def one() -> object:
                        title = titles[next(cursor) % len(titles)]
                        response = await http.post(
                            f"/{index}/_retrieve",
                            json={"query": title, "k": 10, "mode": "bm25"},
                            headers={"Authorization": f"ApiKey {secret}"},
                        )
                        response.raise_for_status()
                        return response

                    return one

                return await medians_ms([call(s) for s in secrets.values()], runs, warm=max(10, runs // 3))

        times = asyncio.run(measure())
        names = list(secrets)
        report(
            f"POST /_retrieve over HTTP, key lookup included, median of {runs}",
            times[0],
            dict(zip(names[1:], times[1:], strict=True)),
        )
    finally:
        server.terminate()
        server.wait(timeout=30)


async def prepare(es_url: str, prefix: str, count: int, merge: int) -> tuple[Store, list[str]]:
    settings = load_settings(es_url=[es_url], index_prefix=prefix, embedder="none")
    store = await Store.connect(settings)
    _, titles = await load(store, count, merge)
    return store, titles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--es-url", required=True)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--merge", type=int, default=0, help="force-merge to this many segments first")
    parser.add_argument("--keep", action="store_true", help="keep the index (its prefix is printed)")
    parser.add_argument("--no-http", action="store_true", help="the in-process part only")
    args = parser.parse_args()
    prefix = f"benchperm{uuid.uuid4().hex[:6]}"

    async def first() -> list[str]:
        store, titles = await prepare(args.es_url, prefix, args.passages, args.merge)
        try:
            print(f"{args.passages:,} passages, Elasticsearch {store.info.number}")
            await in_process(store, titles, args.runs)
        finally:
            await store.close()
        return titles

    titles = asyncio.run(first())
    try:
        if not args.no_http:
            over_http(args.es_url, prefix, titles, args.runs)
    finally:
        if args.keep:
            print(f"kept: index prefix {prefix}")
        else:
            httpx.delete(f"{args.es_url}/{prefix}-*", params={"allow_no_indices": "true"}, timeout=60)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
