"""Japanese retrieval choices that the product does not make, measured on both Japanese corpora: each run
replaces, in this process only, the functions that make the choice (SudachiPy tokens, the token fields of
a passage, the embedded text, the Japanese BM25 query, client RRF) and prints recall@1/5/10 of bm25,
dense (e5) and hybrid as ``bench_japanese.py --recall-only`` does. ``KEY=VALUE`` choices (one run each,
defaults are the product's before 異体字 folding):

    mode=A|B|C|AC    SudachiPy split mode (AC: mode A tokens plus mode C compounds not among them)
    norm=1           SudachiPy ``normalized_form`` instead of the surface, passages and queries
    qdrop=1          drop pronouns, adnominals, conjunctions, interjections and non-independent
                     verbs/adjectives (誰, 何, どの, する, いる …) from the BM25 query
    itaiji=1         fold 異体字 (髙→高, 﨑→崎 …) in tokens
    head=bm25|emb|both   section headings before the chunk text in BM25 tokens / the embedded text
    titletext=1      the title before the chunk text in the text token field too
    tboost=F         boost of the title token field
    rrfk=N wb=F wd=F RRF k, BM25 and dense weights of client RRF
    legdoc=1         client RRF over documents: each leg keeps its best passage of a file before fusing
    perdoc=N         at most N passages of one file in a result (the query asks for 3× k, the rest is cut)

    .venv/bin/python benchmarks/ja_choices.py c2 mode=C        # c1: the tests' corpus, c2: the second
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import sys
import tempfile
import unicodedata
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sudachipy import SplitMode  # type: ignore[import-untyped]  # noqa: E402

from benchmarks import bench_japanese as bj  # noqa: E402
from hopsearch.loaders import pipeline, reuse  # noqa: E402
from hopsearch.service import fusion  # noqa: E402
from hopsearch.service import japanese as ja  # noqa: E402
from hopsearch.service.access import Scope  # noqa: E402
from hopsearch.service.retrieval import executor, planner, results  # noqa: E402
from hopsearch.service.types import Hit, RetrievalQuery, SearchResult  # noqa: E402

CORPUS2 = ROOT / "benchmarks" / "data" / "ja_corpus2"
QUERY_DROP = frozenset({"代名詞", "連体詞", "接続詞", "感動詞"})
MODES = {"A": SplitMode.A, "B": SplitMode.B, "C": SplitMode.C}


def install(choice: Mapping[str, str]) -> None:
    mode = choice.get("mode", "A")
    norm, qdrop, itaiji = (choice.get(k) == "1" for k in ("norm", "qdrop", "itaiji"))
    head, title_text, tboost = choice.get("head", "none"), choice.get("titletext") == "1", choice.get("tboost", "1")
    weights = (float(choice.get("wb", "1")), float(choice.get("wd", "1")))

    def tokens(self: ja.JapaneseTokenizer, text: str, version: int = 2, query: bool = False) -> list[str]:
        if not text.strip():
            return []
        if itaiji:
            text = ja.fold_variants(text)
        with self._lock:
            if self._sudachi is None:
                self._load()
            morphemes = list(self._sudachi.tokenize(text, MODES[mode[0]]))
            if mode == "AC":
                seen = {m.surface() for m in morphemes}
                morphemes += [m for m in self._sudachi.tokenize(text, MODES["C"]) if m.surface() not in seen]
        out = []
        for m in morphemes:
            pos = m.part_of_speech()
            if pos[0] in ja._DROPPED_POS:
                continue
            if query and qdrop and (pos[0] in QUERY_DROP or (pos[0] in ("動詞", "形容詞") and pos[1] == "非自立可能")):
                continue
            token = unicodedata.normalize("NFKC", m.normalized_form() if norm else m.surface()).lower().strip()
            if token:
                out.append(token)
        return out

    def joined(self: ja.JapaneseTokenizer, text: str, version: int = 2, query: bool = False) -> str:
        return " ".join(tokens(self, text, version, query))

    def headings(body: Mapping[str, Any]) -> list[str]:
        return [str(h) for h in body.get("headings") or [] if h != body.get("title")]

    def annotate(body: MutableMapping[str, Any], analysis: str | None, version: int = 2) -> None:
        if analysis is None:
            body.pop("lang", None)
            return
        title, text = str(body.get("title") or ""), str(body.get("text") or "")
        body["lang"] = lang = body.get("lang") or ja.detect_lang(f"{title}\n{text}")
        if lang == "ja" and analysis == "sudachi":
            before = title + "\n" if title_text else ""
            if head in ("bm25", "both"):
                before += " ".join(headings(body)) + "\n"
            body["title_ja_tokens"] = joined(ja.tokenizer(), title)
            body["text_ja_tokens"] = joined(ja.tokenizer(), before + text)

    def passage_text(body: dict[str, object]) -> str:
        heads = " / ".join(headings(body)) if head in ("emb", "both") else ""
        return "\n".join(part for part in (str(body.get("title", "")), heads, str(body.get("text", ""))) if part)

    def ja_query(text: str, meta: Mapping[str, Any], synonyms: object = None) -> tuple[str, tuple[str, ...]] | None:
        if meta.get("ja_analysis") is None or ja.detect_lang(text) != "ja":
            return None
        title = "title_ja_tokens" + (f"^{tboost}" if tboost != "1" else "")
        return joined(ja.tokenizer(), text, 2, True), (title, "text_ja_tokens")

    ja.JapaneseTokenizer.tokens = tokens
    ja.JapaneseTokenizer.joined = joined
    pipeline.annotate = annotate
    reuse.passage_text = passage_text
    planner.ja_query = ja_query
    executor.ja_query = ja_query
    results.rrf = functools.partial(fusion.rrf, k=int(choice.get("rrfk", "60")))
    if choice.get("legdoc") == "1":
        results.rrf = functools.partial(by_document, results.rrf)
    query = bj.RetrievalQuery
    bj.RetrievalQuery = lambda text, k=10, mode="hybrid": query(text, k=k, mode=mode, weights=weights)
    if "perdoc" in choice:
        bj.EsRetriever = per_document(int(choice["perdoc"]))


def per_file(hits: Sequence[Hit], limit: int) -> list[Hit]:
    """``hits`` in order, without the passages of a file after its first ``limit``."""
    seen: dict[str, int] = {}
    kept: list[Hit] = []
    for hit in hits:
        name = str(hit.source.get("path", ""))
        seen[name] = seen.get(name, 0) + 1
        if seen[name] <= limit:
            kept.append(hit)
    return kept


def by_document(fuse: Any, lists: Sequence[Sequence[Hit]], **options: Any) -> list[Hit]:
    """``fuse`` over ``lists`` with each list's later passages of a file it already ranked left out."""
    return list(fuse([per_file(hits, 1) for hits in lists], **options))


