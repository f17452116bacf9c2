"""The names hop on a Japanese corpus: recall@1/@5/@10 and "every supporting document in the top 5" (all@5)
of bm25, dense and hybrid (multilingual e5), hops 0 and 1, per question ``type`` where the questions have
one; hops 1 as it was before names (``today``: title lookup + mention search where a document repeats) and
with the names lookup under each placement of :mod:`hopsearch.service.retrieval.namelinks`; bm25's p50
without and with each hop; and the loader's source stage per passage with names and without.

    .venv/bin/python benchmarks/bench_names_hop.py --es-url http://127.0.0.1:19208        # the tests' corpus
    .venv/bin/python benchmarks/bench_names_hop.py --es-url http://127.0.0.1:19208 \\
        --corpus benchmarks/data/ja_corpus2/docs --questions benchmarks/data/ja_corpus2/questions.jsonl

``--modes bm25,hybrid`` measures fewer modes (dense and hybrid embed the corpus with e5 first).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchmarks.bench_japanese import drop, files_of, open_store  # noqa: E402
from hopsearch.loaders.docs import DocsSource, load_docs  # noqa: E402
from hopsearch.loaders.model import LoadOptions  # noqa: E402
from hopsearch.loaders.pipeline import _with_language  # noqa: E402
from hopsearch.service.access import ADMIN, Scope  # noqa: E402
from hopsearch.service.config.settings import Settings  # noqa: E402
from hopsearch.service.embedders import make_embedder  # noqa: E402
from hopsearch.service.retrieval import EsRetriever, executor, namelinks  # noqa: E402
from hopsearch.service.retrieval.config import RetrievalConfig  # noqa: E402
from hopsearch.service.types import Embedder, RetrievalMode, RetrievalQuery  # noqa: E402
from tests.ja_corpus import build_corpus  # noqa: E402

KS = (1, 5, 10)
#: placement/most/bridge (``b``: bridges only, ``a``: any name)
PLACEMENTS = ("fill/5/a", "fill/5/b", "after3/1/b")
Question = tuple[str, tuple[str, ...], str]  # question, supporting files, type


def read(path: Path | None) -> list[Question]:
    if path is None:
        path = ROOT / "tests" / "data" / "ja_questions.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(r["question"], tuple(r["supporting"]), str(r.get("type") or "all")) for r in rows]


@contextmanager
def variant(name: str) -> Iterator[None]:
    """hops 1 as ``name`` says: ``today`` (no names lookup) or a placement of the names lookup."""
    saved = executor._names_hop, namelinks.PLACEMENT, namelinks.PLACED, namelinks.BRIDGES
    if name == "today":
        executor._names_hop = lambda facts, query: False  # type: ignore[assignment]
    elif name != "default":
        placement, most, bridge = name.split("/")
        namelinks.PLACEMENT, namelinks.PLACED = placement, int(most)  # type: ignore[assignment]
        namelinks.BRIDGES = bridge == "b"
    try:
        yield
    finally:
        executor._names_hop, namelinks.PLACEMENT, namelinks.PLACED, namelinks.BRIDGES = saved  # type: ignore[assignment]


async def scores(
    retriever: EsRetriever, scope: Scope, qs: Sequence[Question], mode: RetrievalMode, hops: int
) -> dict[str, dict[str, float]]:
    """Per type (and ``all``): recall@1/5/10 and all@5."""
    asked = [RetrievalQuery(q, k=10, mode=mode, hops=hops) for q, _, _ in qs]
    results = await retriever.search_many(scope, asked)
    out: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    for (_, supporting, kind), result in zip(qs, results, strict=True):
        for key in {kind, "all"}:
            row = out.setdefault(key, dict.fromkeys([*(f"r@{k}" for k in KS), "all@5"], 0.0))
            counts[key] = counts.get(key, 0) + 1
            for k in KS:
                row[f"r@{k}"] += len(set(files_of(result.hits[:k])) & set(supporting)) / len(supporting)
            row["all@5"] += float(set(supporting) <= set(files_of(result.hits[:5])))
    return {key: {m: v / counts[key] for m, v in row.items()} for key, row in out.items()}


async def p50(retriever: EsRetriever, scope: Scope, qs: Sequence[Question], rounds: int = 3) -> dict[str, float]:
    """bm25 p50 ms, one question at a time: hops 0, hops 1 today, hops 1 with names (interleaved)."""
    times: dict[str, list[float]] = {"hops 0": [], "hops 1 today": [], "hops 1 names": []}
    for round_ in range(rounds + 1):
        for q, _, _ in qs:
            for label in times:
                with variant("today" if label == "hops 1 today" else "default"):
                    began = time.perf_counter()
                    hops = 0 if label == "hops 0" else 1
                    await retriever.search_many(scope, [RetrievalQuery(q, k=10, mode="bm25", hops=hops)])
                    if round_:
                        times[label].append((time.perf_counter() - began) * 1000)
    return {label: statistics.median(values) for label, values in times.items()}


def source_ms(root: Path, names: int | None, rounds: int = 3) -> tuple[float, int]:
    """Best ms per passage of the loader's source stage (read, extract, chunk, tokens, names)."""
    best = float("inf")
    passages = 0
    for _ in range(rounds):
        began = time.perf_counter()
        passages = 0
        for batch in _with_language(DocsSource(root, {}).batches(0, 1000, None), "sudachi", names=names):
            passages += len(batch.ids)
        best = min(best, (time.perf_counter() - began) * 1000 / max(passages, 1))
    return best, passages


