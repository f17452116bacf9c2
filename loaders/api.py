"""The loader entry points: one coroutine per corpus kind, each returning a :class:`LoadReport`, and
:data:`LOADERS`, the one registry of kinds (``hopsearch.load`` and ``hopsearch index <kind>`` read it).

    report = await load_dpr(store, Path("psgs_w100.tsv.gz"), LoadOptions(limit=100_000))
    report = await load_jsonl(store, Path("corpus.jsonl"), embedder=embedder)
    report = await load_qa_contexts(store, Path("hotpot_dev_distractor_v1.json"))
    report = await load_docs(store, Path("handbook/"))
    report = await LOADERS["jsonl"].load(store, Path("corpus.jsonl"))  # the same, by kind
    assert report.reconciled  # read == indexed + rejected + skipped
    report = await ensure_qa_contexts(store, path, records)  # demo and eval: load once, then skip

``store`` is a connected :class:`~hopsearch.service.store.Store`; indices are created when missing.
Pass ``embedder`` to store vectors (the index ``_meta`` must name the same embedder), ``None`` for
BM25 only. Rejections go to ``report.dead_letter``; ``LoadOptions(resume=True)`` continues from the
checkpoint of an interrupted load (DPR, JSONL and QA files).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal, Protocol

from hopsearch.loaders.checkpoint import default_paths, read_checkpoint
from hopsearch.loaders.config import LoadConfig
from hopsearch.loaders.docs import load_docs
from hopsearch.loaders.dpr import DprSource
from hopsearch.loaders.jsonl import JsonlSource
from hopsearch.loaders.model import LoadOptions, LoadReport, Progress, Source
from hopsearch.loaders.pipeline import run_load
from hopsearch.loaders.qa import QaContextSource
from hopsearch.loaders.questions import QARecord
from hopsearch.service.errors import InputError
from hopsearch.service.store import Store
from hopsearch.service.types import Embedder

__all__ = [
    "LOADERS",
    "LoadKind",
    "Loader",
    "ensure_qa_contexts",
    "load_docs",
    "load_dpr",
    "load_jsonl",
    "load_qa_contexts",
]

#: The corpus kinds: the keys of :data:`LOADERS` (a test holds the two equal).
LoadKind = Literal["dpr", "jsonl", "qa", "docs"]


class LoadFunction(Protocol):
    """``await load(store, path, options, embedder=…, progress=…)``: what every entry point is."""

    async def __call__(
        self,
        store: Store,
        path: Path,
        options: LoadOptions | None = None,
        /,
        *,
        embedder: Embedder | None = None,
        progress: Progress | None = None,
    ) -> LoadReport: ...


def _file_loader(name: str, make: Callable[[Path, Embedder | None], Source], doc: str) -> LoadFunction:
    """Return the entry point of a kind read from one file: ``make`` builds its source for a load."""

    async def load(
        store: Store,
        path: Path,
        options: LoadOptions | None = None,
        *,
        embedder: Embedder | None = None,
        progress: Progress | None = None,
    ) -> LoadReport:
        source = make(path, embedder)
        if not source.path.is_file():
            raise InputError("no such file", source=str(path))
        return await run_load(store, source, options, embedder=embedder, progress=progress)

    load.__name__ = load.__qualname__ = name
    load.__doc__ = doc
    return load


load_dpr = _file_loader(
    "load_dpr",
    lambda path, embedder: DprSource(path, encode=embedder is None),
    """DPR ``psgs_w100.tsv[.gz]``: ``_id`` = the DPR id.""",
)
load_jsonl = _file_loader(
    "load_jsonl",
    lambda path, _: JsonlSource(path),
    """A BEIR-style JSONL corpus: ``_id`` = the record's ``_id``.""",
)
load_qa_contexts = _file_loader(
    "load_qa_contexts",
    lambda path, _: QaContextSource(path),
    """The context paragraphs of a HotpotQA / 2Wiki / MuSiQue file: ``_id`` = sha1(title\\ntext).""",
)


@dataclass(frozen=True, slots=True)
class Loader:
    """One corpus kind: its entry point and what ``hopsearch index <kind>`` says and takes."""

    kind: LoadKind
    load: LoadFunction
    #: the command's help
    summary: str
    #: ``--resume``, ``--limit`` and ``--checkpoint`` apply (a docs load is incremental instead)
    resumable: bool = True
    #: ``--acl`` applies (the principals of the files no sidecar covers)
    acl: bool = False


LOADERS: Mapping[LoadKind, Loader] = MappingProxyType(
    {
        loader.kind: loader
        for loader in (
            Loader("dpr", load_dpr, "DPR passages: psgs_w100.tsv or .tsv.gz (id, text, title)."),
            Loader("jsonl", load_jsonl, 'A BEIR-style JSONL corpus ({"_id", "title", "text", ...} per line).'),
            Loader(
                "qa",
                load_qa_contexts,
                "The context paragraphs of a HotpotQA / 2WikiMultihopQA / MuSiQue question file.",
            ),
            Loader(
                "docs",
                load_docs,
                "A directory of .md, .txt, .html, .pdf, .docx, .xlsx and .pptx files, or one such file (incremental).",
                resumable=False,
                acl=True,
            ),
        )
    }
)


async def ensure_qa_contexts(
    store: Store,
    path: Path,
    records: Sequence[QARecord] | None = None,
    *,
    embedder: Embedder | None = None,
    progress: Progress | None = None,
    config: LoadConfig | None = None,
) -> LoadReport:
    """Return the context paragraphs of a question file, through the same pipeline as :func:`load_qa_contexts`
    (checkpoint, dead letters, reconciliation) — for ``demo`` and ``eval``, which run it every time.

    ``records``: the first questions of ``path`` already read (``eval --limit``); only their paragraphs
    are loaded. A load the checkpoint records as covering them, into the index the alias still names,
    with or without vectors as now, returns at once; a partial one resumes; anything else starts over.
    ``report.extra["already_indexed"]`` is what earlier loads had indexed."""
    config = config or LoadConfig()
    ck_path, _ = default_paths(config.state_dir, store.names.prefix, QaContextSource.kind, path)
    previous = read_checkpoint(ck_path)
    resume = (
        previous is not None
        and previous.source_size == QaContextSource(path).total()
        and previous.embed == (embedder is not None)
        and previous.index == await store.passages_index()
    )
    limit = None if records is None else sum(len(record.paragraphs) for record in records)
    options = LoadOptions(resume=resume, limit=limit, config=config)
    report = await load_qa_contexts(store, path, options, embedder=embedder, progress=progress)
    before = previous.indexed if resume and previous is not None else 0
    return dataclasses.replace(report, extra={**report.extra, "already_indexed": before})
