"""int8 against fp32, per local embedder, in one run: what ``embed_precision=auto`` is decided on.

1. 2WikiMultihopQA: the questions' context paragraphs indexed once per embedder and precision (as
   ``hopsearch eval retrieval QUESTIONS --corpus-from-context --mode dense`` does) and dense recall@10 of
   the supporting paragraphs. int8 is the default only where it loses at most 0.01.
2. The Japanese test corpus (``tests/data/ja_corpus``, 30 questions): loaded per embedder and precision,
   and for each question the supporting documents among the files of its top-5 dense passages. int8 is
   the default only where they change for at most one question.

    HOPSEARCH_TEST_ES8_URL=http://127.0.0.1:9218 .venv/bin/python benchmarks/int8_recall.py \\
        [--questions /work/shared/data/2wiki_dev100.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hopsearch.cli.eval_retrieval import gold_items  # noqa: E402
from hopsearch.loaders.api import ensure_qa_contexts  # noqa: E402
from hopsearch.loaders.docs import load_docs  # noqa: E402
from hopsearch.loaders.model import LoadOptions  # noqa: E402
from hopsearch.loaders.questions import read_questions  # noqa: E402
from hopsearch.service.access import ADMIN, Scope  # noqa: E402
from hopsearch.service.app.runtime import Runtime  # noqa: E402
from hopsearch.service.config.settings import Settings  # noqa: E402
from hopsearch.service.evaluation.recall import evaluate_mode  # noqa: E402
from hopsearch.service.retrieval import EsRetriever  # noqa: E402
from hopsearch.service.retrieval.config import RetrievalConfig  # noqa: E402
from hopsearch.service.types import RetrievalQuery, SearchResult  # noqa: E402
from tests.ja_corpus import build_corpus, questions  # noqa: E402

SHARED = ROOT.parent / "shared" / "data" / "2wiki_dev100.jsonl"
COMBOS = [(name, precision) for name in ("minilm", "e5") for precision in ("fp32", "int8")]


def settings_for(url: str, name: str, precision: str) -> Settings:
    return Settings(  # type: ignore[call-arg]
        es_url=[url],
        index_prefix=f"i8{name}{precision}{uuid.uuid4().hex[:6]}",
        embedder=name,
        embed_precision=precision,
    )


async def drop(runtime: Runtime) -> None:
    prefix = runtime.settings.index_prefix
    await runtime.store.client.indices.delete(index=f"{prefix}-*", allow_no_indices=True)


def searcher(runtime: Runtime) -> Callable[[Sequence[RetrievalQuery]], Awaitable[list[SearchResult]]]:
    """What ``hopsearch eval retrieval`` searches with: the runtime's retriever over the passages alias."""
    scope = Scope(runtime.settings.passages_alias, ADMIN)

    async def search(queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        return await runtime.retriever.search_many(scope, queries)

    return search


async def wiki_recall(url: str, path: Path) -> dict[tuple[str, str], float]:
    records = read_questions(path)
    items = gold_items(records)
    out: dict[tuple[str, str], float] = {}
    for name, precision in COMBOS:
        runtime = await Runtime.open(settings_for(url, name, precision))
        try:
            await ensure_qa_contexts(runtime.store, path, records, embedder=runtime.embedder)
            report = await evaluate_mode(searcher(runtime), items, "dense", 10)
            out[(name, precision)] = float(report["recall@10"])
            assert runtime.embedder is not None
            print(f"  {runtime.embedder.model_id:<48} dense recall@10 {out[(name, precision)]:.3f}", flush=True)
        finally:
            await drop(runtime)
            await runtime.close()
    return out


async def japanese_top5(url: str, corpus: Path, tmp: Path) -> dict[tuple[str, str], list[frozenset[str]]]:
    qs = questions()
    out: dict[tuple[str, str], list[frozenset[str]]] = {}
    for name, precision in COMBOS:
        runtime = await Runtime.open(settings_for(url, name, precision))
        try:
            tag = f"{name}-{precision}"
            options = LoadOptions(checkpoint=tmp / f"{tag}.ckpt", dead_letter=tmp / f"{tag}.dl")
            await load_docs(runtime.store, corpus, options, embedder=runtime.embedder)
            retriever = EsRetriever(runtime.store, runtime.embedder, config=RetrievalConfig.of(runtime.settings))
            results = await retriever.search_many(
                Scope(runtime.settings.passages_alias, ADMIN),
                [RetrievalQuery(q.question, k=5, mode="dense") for q in qs],
            )
            rows = []
            for q, result in zip(qs, results, strict=True):
                files = {Path(str(hit.source.get("path", ""))).name for hit in result.hits[:5]}
                rows.append(frozenset(files & set(q.supporting)))
            out[(name, precision)] = rows
            found = sum(len(r) for r in rows) / sum(len(q.supporting) for q in qs)
            print(f"  {tag:<12} supporting documents found in the top 5: {found:.3f}", flush=True)
        finally:
            await drop(runtime)
            await runtime.close()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--es-url", default=os.environ.get("HOPSEARCH_TEST_ES8_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--questions", type=Path, default=SHARED)
    args = parser.parse_args()
    print(f"2Wiki {args.questions.name}: dense recall@10 of the supporting paragraphs")
    wiki = await wiki_recall(args.es_url, args.questions)
    print("Japanese test corpus: dense top 5")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = build_corpus(Path(tmp) / "ja")
        ja = await japanese_top5(args.es_url, corpus, Path(tmp))
    print(
        "\nembedder  recall@10 fp32  int8  loss   JA questions whose top-5 supporting documents changed  int8 default?"
    )
    for name in ("minilm", "e5"):
        loss = wiki[(name, "fp32")] - wiki[(name, "int8")]
        changed = sum(a != b for a, b in zip(ja[(name, "fp32")], ja[(name, "int8")], strict=True))
        verdict = "yes" if loss <= 0.01 and changed <= 1 else "no"
        print(
            f"{name:<9} {wiki[(name, 'fp32')]:>14.3f} {wiki[(name, 'int8')]:>5.3f} {loss:>+6.3f}   "
            f"{changed:>2} of {len(ja[(name, 'fp32')])}{'':<44}{verdict}"
        )


if __name__ == "__main__":
    asyncio.run(main())