async def run(url: str, corpus: Path, qs: list[Question], modes: Sequence[RetrievalMode], tmp: Path) -> None:
    embedder: Embedder | None = None
    if any(mode != "bm25" for mode in modes):
        embedder = make_embedder(Settings(embedder="e5"))  # type: ignore[call-arg]
    store = await open_store(url, "nh")
    try:
        opts = LoadOptions(checkpoint=tmp / "nh.ckpt", dead_letter=tmp / "nh.dl")
        report = await load_docs(store, corpus, opts, embedder=embedder)
        print(f"indexed {report.read} files, {await store.count()} passages ({store.info.number}), {corpus}")
        retriever = EsRetriever(store, embedder, config=RetrievalConfig(hops_names=True))  # the variants choose
        scope = Scope(store.settings.passages_alias, ADMIN)
        rows: list[tuple[str, dict[str, dict[str, float]]]] = []
        for mode in modes:
            rows.append((f"{mode} hops 0", await scores(retriever, scope, qs, mode, 0)))
            for name in ("today", *PLACEMENTS):
                with variant(name):
                    rows.append((f"{mode} hops 1 {name}", await scores(retriever, scope, qs, mode, 1)))
        cost = await p50(retriever, scope, qs)
    finally:
        await drop(store)
    kinds = sorted({kind for _, _, kind in qs} | {"all"}, key=lambda k: (k != "all", k))
    for kind in kinds:
        n = sum(1 for _, _, k in qs if k == kind or kind == "all")
        print(f"\n{kind}: {n} questions")
        print("| mode | recall@1 | recall@5 | recall@10 | all@5 |\n| --- | --- | --- | --- | --- |")
        for label, table in rows:
            row = table.get(kind)
            if row:
                print(f"| {label} | " + " | ".join(f"{row[m]:.3f}" for m in ("r@1", "r@5", "r@10", "all@5")) + " |")
    base = cost["hops 0"]
    print("\nbm25 p50, one question at a time, 3 rounds: " + ", ".join(f"{k} {v:.2f} ms" for k, v in cost.items()))
    print(f"  ratio to hops 0: today {cost['hops 1 today'] / base:.2f}x, names {cost['hops 1 names'] / base:.2f}x")
    source_ms(corpus, 1, 1)  # SudachiPy loads once
    without, n = source_ms(corpus, None)
    with_names, _ = source_ms(corpus, 1)
    print(
        f"\nloader source stage, {n} passages (read, extract, chunk, SudachiPy tokens): {without:.2f} ms a passage "
        f"without names, {with_names:.2f} ms with ({with_names / without:.2f}x)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--es-url", default="http://127.0.0.1:9200")
    parser.add_argument("--corpus", type=Path, default=None, help="a folder of documents (default: the tests')")
    parser.add_argument("--questions", type=Path, default=None, help="its questions (JSON Lines)")
    parser.add_argument("--modes", default="bm25,dense,hybrid")
    args = parser.parse_args()
    if (args.corpus is None) != (args.questions is None):
        parser.error("--corpus and --questions go together")
    modes: list[RetrievalMode] = [m for m in args.modes.split(",") if m]  # type: ignore[misc]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus.resolve() if args.corpus else build_corpus(Path(tmp) / "ja")
        await run(args.es_url, corpus, read(args.questions), modes, Path(tmp))


if __name__ == "__main__":
    asyncio.run(main())
