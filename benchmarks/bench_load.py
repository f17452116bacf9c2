"""Load benchmark: the hopsearch DPR loader against the node's own limit and a DeepRAG-style load.

One run, one local Elasticsearch node (started here from the integ-test-zip on a free port, in a
temporary folder, stopped at the end) and one generated DPR-format file (~100-word passages with
CSV-quoted double quotes), BM25 only. It prints docs/s for

  (a) ``hopsearch index dpr FILE --no-embed`` (in a subprocess, so its peak RSS can be read),
  (b) the node's limit: pre-built NDJSON bodies posted to ``_bulk`` over several connections, with the
      best batch size of a short trial,
  (c) single-threaded synchronous ``helpers.bulk`` over per-row dicts (how DeepRAG's prep_elastic.py
      loads psgs_w100.tsv),

the ratios a/b and a/c, the CPU seconds the node and the client spent on each (the client of (a) is the
loader subprocess, started Python included), and the loader's peak RSS at ``--rows`` and at
``--rss-rows`` passages.
Every load goes into a fresh index with the passages mapping, ``refresh_interval -1`` and no replicas,
writes the same documents, and is timed until searchable (final refresh included). (a), (b) and (c)
run ``--rounds`` times in a rotating order; the medians are compared (a shared 2-core machine drifts).

    .venv/bin/python benchmarks/bench_load.py --rows 200000 --rss-rows 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson

from hopsearch.cli.local import esnode
from hopsearch.service.config.settings import load_settings
from hopsearch.service.store import Store

_WORDS = (
    "the of and in to a was is for on as by with he at from his an were are which this be also has or had "
    "its first their new after who they one two her she been other when time during there into school city "
    "film river album war county team season church university born family town music game world league "
    "national district village station party government railway club player known called later state north "
    "south played released former british american french german population century began received"
)
VOCAB = _WORDS.split()


def generate(path: Path, rows: int, seed: int = 11) -> None:
    """``rows`` DPR rows: ~100 words from a pool of sentences, some quoted ("..."), like psgs_w100."""
    rng = random.Random(seed)
    pool = []
    for _ in range(4000):
        words = [rng.choice(VOCAB) for _ in range(rng.randint(8, 14))]
        if rng.random() < 0.3:
            k = rng.randrange(len(words))
            words[k] = f'"{words[k]}"'
        pool.append(" ".join(words).capitalize() + ".")
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerow(["id", "text", "title"])
        for n in range(1, rows + 1):
            text = " ".join(rng.choices(pool, k=9))
            writer.writerow([n, text, f"{rng.choice(VOCAB).title()} {rng.choice(VOCAB)} ({n % 997})"])


def rows_of(path: Path, limit: int | None = None) -> Iterator[tuple[str, str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh, delimiter="\t")
        next(reader)
        for n, (pid, text, title) in enumerate(reader):
            if limit is not None and n >= limit:
                return
            yield pid, text, title


STAMP = "2026-01-01T00:00:00+00:00"


def document(pid: str, text: str, title: str) -> dict[str, Any]:
    """The same document the loader writes, so all three loads index the same fields."""
    return {"title": title, "text": text, "source": "dpr", "doc_id": pid, "indexed_at": STAMP}


def create_index(url: str, name: str, body: dict[str, Any]) -> None:
    httpx.put(f"{url}/{name}", json=body, timeout=60).raise_for_status()
    httpx.put(f"{url}/{name}/_settings", json={"index": {"refresh_interval": "-1"}}, timeout=60)


def refresh(url: str, name: str) -> None:
    httpx.post(f"{url}/{name}/_refresh", timeout=300).raise_for_status()


def finish_index(url: str, name: str) -> int:
    refresh(url, name)
    count = int(httpx.get(f"{url}/{name}/_count", timeout=60).json()["count"])
    httpx.delete(f"{url}/{name}", timeout=60)
    return count


def ndjson_bodies(path: Path, index: str, batch: int, limit: int | None) -> list[bytes]:
    bodies, lines = [], []
    for pid, text, title in rows_of(path, limit):
        lines.append(orjson.dumps({"index": {"_index": index, "_id": pid}}))
        lines.append(orjson.dumps(document(pid, text, title)))
        if len(lines) >= 2 * batch:
            bodies.append(b"\n".join(lines) + b"\n")
            lines = []
    if lines:
        bodies.append(b"\n".join(lines) + b"\n")
    return bodies


async def post_all(url: str, bodies: list[bytes], connections: int) -> float:
    queue = list(reversed(bodies))
    headers = {"content-type": "application/x-ndjson"}

    async def worker(http: httpx.AsyncClient) -> None:
        while queue:
            body = queue.pop()
            response = await http.post(f"{url}/_bulk", content=body, params={"filter_path": "errors"})
            if response.status_code != 200 or response.json().get("errors"):
                raise RuntimeError(f"bulk failed: {response.status_code} {response.text[:300]}")

    limits = httpx.Limits(max_connections=connections)
    async with httpx.AsyncClient(timeout=300, limits=limits, headers=headers) as http:
        began = time.perf_counter()
        await asyncio.gather(*(worker(http) for _ in range(connections)))
        return time.perf_counter() - began


def node_trials(url: str, path: Path, body: dict[str, Any], rows: int, trial_rows: int) -> tuple[int, int]:
    """(b): try batch sizes and connection counts on ``trial_rows``; the best (batch, connections)."""
    trials: list[tuple[float, int, int]] = []
    for batch in (500, 1000, 2000, 5000):
        for connections in (2, 4):
            name = f"bench-b-{batch}-{connections}"
            create_index(url, name, body)
            bodies = ndjson_bodies(path, name, batch, trial_rows)
            began = time.perf_counter()
            asyncio.run(post_all(url, bodies, connections))
            refresh(url, name)
            seconds = time.perf_counter() - began
            assert finish_index(url, name) == min(rows, trial_rows)
            trials.append((min(rows, trial_rows) / seconds, batch, connections))
            print(f"    trial batch {batch:>5} x {connections} connections: {trials[-1][0]:>9,.0f} docs/s", flush=True)
    _, batch, connections = max(trials)
    return batch, connections


def node_run(url: str, path: Path, body: dict[str, Any], rows: int, batch: int, connections: int) -> float:
    """(b) on the whole file with the chosen batch size; docs/s until searchable (refresh included)."""
    create_index(url, "bench-b", body)
    bodies = ndjson_bodies(path, "bench-b", batch, None)
    began = time.perf_counter()
    asyncio.run(post_all(url, bodies, connections))
    refresh(url, "bench-b")
    seconds = time.perf_counter() - began
    assert finish_index(url, "bench-b") == rows
    return rows / seconds


def helpers_bulk(url: str, path: Path, body: dict[str, Any], rows: int) -> float:
    """(c): DeepRAG's way: sync client, one thread, ``helpers.bulk`` over a generator of row dicts."""
    from elasticsearch import Elasticsearch, helpers

    create_index(url, "bench-c", body)
    client = Elasticsearch(url, request_timeout=300)
    actions = (
        {"_index": "bench-c", "_id": pid, "_source": document(pid, text, title)} for pid, text, title in rows_of(path)
    )
    began = time.perf_counter()
    helpers.bulk(client, actions)
    refresh(url, "bench-c")
    seconds = time.perf_counter() - began
    client.close()
    assert finish_index(url, "bench-c") == rows
    return rows / seconds


