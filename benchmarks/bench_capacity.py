"""Capacity figures of one Elasticsearch 8.19 node, measured on a sample and scaled (docs/capacity.md).

    .venv/bin/python benchmarks/bench_capacity.py [--passages 30000] [--seconds 10] [--port 19660]

Starts its own node (integ-test-zip from the cache, 512m heap, a temporary folder, stopped at the end)
and writes the same ``--passages`` DPR-like passages (~100 words and a title each) into four indices
made with the project's passages body (``Store.passages_body``): BM25 only; with 384-d vectors; with
768-d vectors; and 384-d with the vector left out of ``_source`` (an option, not what hopsearch does
today). Vectors are random unit float32 vectors written the way the loader writes a model's output (a
float's shortest repr in JSON): the size of a vector field does not depend on its values.

The text is synthetic: the most frequent words are the real ones of the bundled 2WikiMultihopQA sample,
then made-up words, drawn with Zipf's law (s = 1.2 over 1M ranks: ~170k distinct words in 30k passages,
about what 3M words of Wikipedia text hold), so the term dictionary grows with the
corpus as a natural language's does. After the load each index is force-merged to one segment; it
prints per index the store size (``_stats``), bytes per passage, GiB per million passages, the split by
kind (``_disk_usage``: inverted index, stored fields, doc values, vectors) and the node's heap.

The passages body excludes fields from ``_source`` (the Japanese token fields), so Elasticsearch also
stores each document's full source as ``_recovery_source`` until the shard's retention leases (12 h) let
a merge drop it: the "steady" size is the store size less that copy (what the index settles to), the
"after load" size the store size with it (what the disks must hold first).

Then the queries of one DualRAG step per second: one ``_msearch`` of 9 queries (3 entities x 3 keywords,
k = 50, the bodies ``retrieval.bm25_body`` / ``knn_body`` build) from 4 concurrent clients for
``--seconds``, BM25 on the BM25 index and kNN on the 384-d index; and the scaled projection for the full
DPR corpus (21,015,324 passages) with one replica.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hopsearch.cli.local import esnode  # noqa: E402
from hopsearch.service.config.settings import Settings  # noqa: E402
from hopsearch.service.retrieval import bm25_body, knn_body  # noqa: E402
from hopsearch.service.store import Store  # noqa: E402
from hopsearch.service.types import RetrievalQuery  # noqa: E402

VERSION = "8.19.21"
DPR_PASSAGES = 21_015_324
SAMPLE = ROOT / "loaders" / "data" / "sample_2wiki.jsonl"
GB = 1024**3


class Dims:
    """Stands in for an embedder in ``Store.passages_body`` (only the mapping is asked of it)."""

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.model_id = f"random-{dims}"


def vocabulary(size: int, seed: int = 3) -> list[str]:
    counts: Counter[str] = Counter()
    for line in SAMPLE.read_text(encoding="utf-8").splitlines():
        counts.update(w.lower() for w in re.findall(r"[^\W\d_]+", json.dumps(json.loads(line)["context"])))
    words = [w for w, _ in counts.most_common()]
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    seen = set(words)
    while len(words) < size:
        word = "".join(rng.choices(letters, k=rng.randint(4, 11)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def passages(count: int, seed: int = 7) -> tuple[list[tuple[str, str]], int]:
    """(title, text) pairs and the number of distinct words in them."""
    words = vocabulary(1_000_000)
    ranks = np.arange(1, len(words) + 1, dtype=np.float64)
    weights = 1.0 / ranks**1.2
    rng = np.random.default_rng(seed)
    drawn = rng.choice(len(words), size=count * 104, p=weights / weights.sum())
    out = []
    for n in range(count):
        chunk = drawn[n * 104 : (n + 1) * 104]
        title = " ".join(words[i] for i in chunk[:4]).title()
        out.append((title, " ".join(words[i] for i in chunk[4:]).capitalize() + "."))
    return out, len(set(drawn.tolist()))


def unit_vectors(count: int, dims: int, seed: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, dims)).astype(np.float32)
    normed: np.ndarray[Any, np.dtype[np.float32]] = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return normed


def bodies_for(store: Store) -> dict[str, tuple[dict[str, Any], int]]:
    """index name → (the project's passages body, vector dims or 0)."""
    out: dict[str, tuple[dict[str, Any], int]] = {"bm25": (store.passages_body(None, replicas=0), 0)}
    for dims in (384, 768):
        out[f"vec{dims}"] = (store.passages_body(Dims(dims), replicas=0), dims)  # type: ignore[arg-type]
    lean = store.passages_body(Dims(384), replicas=0)  # type: ignore[arg-type]
    lean["mappings"]["_source"] = {"excludes": ["embedding"]}
    out["vec384-nosource"] = (lean, 384)
    return out


def load(url: str, name: str, body: dict[str, Any], dims: int, rows: list[tuple[str, str]]) -> float:
    httpx.put(f"{url}/{name}", json=body, timeout=120).raise_for_status()
    httpx.put(f"{url}/{name}/_settings", json={"index": {"refresh_interval": "-1"}}, timeout=60)
    vectors = unit_vectors(len(rows), dims, seed=dims) if dims else None
    began = time.perf_counter()
    with httpx.Client(timeout=300) as http:
        for start in range(0, len(rows), 500):
            lines = []
            for n in range(start, min(start + 500, len(rows))):
                title, text = rows[n]
                doc: dict[str, Any] = {"title": title, "text": text, "source": "dpr", "doc_id": str(n), "chunk": 0}
                doc["indexed_at"] = "2026-01-01T00:00:00+00:00"
                if vectors is not None:
                    doc["embedding"] = vectors[n].tolist()
                    doc["embedder"] = f"random-{dims}"
                lines += [orjson.dumps({"index": {"_index": name, "_id": str(n)}}), orjson.dumps(doc)]
            answer = http.post(
                f"{url}/_bulk",
                content=b"\n".join(lines) + b"\n",
                headers={"content-type": "application/x-ndjson"},
                params={"filter_path": "errors"},
            )
            if answer.status_code != 200 or answer.json().get("errors"):
                raise RuntimeError(f"bulk into {name} failed: {answer.text[:400]}")
        http.post(f"{url}/{name}/_refresh").raise_for_status()
        http.post(f"{url}/{name}/_forcemerge", params={"max_num_segments": 1}, timeout=1800).raise_for_status()
        http.post(f"{url}/{name}/_refresh").raise_for_status()
    return time.perf_counter() - began


def split(url: str, name: str) -> dict[str, int]:
    """Bytes by kind (``_disk_usage``): inverted index, stored fields, doc values, points, norms, vectors;
    and ``recovery_source``, the part of the stored fields that is the ``_recovery_source`` Elasticsearch
    keeps beside a ``_source`` with excludes (until the shard's retention leases let a merge drop it)."""
    usage = httpx.post(f"{url}/{name}/_disk_usage", params={"run_expensive_tasks": "true"}, timeout=600).json()
    fields = usage[name]["fields"]
    kinds = ("inverted_index", "stored_fields", "doc_values", "points", "norms", "knn_vectors")
    out = {kind: 0 for kind in kinds}
    recovery = fields.get("_recovery_source", {})
    out["recovery_source"] = int(recovery.get("stored_fields_in_bytes") or 0)
    for spec in fields.values():
        for kind in kinds:
            value = spec.get(f"{kind}_in_bytes")
            if value is None and isinstance(spec.get(kind), dict):
                value = spec[kind].get("total_in_bytes")
            out[kind] += int(value or 0)
    return out


async def step_rate(url: str, name: str, kind: str, seconds: float, clients: int = 4) -> float:
    """DualRAG steps per second: one ``_msearch`` of 9 queries (k = 50) per step."""
    rng = random.Random(11)
    words = vocabulary(5000)[:5000]
    done = 0
    deadline = 0.0

    def step() -> bytes:
        lines = []
        for _ in range(9):
            query = RetrievalQuery(" ".join(rng.choices(words[:3000], k=3)), k=50)
            if kind == "bm25":
                body = bm25_body(query, 50)
            else:
                body = knn_body(query, unit_vectors(1, 384, rng.randrange(1 << 30))[0].tolist(), 50)
            lines += [orjson.dumps({"index": name}), orjson.dumps(body)]
        return b"\n".join(lines) + b"\n"

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            answer = await http.post(f"{url}/_msearch", content=step())
            if answer.status_code != 200 or any("error" in r for r in answer.json()["responses"]):
                raise RuntimeError(f"msearch failed: {answer.text[:300]}")
            done += 1

    async with httpx.AsyncClient(timeout=60, headers={"content-type": "application/x-ndjson"}) as http:
        for _ in range(5):
            await http.post(f"{url}/_msearch", content=step())
        began = time.perf_counter()
        deadline = began + seconds
        await asyncio.gather(*(client(http) for _ in range(clients)))
        return done / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=30_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--port", type=int, default=19660)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; Elasticsearch {VERSION}")
    rows, distinct = passages(args.passages)
    words = sum(len(text.split()) + len(title.split()) for title, text in rows)
    print(f"{args.passages:,} passages, {words / len(rows):.0f} words each, {distinct:,} distinct words", flush=True)
    cache = Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "hopsearch"
    with tempfile.TemporaryDirectory(prefix="bench-capacity-") as tmp:
        spec = esnode.NodeSpec(version=VERSION, port=args.port, node_dir=Path(tmp), cache_dir=cache, heap="512m")
        if esnode.ping(spec.url) is not None:
            raise SystemExit(f"port {args.port} is taken: choose another --port")
        try:
            esnode.start(spec, timeout=240)
            store = asyncio.run(connect(spec.url))
            sizes: dict[str, tuple[int, int]] = {}
            for name, (body, dims) in bodies_for(store).items():
                took = load(spec.url, name, body, dims, rows)
                stats = httpx.get(f"{spec.url}/{name}/_stats/store,docs", timeout=60).json()["_all"]["primaries"]
                size = int(stats["store"]["size_in_bytes"])
                kinds = split(spec.url, name)
                steady = size - kinds["recovery_source"]
                sizes[name] = (steady, size)
                per = steady / args.passages
                parts = ", ".join(f"{k} {v / args.passages:,.0f}" for k, v in kinds.items() if v)
                print(
                    f"{name:16s} {stats['docs']['count']:,} docs  steady {steady / 2**20:7.1f} MiB  {per:7,.0f} "
                    f"B/passage  {per * 1e6 / GB:6.2f} GiB per million  (after load {size / 2**20:.1f} MiB, "
                    f"{size / args.passages * 1e6 / GB:.2f} GiB per million; load+merge {took:.0f} s)\n"
                    f"{'':16s} bytes/passage by kind: {parts}",
                    flush=True,
                )
            jvm = httpx.get(f"{spec.url}/_nodes/_local/stats/jvm", timeout=30).json()["nodes"]
            heap = next(iter(jvm.values()))["jvm"]["mem"]
            used, most = heap["heap_used_in_bytes"] / 2**20, heap["heap_max_in_bytes"] / 2**20
            print(f"node heap: {used:.0f} MiB used of {most:.0f} MiB")
            bm25 = asyncio.run(step_rate(spec.url, "bm25", "bm25", args.seconds))
            knn = asyncio.run(step_rate(spec.url, "vec384", "knn", args.seconds))
            print(f"DualRAG step (_msearch of 9 queries, k=50), 4 clients: BM25 {bm25:.1f}/s, kNN 384-d {knn:.1f}/s")
            project(sizes, args.passages)
        finally:
            esnode.stop(spec)


async def connect(url: str) -> Store:
    store = await Store.connect(Settings(es_url=[url], index_prefix="capacity", embedder="none"))
    await store.close()  # only its server facts (analyzer, vector method) are needed for the bodies
    return store


def project(sizes: dict[str, tuple[int, int]], sample: int) -> None:
    """The full DPR corpus with one replica: primary size (steady), shards of <= 40 GiB, and the disk for
    two copies after the load (recovery source included) under the 85% low watermark."""
    print(f"projection for {DPR_PASSAGES:,} passages (linear in passages), 1 replica:")
    for name, (steady, after) in sizes.items():
        primary = steady / sample * DPR_PASSAGES
        shards = max(1, math.ceil(primary / (40 * GB)))
        disk = 2 * after / sample * DPR_PASSAGES / 0.85
        print(
            f"  {name:16s} primaries {primary / GB:7.1f} GiB steady, {shards} shard(s) of <= 40 GiB, "
            f"disk for 2 copies after the load {disk / GB:7.1f} GiB"
        )


if __name__ == "__main__":
    main()
