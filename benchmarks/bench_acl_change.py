"""What an ACL-only change costs: a folder's sidecar changes and ``index docs`` runs again, re-sending every
chunk whole with its new ``acl`` — against embedding the same chunks again (what re-sending them without
the vector cache and the read-back would cost).

    .venv/bin/python benchmarks/bench_acl_change.py [--es URL] [--files 200] [--rounds 3]

One folder of FILES Markdown files (~3 chunks each) is loaded once with MiniLM into a fresh index prefix.
Then, interleaved for ROUNDS rounds, the sidecar flips between two ACLs and the folder is loaded again in
three ways, each timed with the texts the embedder was asked for:

- ``cache``: the vector cache holds the vectors (the usual case: the machine that loaded them);
- ``read-back``: no cache (``vector_cache_mb=0``): vectors read back from the index's ``_source``;
- ``re-embed``: the same chunks into a new index, embedded (the cost an ACL change would have without
  either).

Prints seconds and embedded texts per way (median over rounds) and the ratios to ``re-embed``. Needs a
running Elasticsearch (the dev node by default); removes its indices and cache afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from hopsearch.loaders.config import LoadConfig
from hopsearch.loaders.docs import load_docs
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.config.settings import Settings
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.store import Store

PARA = (
    "The travel policy covers flights, hotels and meals for every trip an employee takes on company business. "
    "Receipts are kept for seven years, and a manager approves each claim within two weeks of the trip. "
)


class Counting:
    def __init__(self, inner: MiniLMEmbedder) -> None:
        self.inner, self.texts = inner, 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dims(self) -> int:
        return self.inner.dims

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += len(texts)
        return await self.inner.embed(texts)


def _folder(root: Path, files: int) -> None:
    root.mkdir(parents=True)
    for n in range(files):
        (root / f"doc-{n:04d}.md").write_text(
            f"# Document {n}\n\n" + "\n\n".join(f"{PARA} Part {p}." for p in range(6))
        )


async def _timed(settings: Settings, root: Path, embedder: Counting) -> tuple[float, int, int]:
    embedder.texts = 0
    async with await Store.connect(settings) as store:
        started = time.perf_counter()
        report = await load_docs(store, root, LoadOptions(config=LoadConfig.of(settings)), embedder=embedder)
        return time.perf_counter() - started, embedder.texts, report.documents


async def main(es: str, files: int, rounds: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-acl-"))
    prefix = f"benchacl{uuid.uuid4().hex[:8]}"
    base = {"es_url": [es], "embedder": "minilm", "cache_dir": work / "cache", "state_dir": work / "state"}
    cached = Settings(index_prefix=prefix, **base)  # type: ignore[arg-type]
    uncached = Settings(index_prefix=prefix, vector_cache_mb=0, **base)  # type: ignore[arg-type]
    root = work / "docs"
    _folder(root, files)
    embedder = Counting(MiniLMEmbedder())
    sidecar = root / ".hopsearch-acl.yaml"
    sidecar.write_text('"*": [group:staff]\n')
    seconds, texts, chunks = await _timed(cached, root, embedder)
    print(f"first load: {files} files, {chunks} chunks, {texts} texts embedded in {seconds:.1f} s")
    results: dict[str, list[tuple[float, int]]] = {"cache": [], "read-back": [], "re-embed": []}
    acls = ["group:hr", "group:staff"]
    try:
        for n in range(rounds):
            for way, settings in (("cache", cached), ("read-back", uncached)):
                sidecar.write_text(f'"*": [{acls[(len(results[way]) + n) % 2]}]\n')
                acls.reverse()
                seconds, texts, resent = await _timed(settings, root, embedder)
                assert resent == chunks, (way, resent, chunks)
                results[way].append((seconds, texts))
            fresh = Settings(index_prefix=f"{prefix}x{n}", vector_cache_mb=0, **base)  # type: ignore[arg-type]
            results["re-embed"].append((await _timed(fresh, root, embedder))[:2])
    finally:
        async with await Store.connect(cached) as store:
            await store.client.indices.delete(index=f"{prefix}*", allow_no_indices=True, ignore_unavailable=True)
    base_s = statistics.median(s for s, _ in results["re-embed"])
    print(f"ACL-only change of {chunks} chunks ({files} files), median of {rounds} interleaved rounds:")
    for way, runs in results.items():
        median = statistics.median(s for s, _ in runs)
        texts = statistics.median(t for _, t in runs)
        print(f"  {way:9}  {median:7.2f} s  {texts:6.0f} texts embedded  {median / base_s:5.2f}x of re-embed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--es", default="http://127.0.0.1:9218")
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.es, args.files, args.rounds))
