"""What a stored API key costs at the gate: ``POST /{index}/_retrieve`` p50 with a flat admin key
(``HOPSEARCH_API_KEYS``, no lookup), a stored admin key read through the per-process cache
(``api_key_cache_s=0.5``, the default) and one read on every request (``api_key_cache_s=0``: one real-time
``GET`` of ``<prefix>-keys``), as ratios to the flat key, interleaved in one run (admin keys all, so no
access filter differs between the sides).

In-process (the app under ``httpx.ASGITransport``) against the Elasticsearch at ``--es-url``; a small
synthetic corpus under a fresh prefix, deleted afterwards::

    .venv/bin/python benchmarks/bench_keys.py --es-url http://127.0.0.1:9218 [--requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
import uuid

import httpx

from hopsearch.service.api import create_app
from hopsearch.service.auth.keys import KeyStore, NewKey
from hopsearch.service.config.settings import Settings
from hopsearch.service.store import Store

FLAT = "bench-flat-admin-key"


def settings_for(es_url: str, prefix: str, cache_s: float) -> Settings:
    return Settings(
        es_url=[es_url],
        index_prefix=prefix,
        embedder="none",
        api_keys=[FLAT],  # type: ignore[list-item]
        api_key_cache_s=cache_s,
        vector_cache_mb=0,
    )


async def main(es_url: str, requests: int) -> None:
    prefix = f"bk{uuid.uuid4().hex[:8]}"
    base = settings_for(es_url, prefix, 0.5)
    store = await Store.connect(base)
    try:
        target = await store.ensure_indices(None)
        words = ["river", "castle", "film", "director", "novel", "king", "city", "music"]
        actions = [
            {"_index": target, "_id": f"d{n}", "_source": {"title": f"t{n}", "text": " ".join(words[n % 8 :] * 3)}}
            for n in range(2000)
        ]
        await store.bulk(actions)
        await store.refresh(target)
        secret, _ = await KeyStore.of(store).create(NewKey("bench-admin", admin=True))
        async with contextlib.AsyncExitStack() as stack:
            await _measure(stack, es_url, prefix, secret, requests)
    finally:
        await store.client.indices.delete(index=f"{prefix}-*", allow_no_indices=True, ignore_unavailable=True)
        await store.close()


async def _measure(stack: contextlib.AsyncExitStack, es_url: str, prefix: str, secret: str, requests: int) -> None:
    words = ["river", "castle", "film", "director", "novel", "king", "city", "music"]
    sides: dict[str, tuple[httpx.AsyncClient, str]] = {}
    apps = {"flat key": (0.5, FLAT), "stored, cached 0.5 s": (0.5, secret), "stored, no cache": (0.0, secret)}
    for name, (cache_s, key) in apps.items():
        app = create_app(settings_for(es_url, prefix, cache_s))
        await stack.enter_async_context(app.router.lifespan_context(app))
        transport = httpx.ASGITransport(app=app)
        client = await stack.enter_async_context(httpx.AsyncClient(transport=transport, base_url="http://localhost"))
        sides[name] = (client, key)
    url = f"/{prefix}-passages/_retrieve"
    times: dict[str, list[float]] = {name: [] for name in sides}
    for n in range(requests + 20):
        for name, (client, key) in sides.items():
            started = time.perf_counter()
            answer = await client.post(
                url, json={"query": words[n % 8], "k": 5}, headers={"Authorization": f"ApiKey {key}"}
            )
            elapsed = time.perf_counter() - started
            assert answer.status_code == 200, answer.text
            if n >= 20:  # warm-up
                times[name].append(elapsed)
    flat = statistics.median(times["flat key"])
    print(f"_retrieve p50 over {requests} requests per side (interleaved), ES at {es_url}")
    for name, samples in times.items():
        p50 = statistics.median(samples)
        print(f"  {name:22} p50 {p50 * 1000:7.2f} ms   ratio to flat key {p50 / flat:5.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--es-url", default="http://127.0.0.1:9200")
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    asyncio.run(main(args.es_url, args.requests))