#: Runs the CLI and reports the process's own peak RSS (VmHWM: per address space, so unlike
#: ru_maxrss it does not include the benchmark process's RSS inherited at fork time).
CHILD = """
import atexit, sys
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            sys.stderr.write("PEAK_RSS_KB " + line.split()[1] + "\\n")
atexit.register(peak)
from hopsearch.cli.main import main
sys.argv[0] = "hopsearch"
main()
"""


def run_loader(url: str, path: Path, prefix: str, state: Path, extra: list[str]) -> tuple[dict[str, Any], float]:
    """(a) in a subprocess: its JSON report and its peak RSS in MiB."""
    env = {
        **os.environ,
        "HOPSEARCH_ES_URL": url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_STATE_DIR": str(state),
        "HOPSEARCH_EMBEDDER": "none",
    }
    cmd = [sys.executable, "-c", CHILD, "index", "dpr", str(path), "--no-embed", "--quiet", "--json", *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"loader failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
    report: dict[str, Any] = json.loads(proc.stdout)
    peak = [line for line in proc.stderr.decode().splitlines() if line.startswith("PEAK_RSS_KB")]
    httpx.delete(f"{url}/{prefix}-*", timeout=60)
    return report, int(peak[-1].split()[1]) / 1024


async def passages_body(url: str) -> dict[str, Any]:
    store = await Store.connect(load_settings(es_url=[url], embedder="none"))
    try:
        return store.passages_body(None)
    finally:
        await store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000, help="passages for (a), (b), (c)")
    parser.add_argument("--rss-rows", type=int, default=1_000_000, help="second loader run for RSS; 0 skips")
    parser.add_argument("--trial-rows", type=int, default=50_000, help="rows per batch-size trial of (b)")
    parser.add_argument("--es-version", default=load_settings().es_version)
    parser.add_argument("--heap", default="1g")
    parser.add_argument("--rounds", type=int, default=3, help="(a), (b), (c) alternate this many times")
    parser.add_argument("--loader-args", default="", help="extra args for the loader, e.g. '--workers 4'")
    args = parser.parse_args()
    settings = load_settings()
    with tempfile.TemporaryDirectory(prefix="hopsearch-bench-") as tmp:
        work = Path(tmp)
        spec = esnode.NodeSpec(
            version=args.es_version, port=esnode.free_port(), node_dir=work / "node",
            cache_dir=settings.cache_dir, heap=args.heap,
        )  # fmt: skip
        print(f"starting Elasticsearch {spec.version} (heap {spec.heap}) on {spec.url} ...", flush=True)
        esnode.start(spec, timeout=300)
        try:
            return bench(args, spec.url, work, esnode.read_pid(spec) or 0)
        finally:
            esnode.stop(spec)


