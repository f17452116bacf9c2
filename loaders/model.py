"""Plain data of a load: what a source hands the pipeline, the options of a run and its report.

Counting (DESIGN §3, the reconciliation ``read = indexed + rejected + skipped``) is per *position*: one
source record that the pipeline accounts for as a whole. A DPR or JSONL position is a line, a QA
position is one context paragraph, a docs position is one file. A position is

- **indexed** when Elasticsearch acknowledged every document it produced,
- **rejected** when it could not be parsed or any of its documents was refused (dead-lettered),
- **skipped** when the source chose not to index it (blank line, duplicate paragraph, unchanged file).

``read`` is counted by the source as it consumes positions and ``indexed`` from Elasticsearch's
per-item answers, so the equation is a real check, not a tautology.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hopsearch.loaders.config import LoadConfig


@dataclass(frozen=True, slots=True)
class Rejection:
    """One dead letter: where the bad input is (file, line / byte offset / record) and why."""

    position: int
    where: Mapping[str, Any]
    reason: str
    raw: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"position": self.position, **self.where, "reason": self.reason}
        if self.raw is not None:
            out["raw"] = self.raw
        return out


@dataclass(slots=True)
class SourceBatch:
    """Consecutive positions ``(after, last]`` of a source and the documents they produced.

    ``ids``, ``bodies``, ``doc_pos`` and ``locs`` (where each document came from, for dead letters) are
    parallel lists, one entry per document; ``one_doc_per_position`` lets the pipeline count
    acknowledgements without building sets. A line-based source may leave ``locs`` empty and fill
    ``offsets`` instead (no dict per line): :meth:`where` then says ``file``, ``line``, ``offset``.
    A source that can write its documents' ``_bulk`` lines itself (BM25-only loads, nothing to add to a
    document) fills ``encoded`` instead of ``bodies``: per document, its action and source lines, each
    ending in a newline, so that a batch's request body is one ``join``.
    """

    after: int
    last: int = 0
    read: int = 0
    skipped: int = 0
    progress: int = 0
    ids: list[str] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    doc_pos: list[int] = field(default_factory=list)
    locs: list[Mapping[str, Any]] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    one_doc_per_position: bool = True
    offsets: list[int] = field(default_factory=list)
    file: str = ""
    encoded: list[bytes] = field(default_factory=list)
    #: Positions (in ``bodies``) of documents the index holds with this very text (an ACL-only change):
    #: their vectors may be read back instead of embedded (:mod:`hopsearch.loaders.reuse`).
    stored: list[int] = field(default_factory=list)

    def add(self, position: int, doc_id: str, body: dict[str, Any], where: Mapping[str, Any]) -> None:
        self.ids.append(doc_id)
        self.bodies.append(body)
        self.doc_pos.append(position)
        self.locs.append(where)

    def where(self, i: int) -> Mapping[str, Any]:
        """Where document ``i`` came from."""
        if i < len(self.locs):
            return self.locs[i]
        return {"file": self.file, "line": self.doc_pos[i], "offset": self.offsets[i]}

    def reject(self, position: int, where: Mapping[str, Any], reason: str, raw: str | None = None) -> None:
        self.rejections.append(Rejection(position, where, reason, raw))


class Source(Protocol):
    """A corpus read as batches of positions; ``start_after`` resumes after a checkpointed position."""

    kind: str
    path: Path
    #: a stopped load goes on with ``--resume`` (a docs load is incremental instead: it is run again)
    resumable: bool

    def own_passages(self) -> dict[str, Any]:
        """Return the query of the passages this load writes: what a ``--rebuild`` replaces (the rest of the
        index is copied into the new version)."""

    def total(self) -> int | None:
        """Progress units of the whole source (bytes), ``None`` if unknown."""

    def batches(self, start_after: int, batch_size: int, limit: int | None) -> Iterator[SourceBatch]:
        """Batches of about ``batch_size`` documents, cut on position boundaries, in order."""


class Progress(Protocol):
    """Where the pipeline reports acknowledged work (the CLI draws a rich progress bar)."""

    def start(self, total: int | None, done: int, read: int) -> None: ...

    def update(self, done: int, read: int, indexed: int, rejected: int, skipped: int) -> None: ...


class NoProgress:
    def start(self, total: int | None, done: int, read: int) -> None:
        return None

    def update(self, done: int, read: int, indexed: int, rejected: int, skipped: int) -> None:
        return None


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """How to run a load. ``checkpoint`` / ``dead_letter`` default to files under the state dir."""

    batch_size: int = 1000
    workers: int = 3
    limit: int | None = None
    resume: bool = False
    rebuild: bool = False
    keep_old: bool = False
    checkpoint: Path | None = None
    dead_letter: Path | None = None
    max_retries: int = 8
    initial_backoff: float = 0.5
    refresh: bool = True
    #: load into this index or alias (created as a passages index if missing) instead of the default alias
    index: str | None = None
    #: docs: the principals of the files no ``.hopsearch-acl.yaml`` covers (None: no ``acl``; the
    #: ``acl_default`` setting decides at search time)
    acl: tuple[str, ...] | None = None
    #: what the load reads of the settings (the command line's: ``LoadConfig.of(settings)``)
    config: LoadConfig = field(default_factory=LoadConfig)


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What a load did. ``reconciled`` is the check the CLI prints and exits on."""

    kind: str
    source: str
    index: str
    read: int
    indexed: int
    rejected: int
    skipped: int
    documents: int
    seconds: float
    dead_letter: str
    checkpoint: str | None
    resumed_from: int = 0
    deleted: int = 0
    swapped_alias: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def reconciled(self) -> bool:
        return self.read == self.indexed + self.rejected + self.skipped

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "source": self.source,
            "index": self.index,
            "read": self.read,
            "indexed": self.indexed,
            "rejected": self.rejected,
            "skipped": self.skipped,
            "documents": self.documents,
            "deleted": self.deleted,
            "seconds": round(self.seconds, 3),
            "rate": round(self.read / self.seconds, 1) if self.seconds > 0 else None,
            "dead_letter": self.dead_letter,
            "checkpoint": self.checkpoint,
            "resumed_from": self.resumed_from,
            "swapped_alias": self.swapped_alias,
            "reconciled": self.reconciled,
            **dict(self.extra),
        }
