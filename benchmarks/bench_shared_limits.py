"""What sharing keys' requests per minute across ``serve --workers N`` costs a request: one
``KeyLimiter.request`` of a key with ``per_minute`` set, this process's own window against the shared
file (``mmap`` + ``flock``, :mod:`hopsearch.service.api.shared_limits`). Prints microseconds per call
(median of 5 rounds); a ``_retrieve`` of a key without ``per_minute`` makes no such call. With
``--es-url``, also ``POST /{index}/_retrieve`` p50 of a stored key with ``per_minute`` through an app
counting in its own window and one counting in the shared file, interleaved (in-process, the app under
``httpx.ASGITransport``; a small synthetic corpus under a fresh prefix, deleted afterwards)::

    .venv/bin/python benchmarks/bench_shared_limits.py [--es-url http://127.0.0.1:9200 --requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from hopsearch.service.api import create_app
from hopsearch.service.api.limits import KeyLimiter, SharedWindows
from hopsearch.service.auth.keys import KeyStore, NewKey
from hopsearch.service.auth.records import KeyLimits
from hopsearch.service.config.settings import Settings
from hopsearch.service.store import Store

CALLS = 100_000
LIMITS = KeyLimits(per_minute=10**9)


def per_call_us(limiter: KeyLimiter, keys: list[str]) -> float:
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for n in range(CALLS):
            limiter.request(keys[n % len(keys)], LIMITS)
        rounds.append((time.perf_counter() - started) / CALLS * 1e6)
    return statistics.median(rounds)


def limiter_only() -> None:
    keys = [f"key-{n}" for n in range(50)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "limits"
        SharedWindows.create(path)
        shared = SharedWindows(path)
        try:
            local_us = per_call_us(KeyLimiter(), keys)
            shared_us = per_call_us(KeyLimiter(shared=shared), keys)
        finally:
            shared.close()
    print(f"per-process window: {local_us:.2f} us/request")
    print(f"shared window:      {shared_us:.2f} us/request (+{shared_us - local_us:.2f} us)")


def settings_for(es_url: str, prefix: str, shared: str | None) -> Settings:
    return Settings(
        es_url=[es_url], index_prefix=prefix, embedder="none", vector_cache_mb=0, api_shared_limits_file=shared
    )


async def retrieve_p50(es_url: str, requests: int) -> None:
    prefix = f"bs{uuid.uuid4().hex[:8]}"
    store = await Store.connect(settings_for(es_url, prefix, None))
    words = ["river", "castle", "film", "director", "novel", "king", "city", "music"]
    try:
        target = await store.ensure_indices(None)
        docs = [{"title": f"t{n}", "text": " ".join(words[n % 8 :] * 3), "acl": ["public"]} for n in range(2000)]
        await store.bulk([{"_index": target, "_id": f"d{n}", "_source": d} for n, d in enumerate(docs)])
        await store.refresh(target)
        metered = NewKey("bench-metered", principals=["public"], per_minute=10**9)
        secret, _ = await KeyStore.of(store).create(metered)
        with tempfile.TemporaryDirectory() as folder:
            path = str(Path(folder) / "limits")
            SharedWindows.create(path)
            async with contextlib.AsyncExitStack() as stack:
                sides = {}
                for name, shared in (("own window", None), ("shared file", path)):
                    app = create_app(settings_for(es_url, prefix, shared))
                    await stack.enter_async_context(app.router.lifespan_context(app))
                    transport = httpx.ASGITransport(app=app)
                    sides[name] = await stack.enter_async_context(
                        httpx.AsyncClient(transport=transport, base_url="http://localhost")
                    )
                times: dict[str, list[float]] = {name: [] for name in sides}
                head = {"Authorization": f"ApiKey {secret}"}
                for n in range(requests + 20):
                    for name, client in sides.items():
                        started = time.perf_counter()
                        answer = await client.post(
                            f"/{prefix}-passages/_retrieve", json={"query": words[n % 8], "k": 5}, headers=head
                        )
                        elapsed = time.perf_counter() - started
                        assert answer.status_code == 200, answer.text
                        if n >= 20:
                            times[name].append(elapsed)
        own = statistics.median(times["own window"])
        print(f"_retrieve p50 over {requests} requests per side (interleaved), a key with per_minute, ES at {es_url}")
        for name, samples in times.items():
            p50 = statistics.median(samples)
            print(f"  {name:12} p50 {p50 * 1000:7.2f} ms   ratio {p50 / own:5.2f}x")
    finally:
        await store.client.indices.delete(index=f"{prefix}-*", allow_no_indices=True, ignore_unavailable=True)
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--es-url", default=None)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    limiter_only()
    if args.es_url:
        asyncio.run(retrieve_p50(args.es_url, args.requests))