def group_cpu(group: int) -> float:
    """CPU seconds (user + system) of the live processes of a process group (the node's)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def client_cpu() -> float:
    """CPU seconds of this process and its finished children (the loader subprocess of (a))."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def bench(args: argparse.Namespace, url: str, work: Path, node_group: int) -> int:
    data = work / "psgs_w100.tsv"
    began = time.perf_counter()
    generate(data, args.rows)
    size_mb = data.stat().st_size / 1e6
    print(f"generated {args.rows:,} passages ({size_mb:.1f} MB) in {time.perf_counter() - began:.1f} s", flush=True)
    body = asyncio.run(passages_body(url))
    warm = work / "warm.tsv"
    generate(warm, 20_000, seed=3)
    run_loader(url, warm, "benchwarm", work / "state", [])  # JIT and caches warm for everyone
    print(f"(b) node limit: batch-size trials on {min(args.rows, args.trial_rows):,} rows", flush=True)
    batch, connections = node_trials(url, data, body, args.rows, args.trial_rows)
    extra = args.loader_args.split()
    rates: dict[str, list[float]] = {"a": [], "b": [], "c": []}
    rss_small = 0.0
    cpu: dict[str, list[tuple[float, float]]] = {"a": [], "b": [], "c": []}
    for n in range(1, args.rounds + 1):
        # rotate the order each round so drifting background load does not favour one method
        for method in "abc"[(n - 1) % 3 :] + "abc"[: (n - 1) % 3]:
            node_before, client_before = group_cpu(node_group), client_cpu()
            if method == "a":
                report, rss = run_loader(url, data, f"bencha{n}", work / "state", extra)
                assert report["reconciled"] and report["indexed"] == args.rows, report
                rss_small = max(rss_small, rss)
                rates["a"].append(args.rows / report["seconds"])
            elif method == "b":
                rates["b"].append(node_run(url, data, body, args.rows, batch, connections))
            else:
                rates["c"].append(helpers_bulk(url, data, body, args.rows))
            cpu[method].append((group_cpu(node_group) - node_before, client_cpu() - client_before))
        print(
            f"  round {n}: a {rates['a'][-1]:,.0f}  b {rates['b'][-1]:,.0f}  c {rates['c'][-1]:,.0f} docs/s", flush=True
        )
    a, b, c = (statistics.median(rates[k]) for k in "abc")
    print(f"medians over {args.rounds} rounds ({args.rows:,} passages each, timed until searchable):")
    print(f"(a) hopsearch loader (index dpr --no-embed {args.loader_args}):".ljust(52) + f"{a:>9,.0f} docs/s")
    print(f"(b) node limit, pre-built NDJSON, batch {batch} x {connections} conn:".ljust(52) + f"{b:>9,.0f} docs/s")
    print("(c) helpers.bulk, one thread, per-row dicts:".ljust(52) + f"{c:>9,.0f} docs/s")
    print(f"CPU seconds per load (medians; the node and the client share {os.cpu_count()} CPUs):")
    for k in "abc":
        node_s, client_s = (statistics.median(pair[i] for pair in cpu[k]) for i in (0, 1))
        print(f"  ({k}) node {node_s:6.2f} s   client {client_s:6.2f} s")
    print(f"a/b = {a / b:.2f}   (target >= 0.9)")
    print(f"a/c = {a / c:.2f}   (target >= 2)")
    print(f"loader peak RSS at {args.rows:,} passages: {rss_small:.1f} MiB", flush=True)
    if args.rss_rows:
        big = work / "psgs_big.tsv"
        data.unlink()
        generate(big, args.rss_rows, seed=5)
        report, rss_big = run_loader(url, big, "benchrss", work / "state", extra)
        assert report["reconciled"] and report["indexed"] == args.rss_rows, report
        print(
            f"loader peak RSS at {args.rss_rows:,} passages: {rss_big:.1f} MiB "
            f"({args.rss_rows / report['seconds']:,.0f} docs/s); ratio {rss_big / rss_small:.3f} (target <= 1.10)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
