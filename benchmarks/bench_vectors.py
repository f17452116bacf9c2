"""Each ``HOPSEARCH_VECTOR_INDEX`` option on Elasticsearch 8.19 and 9.2: recall, disk, memory, latency.

    .venv/bin/python benchmarks/bench_vectors.py --url8 http://127.0.0.1:9218 --url9 http://127.0.0.1:9219 \\
        [--count 100000] [--questions /work/shared/data/2wiki_dev100.jsonl] [--embedders minilm,e5] \\
        [--options auto,hnsw,int8_hnsw,int4_hnsw,bbq_hnsw,flat,int8_flat] [--vector-cache DIR] [--seconds 10]

The corpus: the 2Wiki questions' context paragraphs (real text, each a passage titled as in 2Wiki), then
DPR-like synthetic passages (``bench_capacity.passages``: ~100 words, Zipf over the bundled 2Wiki sample's
words and made-up ones) up to ``--count``. Each embedder embeds it once: ``--vector-cache DIR`` keeps the
float32 vectors (``<embedder id>-<count>-<corpus hash>.npy``) for the next run. The queries are the 2Wiki
questions (the embedder's query form).

Per Elasticsearch node, embedder and option: a passages index made with the project's own body
(``Store.passages_body`` under that ``vector_index``: the mapping, ``_source`` excludes and ``_meta`` a
load makes), the vectors bulk-loaded, a refresh and a force-merge to one segment; then

- ``recall@10``: the kNN top 10 (the body the service sends: ``knn_body`` with the index's ``knn_options``,
  ``knn_num_candidates`` / ``knn_oversample`` as set) against the exact float top 10 (numpy cosine over
  the same float32 vectors: what ``flat`` or ``script_score`` over floats returns);
- ``all@10``: the share of questions whose every supporting paragraph is in the kNN top 10 (by title);
- bytes per passage on disk (``_stats`` store after the merge; "steady" less ``_recovery_source``, which an
  index with ``_source`` excludes keeps until its retention leases expire);
- vector memory per passage: ``_stats`` ``dense_vector.off_heap`` where the node shows it (9.x: raw ``vec``,
  quantized ``veq``/``veb``, graph ``vex``), else Elasticsearch's formula (float 4d, int8 d+4, int4 d/2+4,
  bbq d/8+14; no graph);
- kNN p50/p95 at 4 clients over ``--seconds`` (one search per request, k = 10).

Indices are named ``benchvec-*`` and deleted at the end (``--keep`` keeps them).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hopsearch.service.config.settings import Settings  # noqa: E402
from hopsearch.service.embedders.factory import make_embedder  # noqa: E402
from hopsearch.service.retrieval.bodies import knn_body  # noqa: E402
from hopsearch.service.store import Store  # noqa: E402
from hopsearch.service.store.vector_index import KINDS, choose_vector_index, knn_options, vector_bytes  # noqa: E402
from hopsearch.service.types import Embedder, RetrievalQuery, embed_queries  # noqa: E402

QUESTIONS = Path("/work/shared/data/2wiki_dev100.jsonl")
SAMPLE = ROOT / "loaders" / "data" / "sample_2wiki.jsonl"
Vectors = np.ndarray[Any, np.dtype[np.float32]]


@dataclass
class Corpus:
    titles: list[str]
    texts: list[str]
    questions: list[str]
    #: per question, the titles of its supporting paragraphs
    supports: list[set[str]]
    real: int

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for title, text in zip(self.titles, self.texts, strict=True):
            h.update(f"{title}\n{text}\0".encode())
        return h.hexdigest()[:12]


def corpus(path: Path, count: int) -> Corpus:
    titles: list[str] = []
    texts: list[str] = []
    seen: set[str] = set()
    questions: list[str] = []
    supports: list[set[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        questions.append(row["question"])
        supports.append({title for title, _ in row["supporting_facts"]})
        for title, sentences in row["context"]:
            if title not in seen:
                seen.add(title)
                titles.append(title)
                texts.append(" ".join(sentences))
    real = len(titles)
    if count > real:
        synthetic = paragraphs(texts + sample_texts(), count - real)
        titles += [t for t, _ in synthetic]
        texts += [x for _, x in synthetic]
    return Corpus(titles[:count], texts[:count], questions, supports, min(real, count))


def sample_texts() -> list[str]:
    """The context paragraphs of the 2Wiki sample the project ships (more text for the word chain)."""
    out = []
    for line in SAMPLE.read_text(encoding="utf-8").splitlines():
        out += [" ".join(sentences) for _, sentences in json.loads(line)["context"]]
    return out


def paragraphs(real: list[str], count: int, seed: int = 7) -> list[tuple[str, str]]:
    """``count`` (title, text) paragraphs from a first-order word chain over the ``real`` ones: real words in
    Wikipedia's local order, each paragraph as long as a real one drawn at random (at most 100 words, DPR's
    passage length), its title the chain's first words — text an embedder places as it places 2Wiki's."""
    rng = random.Random(seed)
    follows: dict[str, list[str]] = {}
    starts: list[str] = []
    lengths: list[int] = []
    for text in real:
        words = text.split()
        if len(words) < 8:
            continue
        lengths.append(min(len(words), 100))
        starts.append(words[0])
        for a, b in itertools.pairwise(words):
            follows.setdefault(a, []).append(b)
    out = []
    for _ in range(count):
        word = rng.choice(starts)
        words = [word]
        for _ in range(rng.choice(lengths) + 3):
            nexts = follows.get(word)
            word = rng.choice(nexts) if nexts else rng.choice(starts)
            words.append(word)
        out.append((" ".join(words[:3]).strip(".,;"), " ".join(words[3:])))
    return out


def embedded(embedder: Embedder, data: Corpus, cache: Path | None) -> tuple[Vectors, Vectors]:
    """(passage vectors, question vectors), float32, unit length; the passages from ``cache`` where there."""
    file = None
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        name = f"{embedder.model_id}-{len(data.titles)}-{data.digest}.npy".replace("/", "_")
        file = cache / name
    if file is not None and file.exists():
        docs = np.load(file)
        print(f"  {embedder.model_id}: {len(docs):,} vectors from {file}", flush=True)
    else:
        began = time.perf_counter()
        texts = [f"{t}\n{x}" for t, x in zip(data.titles, data.texts, strict=True)]
        partial = file.with_suffix(".partial.npy") if file is not None else None
        parts: list[Vectors] = []
        if partial is not None and partial.exists():  # an interrupted run's vectors: go on after them
            parts.append(np.load(partial))
            print(f"    {len(parts[0]):,} vectors from {partial}", flush=True)
        done = sum(len(p) for p in parts)
        for start in range(done, len(texts), 512):
            parts.append(np.asarray(asyncio.run(embedder.embed(texts[start : start + 512])), dtype=np.float32))
            if (start // 512) % 10 == 9:
                rate = (sum(len(p) for p in parts) - done) / (time.perf_counter() - began)
                print(f"    {sum(len(p) for p in parts):,} embedded ({rate:.1f} passages/s)", flush=True)
                if partial is not None:
                    parts = [np.concatenate(parts)]
                    np.save(partial, parts[0])
        docs = np.concatenate(parts)
        took = time.perf_counter() - began
        print(f"  {embedder.model_id}: embedded {len(docs) - done:,} passages in {took:.0f} s", flush=True)
        if file is not None:
            np.save(file, docs)
        if partial is not None:
            partial.unlink(missing_ok=True)
    queries = np.asarray(asyncio.run(embed_queries(embedder, data.questions)), dtype=np.float32)
    return unit(docs), unit(queries)


def unit(v: Vectors) -> Vectors:
    out: Vectors = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def exact_top(docs: Vectors, queries: Vectors, k: int = 10) -> list[list[int]]:
    scores = queries @ docs.T
    return [list(np.argsort(-row, kind="stable")[:k]) for row in scores]


async def connect(url: str) -> Store:
    store = await Store.connect(Settings(es_url=[url], index_prefix="benchvec", embedder="none"))
    await store.close()  # only its server facts are needed for the bodies
    return store


class Dims:
    def __init__(self, model_id: str, dims: int) -> None:
        self.model_id = model_id
        self.dims = dims


#: the layout before ``HOPSEARCH_VECTOR_INDEX``: the vectors kept in ``_source``, the version's default index options
BEFORE = "before"


def create_and_load(url: str, store: Store, name: str, kind: str, model: str, data: Corpus, docs: Vectors) -> str:
    settings = store.settings.model_copy(update={"vector_index": "auto" if kind == BEFORE else kind})
    body = Store(settings, store.client, store.info).passages_body(Dims(model, docs.shape[1]), replicas=0)  # type: ignore[arg-type]
    chosen = str(body["mappings"]["_meta"]["hopsearch"]["vector_index"])
    if kind == BEFORE:
        body["mappings"]["properties"]["embedding"].pop("index_options", None)
        excludes = [f for f in body["mappings"].get("_source", {}).get("excludes", []) if f != "embedding"]
        body["mappings"]["_source"] = {"excludes": excludes} if excludes else {}
        body["mappings"]["_meta"]["hopsearch"]["vector_index"] = None
        chosen = BEFORE
    httpx.delete(f"{url}/{name}", timeout=60)
    httpx.put(f"{url}/{name}", json=body, timeout=120).raise_for_status()
    httpx.put(f"{url}/{name}/_settings", json={"index": {"refresh_interval": "-1"}}, timeout=60)
    with httpx.Client(timeout=600) as http:
        for start in range(0, len(docs), 500):
            lines = []
            for n in range(start, min(start + 500, len(docs))):
                doc = {
                    "title": data.titles[n],
                    "text": data.texts[n],
                    "source": "dpr",
                    "doc_id": str(n),
                    "chunk": 0,
                    "acl": ["public"],
                    "embedding": docs[n].tolist(),
                    "embedder": model,
                }
                lines += [orjson.dumps({"index": {"_index": name, "_id": str(n)}}), orjson.dumps(doc)]
            answer = http.post(
                f"{url}/_bulk", content=b"\n".join(lines) + b"\n", headers={"content-type": "application/x-ndjson"}
            )
            if answer.status_code != 200 or answer.json().get("errors"):
                raise RuntimeError(f"bulk into {name} failed: {answer.text[:400]}")
    httpx.post(f"{url}/{name}/_refresh", timeout=600)
    httpx.post(f"{url}/{name}/_forcemerge", params={"max_num_segments": 1}, timeout=3600)
    httpx.post(f"{url}/{name}/_refresh", timeout=600)
    return chosen


def knn_bodies(store: Store, kind: str, queries: Vectors, candidates: int, k: int = 10) -> list[dict[str, Any]]:
    options = knn_options(kind, store.info, candidates, store.settings.knn_oversample)
    return [knn_body(RetrievalQuery("", mode="dense", k=k), q.tolist(), k, knn_options=options) for q in queries]


def search_ids(url: str, name: str, bodies: list[dict[str, Any]]) -> list[list[int]]:
    out = []
    with httpx.Client(timeout=120) as http:
        for body in bodies:
            answer = http.post(f"{url}/{name}/_search", json=body | {"_source": False})
            answer.raise_for_status()
            out.append([int(h["_id"]) for h in answer.json()["hits"]["hits"]])
    return out


async def latencies(url: str, name: str, bodies: list[dict[str, Any]], seconds: float, clients: int = 4) -> list[float]:
    took: list[float] = []
    payloads = [orjson.dumps(b | {"_source": False}) for b in bodies]
    deadline = time.perf_counter() + seconds

    async def client(http: httpx.AsyncClient, offset: int) -> None:
        n = offset
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            answer = await http.post(f"{url}/{name}/_search", content=payloads[n % len(payloads)])
            answer.raise_for_status()
            took.append((time.perf_counter() - began) * 1000)
            n += 1

    async with httpx.AsyncClient(timeout=60, headers={"content-type": "application/json"}) as http:
        for payload in payloads[:10]:
            await http.post(f"{url}/{name}/_search", content=payload)
        await asyncio.gather(*(client(http, i * 7) for i in range(clients)))
    return took


def disk(url: str, name: str, count: int) -> tuple[float, float]:
    """(bytes per passage after the load, steady: less ``_recovery_source``)."""
    stats = httpx.get(f"{url}/{name}/_stats/store", timeout=60).json()["_all"]["primaries"]
    size = int(stats["store"]["size_in_bytes"])
    usage = httpx.post(f"{url}/{name}/_disk_usage", params={"run_expensive_tasks": "true"}, timeout=600).json()
    recovery = usage[name]["fields"].get("_recovery_source", {})
    rec = int(recovery.get("stored_fields_in_bytes") or 0)
    return size / count, (size - rec) / count


def memory(url: str, name: str, kind: str, dims: int, count: int) -> str:
    stats = httpx.get(f"{url}/{name}/_stats/dense_vector", timeout=60).json()["_all"]["primaries"]
    off = stats.get("dense_vector", {}).get("off_heap")
    if off:
        parts = {k.removeprefix("total_").removesuffix("_size_bytes"): int(v) for k, v in off.items() if v}
        quantized = sum(v for k, v in parts.items() if k in ("veq", "veb"))
        graph = parts.get("vex", 0)
        searched = (quantized or parts.get("vec", 0)) + graph
        detail = " ".join(f"{k} {v / count:.0f}" for k, v in parts.items() if k != "size_bytes")
        return f"{searched / count:7.0f} B (off_heap: {detail})"
    return f"{vector_bytes(kind, dims):7.0f} B (formula, no graph)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url8", default="http://127.0.0.1:9218")
    parser.add_argument("--url9", default="http://127.0.0.1:9219")
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    parser.add_argument("--embedders", default="minilm,e5")
    parser.add_argument("--options", default=",".join([BEFORE, "auto", *KINDS]))
    parser.add_argument("--candidates", default="100", help="num_candidates values, each measured (e.g. 50,100,200)")
    parser.add_argument("--vector-cache", type=Path, default=None, help="folder of the passages' vectors (.npy)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--keep", action="store_true", help="keep the benchvec-* indices")
    args = parser.parse_args()
    options = [o for o in args.options.split(",") if o]
    args.candidates = [int(c) for c in args.candidates.split(",") if c]
    data = corpus(args.questions, args.count)
    print(
        f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; {len(data.titles):,} passages "
        f"({data.real:,} 2Wiki paragraphs, the rest DPR-like synthetic), {len(data.questions)} 2Wiki questions",
        flush=True,
    )
    stores = {url: asyncio.run(connect(url)) for url in (args.url8, args.url9) if url}
    for model in args.embedders.split(","):
        embedder = make_embedder(Settings(embedder=model))  # type: ignore[arg-type]
        assert embedder is not None
        docs, queries = embedded(embedder, data, args.vector_cache)
        truth = exact_top(docs, queries)
        for url, store in stores.items():
            print(f"\n{embedder.model_id} ({docs.shape[1]}-d) on Elasticsearch {store.info.number}", flush=True)
            print(
                f"{'option':22s} {'cand':>5s} recall@10  all@10  disk B/passage (steady)  vector memory/passage  "
                "kNN p50/p95 ms"
            )
            done: dict[str, str] = {}
            for option in options:
                kind = (
                    BEFORE
                    if option == BEFORE
                    else choose_vector_index(option, store.info, docs.shape[1], store.settings.knn_oversample) or ""
                )
                label = f"{option}={kind}" if option == "auto" else option
                if kind in done:
                    print(f"{label:22s} (as {done[kind]})", flush=True)
                    continue
                name = f"benchvec-{store.info.major}-{model}-{kind}"
                chosen = create_and_load(url, store, name, option, embedder.model_id, data, docs)
                mapping = httpx.get(f"{url}/{name}/_mapping", timeout=60).json()[name]["mappings"]
                searched = mapping["properties"]["embedding"].get("index_options", {}).get("type", "")
                if chosen == BEFORE:  # the version's default, vectors in _source (9.x leaves them out itself)
                    label = f"before={searched}"
                after, steady = disk(url, name, len(docs))
                mem = memory(url, name, searched, docs.shape[1], len(docs))
                for candidates in args.candidates:
                    bodies = knn_bodies(store, "" if chosen == BEFORE else kind, queries, candidates)
                    found = search_ids(url, name, bodies)
                    recall = statistics.mean(len(set(f) & set(t)) / 10 for f, t in zip(found, truth, strict=True))
                    titles = [{data.titles[i] for i in f} for f in found]
                    every = statistics.mean(float(s <= t) for s, t in zip(data.supports, titles, strict=True))
                    took = sorted(asyncio.run(latencies(url, name, bodies, args.seconds)))
                    p50, p95 = statistics.median(took), took[int(len(took) * 0.95)]
                    print(
                        f"{label:22s} {candidates:5d} {recall:9.3f}  {every:6.2f}  {after:8,.0f} ({steady:7,.0f})  "
                        f"{mem}  {p50:6.1f} / {p95:6.1f}",
                        flush=True,
                    )
                done[kind] = label
                if not args.keep:
                    httpx.delete(f"{url}/{name}", timeout=60)


if __name__ == "__main__":
    main()
