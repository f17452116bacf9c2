"""The loader entry points: one coroutine per corpus kind, each returning a :class:`LoadReport`.

    report = await load_dpr(store, Path("psgs_w100.tsv.gz"), LoadOptions(limit=100_000))
    report = await load_jsonl(store, Path("corpus.jsonl"), embedder=embedder)
    report = await load_qa_contexts(store, Path("hotpot_dev_distractor_v1.json"))
    report = await load_docs(store, Path("handbook/"))
    assert report.reconciled  # read == indexed + rejected + skipped

``store`` is a connected :class:`~hopsearch.service.store.Store`; indices are created when missing.
Pass ``embedder`` to store vectors (the index ``_meta`` must name the same embedder), ``None`` for
BM25 only. Rejections go to ``report.dead_letter``; ``LoadOptions(resume=True)`` continues from the
checkpoint of an interrupted load (DPR, JSONL and QA files).
"""

from __future__ import annotations

from pathlib import Path

from hopsearch.loaders.docs import load_docs
from hopsearch.loaders.dpr import DprSource
from hopsearch.loaders.jsonl import JsonlSource
from hopsearch.loaders.model import LoadOptions, LoadReport, Progress, Source
from hopsearch.loaders.pipeline import run_load
from hopsearch.loaders.qa import QaContextSource
from hopsearch.service.errors import InputError
from hopsearch.service.store import Store
from hopsearch.service.types import Embedder

__all__ = ["load_docs", "load_dpr", "load_jsonl", "load_qa_contexts"]


async def _load_file(
    store: Store,
    source: Source,
    options: LoadOptions | None,
    embedder: Embedder | None,
    progress: Progress | None,
) -> LoadReport:
    if not source.path.is_file():
        raise InputError("no such file", source=str(source.path))
    return await run_load(store, source, options, embedder=embedder, progress=progress)


async def load_dpr(
    store: Store,
    path: Path,
    options: LoadOptions | None = None,
    *,
    embedder: Embedder | None = None,
    progress: Progress | None = None,
) -> LoadReport:
    """DPR ``psgs_w100.tsv[.gz]``: ``_id`` = the DPR id."""
    return await _load_file(store, DprSource(path, encode=embedder is None), options, embedder, progress)


async def load_jsonl(
    store: Store,
    path: Path,
    options: LoadOptions | None = None,
    *,
    embedder: Embedder | None = None,
    progress: Progress | None = None,
) -> LoadReport:
    """A BEIR-style JSONL corpus: ``_id`` = the record's ``_id``."""
    return await _load_file(store, JsonlSource(path), options, embedder, progress)


async def load_qa_contexts(
    store: Store,
    path: Path,
    options: LoadOptions | None = None,
    *,
    embedder: Embedder | None = None,
    progress: Progress | None = None,
) -> LoadReport:
    """The context paragraphs of a HotpotQA / 2Wiki / MuSiQue file: ``_id`` = sha1(title\\ntext)."""
    return await _load_file(store, QaContextSource(path), options, embedder, progress)
