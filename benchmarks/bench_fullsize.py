"""Wikipedia at full size on one node of this machine: 21,015,324 DPR-shaped rows, BM25 only.

    .venv/bin/python benchmarks/bench_fullsize.py [--rows 21015324] [--small 200000] [--work DIR] \\
        [--heap 2g] [--llm-url http://127.0.0.1:8080/v1] [--questions 3] [--requests 200]

One run, one local Elasticsearch 8.19 node started here (integ-test-zip from the cache, ``--heap``, its
data under ``--work``, stopped at the end) and one generated ``psgs_w100.tsv``-shaped file of ``--rows``
rows under ``--work`` (kept for the next run; ``--rows`` passages of ~100 words, the words drawn with
Zipf's law as :func:`benchmarks.bench_capacity.passages` draws them: the bundled 2Wiki sample's real words
first, then made-up ones, so the term dictionary grows with the corpus as a language's does). Before
anything is written the free disk is checked against what the file and the index need; where it is
short, the largest row count that fits is used and said so.

It prints

- the node's own ``_bulk`` ceiling: pre-built NDJSON bodies of the file's first ``--small`` rows over
  several connections (the best batch size of a short trial, as ``bench_load.py`` measures it);
- ``hopsearch index dpr FILE --no-embed --limit SMALL`` into one index (the small one) and the whole
  file into another (the full one), each in a subprocess, timed until searchable: docs/s against the
  ceiling; for the full load a line per ``--every`` seconds (passages, docs/s in that window, store size,
  heap), which is the cost-against-size curve of the load;
- per index: store size (``_stats``; as loaded, not force-merged), bytes per passage, segments, the
  node's heap used after a GC-settling pause;
- per index, interleaved (A B C A B C ...): ``POST /{index}/_retrieve`` (BM25, k = 10) through ``hopsearch
  serve``, the same with ``"hops": 1`` (the made-up titles name nothing: the hop's cost, not its use) and the
  same body straight to the node's ``_search``, p50/p95 over ``--requests`` questions of
  the shipped 2Wiki sample; and a DualRAG step: one ``_msearch`` of 9 BM25 queries (3 entities x 3
  keywords from the question, k = 50), p50/p95, one client;
- per index, ``--shapes`` questions straight to the node in each BM25 query shape: DeepRAG's
  (``multi_match`` best_fields with ``tie_breaker`` 0.5: a dis_max that scores every matching document),
  best_fields without the tie breaker and most_fields (the default; these two let Lucene skip
  non-competitive blocks),
  p50/p95 (``combined_fields`` refuses the passages' fields: their analyzers differ);
- with an LLM at ``--llm-url`` (``hopsearch llm up``): ``--questions`` DeepRAG questions per index through
  ``hopsearch ask --strategy deeprag --few-shot --json``, each trace's retrieval time (the ``retrieve`` steps'
  latency) as a share of its wall time.

``--skip-load`` reuses the indices a previous run with ``--keep`` left (``--work`` must be the same).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_capacity import vocabulary  # noqa: E402
from benchmarks.bench_load import (  # noqa: E402
    create_index,
    ndjson_bodies,
    node_trials,
    passages_body,
    post_all,
    refresh,
)
from hopsearch.cli.local import esnode  # noqa: E402
from hopsearch.service.config.settings import load_settings  # noqa: E402
from hopsearch.service.retrieval import bm25_body  # noqa: E402
from hopsearch.service.types import RetrievalQuery  # noqa: E402

DPR_PASSAGES = 21_015_324
VERSION = "8.19.21"
SAMPLE = ROOT / "loaders" / "data" / "sample_2wiki.jsonl"
KEY = "bench-fullsize-key-0123456789abcdef"
#: the CLI as a subprocess (hopsearch.cli.main has no ``__main__``)
HOPSEARCH = [sys.executable, "-c", "from hopsearch.cli.main import main; main()"]
#: bytes per row of the file and of the BM25 index as loaded (recovery source included), with margin
FILE_BYTES, INDEX_BYTES = 760, 1100
GB = 1024**3


def generate(path: Path, rows: int, seed: int = 7, chunk: int = 50_000) -> None:
    """``rows`` DPR rows (id, text, title) written in chunks; a finished file is marked by ``.done``."""
    done = path.with_suffix(".done")
    if path.exists() and done.exists() and done.read_text().strip() == str(rows):
        print(f"file: {path} ({rows:,} rows, {path.stat().st_size / GB:.1f} GiB) from an earlier run", flush=True)
        return
    words = np.asarray(vocabulary(1_000_000), dtype=object)
    ranks = np.arange(1, len(words) + 1, dtype=np.float64)
    weights = 1.0 / ranks**1.2
    cdf = np.cumsum(weights / weights.sum())
    rng = np.random.default_rng(seed)
    began = time.perf_counter()
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerow(["id", "text", "title"])
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            drawn = np.minimum(np.searchsorted(cdf, rng.random(n * 104)), len(words) - 1).reshape(n, 104)
            table = words[drawn].tolist()
            writer.writerows(
                (start + i + 1, " ".join(row[4:]).capitalize() + ".", " ".join(row[:4]).title())
                for i, row in enumerate(table)
            )
            if (start // chunk) % 40 == 0:
                rate = (start + n) / (time.perf_counter() - began)
                print(f"  generated {start + n:,} rows ({rate:,.0f} rows/s)", flush=True)
    done.write_text(str(rows))
    took = time.perf_counter() - began
    print(f"file: {path} ({rows:,} rows, {path.stat().st_size / GB:.1f} GiB) generated in {took:.0f} s", flush=True)


def rows_that_fit(work: Path, rows: int, have_file: bool) -> int:
    free = shutil.disk_usage(work).free
    need = rows * (INDEX_BYTES * 1.1 + (0 if have_file else FILE_BYTES))  # the small index too
    if need <= free:
        return rows
    fit = int(free / (INDEX_BYTES * 1.1 + (0 if have_file else FILE_BYTES)) * 0.9)
    print(
        f"DISK: {free / GB:.0f} GiB free under {work} holds {fit:,} rows, not {rows:,}: measuring {fit:,}",
        flush=True,
    )
    return fit


def ceiling(url: str, path: Path, body: dict[str, Any], rows: int) -> tuple[float, int, int]:
    """The node's ``_bulk`` docs/s on the file's first ``rows`` rows: best of a short trial, then a full run."""
    batch, connections = node_trials(url, path, body, rows, 50_000)
    create_index(url, "fullsize-b", body)
    bodies = ndjson_bodies(path, "fullsize-b", batch, rows)
    began = time.perf_counter()
    asyncio.run(post_all(url, bodies, connections))
    refresh(url, "fullsize-b")
    rate = rows / (time.perf_counter() - began)
    httpx.delete(f"{url}/fullsize-b", timeout=60)
    return rate, batch, connections


def node_stats(url: str, index: str) -> dict[str, float]:
    stats = httpx.get(f"{url}/{index}/_stats/docs,store,segments", timeout=60).json()["_all"]["primaries"]
    jvm = next(iter(httpx.get(f"{url}/_nodes/_local/stats/jvm", timeout=60).json()["nodes"].values()))["jvm"]
    return {
        "docs": float(stats["docs"]["count"]),
        "store": float(stats["store"]["size_in_bytes"]),
        "segments": float(stats["segments"]["count"]),
        "heap": float(jvm["mem"]["heap_used_in_bytes"]),
        "heap_max": float(jvm["mem"]["heap_max_in_bytes"]),
    }


def load(url: str, path: Path, index: str, env: dict[str, str], limit: int | None, every: float) -> float:
    """``hopsearch index dpr`` in a subprocess; seconds until searchable (the loader's own report)."""
    cmd = [*HOPSEARCH, "index", "dpr", str(path), "--no-embed", "--quiet", "--json"]
    cmd += ["--index", index] + (["--limit", str(limit)] if limit else [])
    stop = threading.Event()

    def watch() -> None:
        last_docs, last_t = 0.0, time.perf_counter()
        while not stop.wait(every):
            try:
                s = node_stats(url, index)
            except (httpx.HTTPError, KeyError):
                continue
            now = time.perf_counter()
            rate = (s["docs"] - last_docs) / (now - last_t)
            last_docs, last_t = s["docs"], now
            print(
                f"    {s['docs']:>12,.0f} passages  {rate:>8,.0f} docs/s  store {s['store'] / GB:6.2f} GiB  "
                f"{s['segments']:4.0f} segments  heap {s['heap'] / 2**20:,.0f}/{s['heap_max'] / 2**20:,.0f} MiB  "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, check=False)
    finally:
        stop.set()
        watcher.join()
    if proc.returncode != 0:
        raise RuntimeError(f"loader failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
    report: dict[str, Any] = json.loads(proc.stdout)
    want = limit or int(path.with_suffix(".done").read_text())
    if report.get("indexed") != want:
        raise RuntimeError(f"the loader indexed {report.get('indexed')} of {want}: {report}")
    return float(report["seconds"])


def questions(count: int) -> list[str]:
    out = []
    for line in SAMPLE.read_text(encoding="utf-8").splitlines():
        out.append(json.loads(line)["question"])
    return (out * (count // len(out) + 1))[:count]


def step_body(index: str, question: str) -> bytes:
    """One DualRAG step: 3 entities x 3 keywords from the question, k = 50, in one ``_msearch``."""
    words = [w.strip("?,.'\"") for w in question.split() if len(w) > 3] or question.split()
    lines = []
    for e in range(3):
        for k in range(3):
            query = " ".join(words[(e * 3 + k + j) % len(words)] for j in range(2))
            lines += [orjson.dumps({"index": index}), orjson.dumps(bm25_body(RetrievalQuery(query, k=50), 50))]
    return b"\n".join(lines) + b"\n"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def latencies(es: str, api: str, index: str, asked: list[str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"service": [], "hop": [], "direct": [], "step": []}
    headers = {"Authorization": f"ApiKey {KEY}", "Accept-Encoding": "identity"}
    plain = {"Accept-Encoding": "identity"}
    async with (
        httpx.AsyncClient(base_url=api, headers=headers, timeout=60) as service,
        httpx.AsyncClient(base_url=es, headers=plain, timeout=60) as direct,
    ):
        for q in asked[:5]:  # warm: caches, pools, the node's query path
            await service.post(f"/{index}/_retrieve", json={"query": q, "k": 10})
            await service.post(f"/{index}/_retrieve", json={"query": q, "k": 10, "hops": 1})
            await direct.post(f"/{index}/_search", json=bm25_body(RetrievalQuery(q, k=10), 10))
        for q in asked:
            began = time.perf_counter()
            answer = await service.post(f"/{index}/_retrieve", json={"query": q, "k": 10})
            out["service"].append((time.perf_counter() - began) * 1000)
            answer.raise_for_status()
            began = time.perf_counter()
            answer = await service.post(f"/{index}/_retrieve", json={"query": q, "k": 10, "hops": 1})
            out["hop"].append((time.perf_counter() - began) * 1000)
            answer.raise_for_status()
            began = time.perf_counter()
            answer = await direct.post(f"/{index}/_search", json=bm25_body(RetrievalQuery(q, k=10), 10))
            out["direct"].append((time.perf_counter() - began) * 1000)
            answer.raise_for_status()
            began = time.perf_counter()
            answer = await direct.post(
                "/_msearch", content=step_body(index, q), headers={"content-type": "application/x-ndjson"}
            )
            out["step"].append((time.perf_counter() - began) * 1000)
            if answer.status_code != 200 or any("error" in r for r in answer.json()["responses"]):
                raise RuntimeError(f"msearch failed: {answer.text[:300]}")
    return out


def shaped(query: RetrievalQuery, shape: str) -> dict[str, Any]:
    """The product's BM25 body of ``query`` in ``shape`` (the profile's question: which shapes let Lucene
    skip non-competitive documents): its two ``bm25_query`` kinds, and best_fields without the tie breaker
    (a plain ``dis_max``, not a setting)."""
    if shape.startswith("most_fields"):
        return bm25_body(query, 10, kind="most_fields")
    body = bm25_body(query, 10, kind="best_fields")
    if shape == "best_fields, no tie_breaker":
        body["query"]["bool"]["must"][0]["multi_match"].pop("tie_breaker")
    return body


SHAPES = ("best_fields, tie_breaker 0.5 (DeepRAG's)", "best_fields, no tie_breaker", "most_fields (the default)")


async def shape_latencies(es: str, index: str, asked: list[str]) -> dict[str, list[float]]:
    """p50 material per query shape, straight to the node, interleaved per question."""
    out: dict[str, list[float]] = {shape: [] for shape in SHAPES}
    async with httpx.AsyncClient(base_url=es, headers={"Accept-Encoding": "identity"}, timeout=120) as direct:
        for q in asked:
            for shape in SHAPES:
                body = shaped(RetrievalQuery(q, k=10), shape)
                began = time.perf_counter()
                answer = await direct.post(f"/{index}/_search", json=body)
                out[shape].append((time.perf_counter() - began) * 1000)
                answer.raise_for_status()
    return out


def deeprag_share(env: dict[str, str], index: str, asked: list[str]) -> list[tuple[float, float]]:
    """Per question: (wall ms, retrieval ms) from its trace."""
    out = []
    for q in asked:
        cmd = [*HOPSEARCH, "ask", q, "--strategy", "deeprag", "--few-shot", "--json"]
        proc = subprocess.run([*cmd, "--index", index], env=env, capture_output=True, check=False, timeout=900)
        if proc.returncode != 0:
            print(f"    ask failed ({proc.returncode}): {proc.stderr.decode()[-500:]}", flush=True)
            continue
        trace = json.loads(proc.stdout)
        searches = [s for s in trace["steps"] if s.get("kind") == "retrieve"]
        retrieval = sum(float(s.get("latency_ms") or 0) for s in searches)
        print(
            f"    {len(searches)} retrievals, {retrieval:.0f} ms of {trace['totals']['wall_ms'] / 1000:.1f} s",
            flush=True,
        )
        out.append((float(trace["totals"]["wall_ms"]), retrieval))
    return out


def wait_ready(api: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{api}/_health/live", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("hopsearch serve did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=DPR_PASSAGES)
    parser.add_argument("--small", type=int, default=200_000)
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "hopsearch" / "bench-fullsize")
    parser.add_argument("--heap", default="2g")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--every", type=float, default=60.0, help="seconds between load-progress lines")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--shapes", type=int, default=30, help="questions per BM25 query shape (0: none)")
    parser.add_argument("--questions", type=int, default=3, help="DeepRAG questions per index (0: none)")
    parser.add_argument("--llm-url", default=f"http://127.0.0.1:{load_settings().llm_port}/v1")
    parser.add_argument("--keep", action="store_true", help="keep the node's data and the indices")
    parser.add_argument("--skip-load", action="store_true", help="reuse the indices of a run with --keep")
    args = parser.parse_args()
    settings = load_settings()
    args.work.mkdir(parents=True, exist_ok=True)
    data = args.work / "psgs_w100.tsv"
    have = data.with_suffix(".done").exists() and data.with_suffix(".done").read_text().strip() == str(args.rows)
    rows = rows_that_fit(args.work, args.rows, have) if not args.skip_load else args.rows
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; Elasticsearch {VERSION}")
    generate(data, rows)
    node_dir = args.work / "node"
    if not args.skip_load and node_dir.exists():
        shutil.rmtree(node_dir)
    spec = esnode.NodeSpec(
        version=VERSION, port=args.port or esnode.free_port(), node_dir=node_dir,
        cache_dir=settings.cache_dir, heap=args.heap,
    )  # fmt: skip
    print(f"starting Elasticsearch {VERSION} (heap {args.heap}) on {spec.url} ...", flush=True)
    esnode.start(spec, timeout=600)
    serve = None
    try:
        url = spec.url
        env = {
            **os.environ,
            "HOPSEARCH_ES_URL": url,
            "HOPSEARCH_INDEX_PREFIX": "fullsize",
            "HOPSEARCH_STATE_DIR": str(args.work / "state"),
            "HOPSEARCH_EMBEDDER": "none",
            "HOPSEARCH_LLM_BASE_URL": args.llm_url,
        }
        small, full = "fullsize-passages-v1", "fullsize-passages-v2"  # versions of the alias: what the service serves
        if not args.skip_load:
            body = asyncio.run(passages_body(url))
            rate, batch, conns = ceiling(url, data, body, min(args.small, rows))
            print(f"node _bulk ceiling on {min(args.small, rows):,} rows: {rate:,.0f} docs/s (batch {batch} x {conns})")
            took = load(url, data, small, env, min(args.small, rows), args.every)
            print(
                f"index dpr --limit {args.small:,}: {took:.0f} s, {args.small / took:,.0f} docs/s "
                f"({args.small / took / rate:.2f} of the ceiling)"
            )
            print(f"index dpr, all {rows:,} rows (a line per {args.every:.0f} s):", flush=True)
            took = load(url, data, full, env, None, args.every)
            print(
                f"index dpr, all {rows:,} rows: {took:,.0f} s ({took / 3600:.2f} h), {rows / took:,.0f} docs/s "
                f"({rows / took / rate:.2f} of the ceiling)",
                flush=True,
            )
        time.sleep(30)  # let merges and a GC settle before the sizes and the heap are read
        for index in (small, full):
            s = node_stats(url, index)
            print(
                f"{index}: {s['docs']:,.0f} passages, store {s['store'] / GB:.2f} GiB ({s['store'] / s['docs']:,.0f} "
                f"B/passage, as loaded), {s['segments']:.0f} segments; node heap {s['heap'] / 2**20:,.0f} of "
                f"{s['heap_max'] / 2**20:,.0f} MiB",
                flush=True,
            )
        port = esnode.free_port()
        api = f"http://127.0.0.1:{port}"
        serve = subprocess.Popen(
            [*HOPSEARCH, "serve"],
            env={**env, "HOPSEARCH_API_KEYS": KEY, "HOPSEARCH_API_HOST": "127.0.0.1", "HOPSEARCH_API_PORT": str(port)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_ready(api)
        asked = questions(args.requests)
        if asked:
            print(f"latency, {args.requests} 2Wiki questions, one client, interleaved (ms p50 / p95):")
            head = ("_retrieve (service)", "hops 1 (service)", "_search (node)", "DualRAG step (9 x k=50)")
            print(f"{'index':16s} {head[0]:>22s} {head[1]:>22s} {head[2]:>18s} {head[3]:>26s}")
            for index in (small, full):
                lat = asyncio.run(latencies(url, api, index, asked))
                cells = [
                    f"{statistics.median(lat[k]):7.1f} / {pct(lat[k], 0.95):7.1f}"
                    for k in ("service", "hop", "direct", "step")
                ]
                ratio = statistics.median(lat["hop"]) / statistics.median(lat["service"])
                print(
                    f"{index:16s} {cells[0]:>22s} {cells[1]:>22s} {cells[2]:>18s} {cells[3]:>26s}   "
                    f"hops 1 / 0: p50 {ratio:.2f}x",
                    flush=True,
                )
        if args.shapes:
            print(f"BM25 query shapes, {args.shapes} questions straight to the node, one client (ms p50 / p95):")
            for index in (small, full):
                lat = asyncio.run(shape_latencies(url, index, questions(args.shapes)))
                cells = "   ".join(f"{k}: {statistics.median(v):.1f} / {pct(v, 0.95):.1f}" for k, v in lat.items())
                print(f"  {index}: {cells}", flush=True)
        if args.questions:
            try:
                httpx.get(args.llm_url.rstrip("/") + "/models", timeout=5).raise_for_status()
            except httpx.HTTPError as exc:
                print(f"DeepRAG: no LLM at {args.llm_url} ({exc}): start one with `hopsearch llm up`")
                return 0
            print(f"DeepRAG, {args.questions} questions per index, the LLM at {args.llm_url}:")
            for index in (small, full):
                shares = deeprag_share(env, index, questions(args.questions))
                if not shares:
                    continue
                wall = statistics.median(w for w, _ in shares)
                ret = statistics.median(r for _, r in shares)
                share = sum(r for _, r in shares) / sum(w for w, _ in shares)
                print(
                    f"{index:16s} wall p50 {wall / 1000:6.1f} s, retrieval p50 {ret:7.1f} ms per question, "
                    f"retrieval share {share:.4f}",
                    flush=True,
                )
        return 0
    finally:
        if serve is not None:
            serve.terminate()
            serve.wait(10)
        esnode.stop(spec)
        if not args.keep:
            shutil.rmtree(node_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
