"""Japanese retrieval and loader benchmark on the invented company corpus of the tests.

Loads the 25 documents of ``tests/data/ja_corpus`` (md/html/txt, docx/pdf built on the fly) into a
running Elasticsearch node twice (vectors of all-MiniLM-L6-v2 in one index, of multilingual-e5-small in
the other; both with SudachiPy token fields), answers the 30 multi-hop questions of
``tests/data/ja_questions.jsonl`` and prints recall@5 and recall@10 of the supporting documents (the share
of a question's supporting files among the files of its top-k passages, averaged) for

  BM25 with the standard analyzer (single characters) · BM25 over SudachiPy tokens ·
  dense MiniLM · dense multilingual e5 · hybrid (RRF) of SudachiPy BM25 with each embedder.

Then the loader's rate on Japanese text: passages/s of the docs source (read, extract, chunk and
``lang``) with and without SudachiPy tokens, next to the same on English documents of the same size, and
the end-to-end ``load_docs`` rate (BM25 only) of both.

    HOPSEARCH_TEST_ES8_URL=http://127.0.0.1:19208 .venv/bin/python benchmarks/bench_japanese.py

``--recall-only`` loads one index (multilingual e5 as the settings run it, int8 by default; ``HOPSEARCH_*``
variables apply) and prints recall@1/5/10 of bm25, dense and hybrid, each with and without one hop, and
bm25's p50 without and with the hop; ``--corpus DIR --questions FILE``
measures another corpus (a folder of documents and a JSON Lines file of ``question`` and ``supporting`` file
names), e.g. the second corpus kept apart from the tests' one:

    .venv/bin/python benchmarks/bench_japanese.py --recall-only \\
        --corpus benchmarks/data/ja_corpus2/docs --questions benchmarks/data/ja_corpus2/questions.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the corpus lives with the tests

from hopsearch.loaders.chunking import chunk_document  # noqa: E402
from hopsearch.loaders.docs import DocsSource, load_docs  # noqa: E402
from hopsearch.loaders.extract import extract  # noqa: E402
from hopsearch.loaders.model import LoadOptions  # noqa: E402
from hopsearch.loaders.pipeline import _with_language  # noqa: E402
from hopsearch.service.access import ADMIN, Scope  # noqa: E402
from hopsearch.service.config.settings import Settings  # noqa: E402
from hopsearch.service.embedders import E5Embedder, MiniLMEmbedder, make_embedder  # noqa: E402
from hopsearch.service.retrieval import EsRetriever, bm25_body  # noqa: E402
from hopsearch.service.retrieval.config import RetrievalConfig  # noqa: E402
from hopsearch.service.store import Store  # noqa: E402
from hopsearch.service.text.japanese import ja_query  # noqa: E402
from hopsearch.service.types import Embedder, RetrievalMode, RetrievalQuery  # noqa: E402
from tests.ja_corpus import JaQuestion, build_corpus, questions, write_document  # noqa: E402

KS = (1, 5, 10)
from tests.loader_files import passage  # noqa: E402


def recall(found: Sequence[str], supporting: Sequence[str]) -> float:
    return len(set(found) & set(supporting)) / len(supporting)


async def open_store(url: str, tag: str) -> Store:
    settings = Settings(es_url=[url], index_prefix=f"bja{tag}{uuid.uuid4().hex[:6]}", embedder="none")  # type: ignore[call-arg]
    return await Store.connect(settings)


async def drop(store: Store) -> None:
    await store.client.indices.delete(index=f"{store.settings.index_prefix}-*", allow_no_indices=True)
    await store.close()


def files_of(hits: Sequence[object]) -> list[str]:
    out: list[str] = []
    for hit in hits:
        name = Path(str(getattr(hit, "source", {}).get("path", ""))).name
        if name not in out:
            out.append(name)
    return out


async def bm25_recall(store: Store, qs: list[JaQuestion], *, tokens: bool) -> dict[int, float]:
    meta = await store.index_meta()
    scores = {5: 0.0, 10: 0.0}
    for q in qs:
        query = RetrievalQuery(q.question, k=10)
        body = bm25_body(query, 10, source=True, ja=ja_query(q.question, meta) if tokens else None)
        response = await store.search(store.settings.passages_alias, body)
        names = [Path(h["_source"]["path"]).name for h in response["hits"]["hits"]]
        for k in scores:  # the top-k passages, counted as the files they come from
            scores[k] += recall(list(dict.fromkeys(names[:k])), q.supporting)
    return {k: v / len(qs) for k, v in scores.items()}


async def mode_recall(
    store: Store,
    embedder: Embedder,
    qs: list[JaQuestion],
    mode: RetrievalMode,
    ks: Sequence[int] = (5, 10),
    hops: int = 0,
) -> dict[int, float]:
    retriever = EsRetriever(store, embedder, config=RetrievalConfig.of(store.settings))
    asked = [RetrievalQuery(q.question, k=max(ks), mode=mode, hops=hops) for q in qs]
    results = await retriever.search_many(Scope(store.settings.passages_alias, ADMIN), asked)
    scores = dict.fromkeys(ks, 0.0)
    for q, result in zip(qs, results, strict=True):
        for k in scores:
            scores[k] += recall(files_of(result.hits[:k]), q.supporting)
    return {k: v / len(qs) for k, v in scores.items()}


async def hop_cost(store: Store, qs: list[JaQuestion], rounds: int = 3) -> dict[int, float]:
    """p50 ms of one bm25 question (k = 10) without and with one hop, interleaved (the first round warms)."""
    retriever = EsRetriever(store, config=RetrievalConfig.of(store.settings))
    scope = Scope(store.settings.passages_alias, ADMIN)
    times: dict[int, list[float]] = {0: [], 1: []}
    for round_ in range(rounds + 1):
        for q in qs:
            for hops in (0, 1):
                began = time.perf_counter()
                await retriever.search_many(scope, [RetrievalQuery(q.question, k=10, mode="bm25", hops=hops)])
                if round_:
                    times[hops].append((time.perf_counter() - began) * 1000)
    return {hops: statistics.median(values) for hops, values in times.items()}


def english_corpus(dest: Path, like: Path) -> Path:
    """English documents in the same formats as ``like``'s, one 150-word section per Japanese passage."""
    dest.mkdir(parents=True)
    rng = random.Random(7)
    for path in sorted(like.iterdir()):
        _, blocks = extract(path.suffix, path.read_bytes())
        sections = len(chunk_document(blocks, "ja"))
        parts: list[tuple[int, str]] = [(1, f"Document {path.stem}")]
        for s in range(sections):
            parts += [(2, f"Section {s}"), (0, passage(rng, 150))]
        target = dest / path.name
        if path.suffix in (".docx", ".pdf"):
            write_document(target, parts)
        elif path.suffix == ".html":
            body = "".join(f"<h{lvl}>{text}</h{lvl}>" if lvl else f"<p>{text}</p>" for lvl, text in parts)
            target.write_text(f"<html><body>{body}</body></html>", encoding="utf-8")
        else:
            target.write_text("\n\n".join(("#" * lvl + " " if lvl else "") + text for lvl, text in parts))
    return dest