def per_document(limit: int) -> type[bj.EsRetriever]:
    """A retriever whose results hold at most ``limit`` passages of one file, from 3× the hits asked for."""

    class PerDocument(bj.EsRetriever):
        async def search_many(self, scope: Scope, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
            wide = [dataclasses.replace(q, k=3 * q.k) for q in queries]
            return [
                dataclasses.replace(result, query=asked, hits=tuple(per_file(result.hits, limit)[: asked.k]))
                for asked, result in zip(queries, await super().search_many(scope, wide), strict=True)
            ]

    return PerDocument


async def main(argv: Sequence[str]) -> None:
    if not argv or argv[0] not in ("c1", "c2"):
        raise SystemExit(__doc__)
    install(dict(arg.split("=", 1) for arg in argv[1:]))
    tmp = Path(tempfile.mkdtemp())
    if argv[0] == "c1":
        qs, corpus = bj.questions(), bj.build_corpus(tmp / "ja")
    else:
        qs, corpus = bj.read_questions(CORPUS2 / "questions.jsonl"), CORPUS2 / "docs"
    print("choices:", " ".join(argv[1:]) or "(the product's before 異体字 folding)")
    await bj.recall_only(os.environ.get("HOPSEARCH_TEST_ES8_URL", "http://127.0.0.1:9200"), corpus, qs, tmp)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