def source_rate(root: Path, analysis: str | None, rounds: int) -> tuple[float, int]:
    """Passages/s of reading, extracting, chunking and annotating every file under ``root``."""
    best = 0.0
    passages = 0
    for _ in range(rounds):
        began = time.perf_counter()
        passages = 0
        for batch in _with_language(DocsSource(root, {}).batches(0, 1000, None), analysis):
            passages += len(batch.ids)
        best = max(best, passages / (time.perf_counter() - began))
    return best, passages


async def load_rate(url: str, root: Path, tag: str) -> float:
    store = await open_store(url, tag)
    try:
        opts = LoadOptions(checkpoint=root.parent / f"{tag}.ckpt", dead_letter=root.parent / f"{tag}.dl")
        began = time.perf_counter()
        report = await load_docs(store, root, opts)
        seconds = time.perf_counter() - began
        return await store.count() / seconds if report.indexed else 0.0
    finally:
        await drop(store)


def read_questions(path: Path) -> list[JaQuestion]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            out.append(JaQuestion(row["id"], row["question"], row.get("answer", ""), tuple(row["supporting"])))
    return out


async def recall_only(url: str, corpus: Path, qs: list[JaQuestion], tmp: Path) -> None:
    """recall@1/5/10 of bm25, dense and hybrid, each with and without one hop, with e5 over ``corpus`` (the
    current settings: e5 at the settings' precision, int8 by default)."""
    e5 = make_embedder(Settings(embedder="e5"))  # type: ignore[call-arg]
    assert e5 is not None
    store = await open_store(url, "e5")
    try:
        opts = LoadOptions(checkpoint=tmp / "e5.ckpt", dead_letter=tmp / "e5.dl")
        report = await load_docs(store, corpus, opts, embedder=e5)
        print(f"indexed {report.read} files, {await store.count()} passages with {e5.model_id} ({store.info.number})")
        rows = [
            (f"{mode} hops={hops}" if hops else mode, await mode_recall(store, e5, qs, mode, KS, hops))
            for mode in ("bm25", "dense", "hybrid")
            for hops in (0, 1)
        ]
        p50 = await hop_cost(store, qs)
    finally:
        await drop(store)
    print(f"\nbm25, one question at a time, 3 rounds, interleaved: p50 {p50[0]:.2f} ms, with one hop {p50[1]:.2f} ms")
    print(f"\nrecall of the supporting documents, {len(qs)} questions, {corpus}")
    print("| mode | " + " | ".join(f"recall@{k}" for k in KS) + " |")
    print("| --- |" + " --- |" * len(KS))
    for mode, scores in rows:
        print(f"| {mode} | " + " | ".join(f"{scores[k]:.3f}" for k in KS) + " |")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--es-url", default=os.environ.get("HOPSEARCH_TEST_ES8_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--copies", type=int, default=8, help="corpus copies for the loader rate")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--corpus", type=Path, default=None, help="a folder of documents (default: the tests')")
    parser.add_argument("--questions", type=Path, default=None, help="its questions (JSON Lines, `supporting`)")
    parser.add_argument("--recall-only", action="store_true", help="e5 only: recall@1/5/10 of bm25, dense, hybrid")
    args = parser.parse_args()
    if (args.corpus is None) != (args.questions is None):
        parser.error("--corpus and --questions go together")
    qs = read_questions(args.questions) if args.questions else questions()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus.resolve() if args.corpus else build_corpus(Path(tmp) / "ja")
        if args.recall_only:
            await recall_only(args.es_url, corpus, qs, Path(tmp))
            return
        minilm, e5 = MiniLMEmbedder(), E5Embedder()
        embedders: dict[str, Embedder] = {"minilm": minilm, "e5": e5}
        stores: dict[str, Store] = {}
        try:
            for name, embedder in embedders.items():
                store = stores[name] = await open_store(args.es_url, name)
                began = time.perf_counter()
                report = await load_docs(
                    store,
                    corpus,
                    LoadOptions(checkpoint=Path(tmp) / f"{name}.ckpt", dead_letter=Path(tmp) / f"{name}.dl"),
                    embedder=embedder,
                )
                print(
                    f"indexed {report.read} files, {await store.count()} passages with {embedder.model_id} "
                    f"in {time.perf_counter() - began:.1f}s (ES {store.info.number})"
                )
            rows = [
                ("BM25 standard analyzer (single characters)", await bm25_recall(stores["e5"], qs, tokens=False)),
                ("BM25 SudachiPy tokens", await bm25_recall(stores["e5"], qs, tokens=True)),
                ("dense all-MiniLM-L6-v2", await mode_recall(stores["minilm"], embedders["minilm"], qs, "dense")),
                ("dense multilingual-e5-small", await mode_recall(stores["e5"], embedders["e5"], qs, "dense")),
                (
                    "hybrid SudachiPy BM25 + MiniLM",
                    await mode_recall(stores["minilm"], embedders["minilm"], qs, "hybrid"),
                ),
                ("hybrid SudachiPy BM25 + e5", await mode_recall(stores["e5"], embedders["e5"], qs, "hybrid")),
            ]
        finally:
            for store in stores.values():
                await drop(store)
        print(f"\nrecall of the supporting documents, {len(qs)} questions")
        print(f"{'mode':<46} {'R@5':>6} {'R@10':>6}")
        for label, scores in rows:
            print(f"{label:<46} {scores[5]:>6.3f} {scores[10]:>6.3f}")

        big = Path(tmp) / "ja-big"
        big.mkdir()
        for copy in range(args.copies):
            for path in corpus.iterdir():
                (big / f"{copy}-{path.name}").write_bytes(path.read_bytes())
        english = english_corpus(Path(tmp) / "en-big", big)
        source_rate(big, "sudachi", 1)  # loads spaCy and the dictionary once
        en, en_n = source_rate(english, "sudachi", args.rounds)
        ja_plain, ja_n = source_rate(big, None, args.rounds)
        ja_tok, _ = source_rate(big, "sudachi", args.rounds)
        print("\nloader source stage (read, extract, chunk, lang; best of rounds)")
        print(f"  English documents          {en:8.0f} passages/s ({en_n} passages)")
        print(f"  Japanese, no tokenisation  {ja_plain:8.0f} passages/s ({ja_n} passages)")
        print(f"  Japanese, SudachiPy tokens {ja_tok:8.0f} passages/s")
        print(f"  English rate / Japanese-with-tokens rate: {en / ja_tok:.2f}x")
        en_load = await load_rate(args.es_url, english, "len")
        ja_load = await load_rate(args.es_url, big, "lja")
        print("\nend-to-end load_docs into Elasticsearch (BM25 only)")
        print(f"  English documents          {en_load:8.0f} passages/s")
        print(f"  Japanese, SudachiPy tokens {ja_load:8.0f} passages/s")
        print(f"  English rate / Japanese rate: {en_load / ja_load:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
