"""The bulk pipeline every loader shares: read → (embed) → several streaming-bulk workers → checkpoint.

```
source.batches() ──► raw queue ──► embed stage ──────────► send queue ──► N workers ──► tracker
(parse, rejects, lang)   bounded     (only with vectors;        bounded      one _bulk per batch    checkpoint
                                      EMBED_AHEAD batches at once)
```

The queues are bounded, so memory stays constant whatever the corpus size. Each worker sends one batch
as one ``_bulk`` request of a body built in one pass (``loaders/bulk.py``; 429s are retried through
the client library's ``async_streaming_bulk`` with exponential back-off). The tracker accounts batches
in source order, advances the checkpoint over the contiguous acknowledged prefix and writes rejected
items to the dead letters with their source position.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import time
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hopsearch.loaders.bulk import send_batch
from hopsearch.loaders.checkpoint import (
    Checkpoint,
    DeadLetters,
    default_paths,
    read_checkpoint,
    write_checkpoint,
)
from hopsearch.loaders.model import LoadOptions, LoadReport, NoProgress, Progress, Rejection, Source, SourceBatch
from hopsearch.loaders.rebuild import copy_rest, rebuild_advice
from hopsearch.loaders.refusals import stopped
from hopsearch.loaders.reuse import VectorCounts, fill_vectors
from hopsearch.loaders.target import LoadSettings, embedder_of_index, open_target
from hopsearch.loaders.vector_cache import VectorCache
from hopsearch.service.errors import ConfigError, EmbedderMismatch, InputError, StoreError
from hopsearch.service.store import Store
from hopsearch.service.text.japanese import TOKENS, annotate, ja_tokens_of
from hopsearch.service.text.names import NAMES_VERSION, names_of
from hopsearch.service.types import Embedder

log = logging.getLogger(__name__)
#: loader batches being embedded at once (the embedder and Elasticsearch are kept busy together either way)
EMBED_AHEAD = 2


class _Tracker:
    """Accounts finished batches in order and keeps the checkpoint of the acknowledged prefix."""

    def __init__(self, checkpoint: Checkpoint, path: Path, letters: DeadLetters, progress: Progress) -> None:
        self.checkpoint = checkpoint
        self.path = path
        self.letters = letters
        self.progress = progress
        self.next_seq = 0
        self.finished: dict[int, tuple[SourceBatch, int, int, int]] = {}

    def finish(self, seq: int, batch: SourceBatch, ok: list[bool], failures: list[Mapping[str, Any]]) -> None:
        failed_pos: set[int] = set()
        if failures:
            index_of = {doc_id: i for i, doc_id in enumerate(batch.ids)}
            for info in failures:
                _, item = next(iter(info.items()))
                i = index_of.get(str(item.get("_id")), -1)
                error = item.get("error")
                reason = f"{error.get('type')}: {error.get('reason')}" if isinstance(error, dict) else str(error)
                pos = batch.doc_pos[i] if i >= 0 else batch.last
                where = {**batch.where(i), "_id": item.get("_id")} if i >= 0 else {"_id": item.get("_id")}
                self.letters.write(Rejection(pos, where, f"HTTP {item.get('status')}: {reason}"))
                failed_pos.add(pos)
        acked = sum(ok)
        if batch.one_doc_per_position:
            indexed = acked
        else:
            indexed = len({p for p, good in zip(batch.doc_pos, ok, strict=False) if good} - failed_pos)
        rejected = len(batch.rejections) + len(failed_pos)
        self.finished[seq] = (batch, indexed, rejected, acked)
        self._advance()

    def _advance(self) -> None:
        moved = False
        ck = self.checkpoint
        while self.next_seq in self.finished:
            batch, indexed, rejected, acked = self.finished.pop(self.next_seq)
            ck = ck.advanced(
                position=batch.last,
                progress=batch.progress,
                read=ck.read + batch.read,
                indexed=ck.indexed + indexed,
                rejected=ck.rejected + rejected,
                skipped=ck.skipped + batch.skipped,
                documents=ck.documents + acked,
            )
            self.next_seq += 1
            moved = True
        if moved:
            self.checkpoint = ck
            self.letters.flush()
            write_checkpoint(self.path, ck)
            self.progress.update(ck.progress, ck.read, ck.indexed, ck.rejected, ck.skipped)


class _Pump:
    """The stages of one load between the source and the tracker, each a method: ``produce`` (read,
    parse, language), ``embed`` (only with vectors) and ``work`` (one streaming-bulk worker)."""

    def __init__(
        self,
        store: Store,
        source: Source,
        index: str,
        options: LoadOptions,
        embedder: Embedder | None,
        tracker: _Tracker,
        cache: VectorCache | None,
        counts: VectorCounts,
    ) -> None:
        self.store, self.source, self.index, self.options = store, source, index, options
        self.embedder, self.tracker, self.cache, self.counts = embedder, tracker, cache, counts
        # batches go through the vector stage when there are vectors to add, or to keep (a re-sent passage)
        self.vectors = embedder is not None or bool(getattr(source, "reuses_vectors", False))
        self.workers = max(1, options.workers)
        self.raw: asyncio.Queue[tuple[int, SourceBatch] | None] = asyncio.Queue(maxsize=2)
        self.send: asyncio.Queue[tuple[int, SourceBatch] | None] = asyncio.Queue(maxsize=self.workers)

    async def produce(self, batches: Iterator[SourceBatch]) -> None:
        out = self.raw if self.vectors else self.send
        seq = 0
        try:
            # parsed in a thread: the event loop keeps answering the workers' responses meanwhile
            while (batch := await asyncio.to_thread(next, batches, None)) is not None:
                for rejection in batch.rejections:
                    self.tracker.letters.write(rejection)
                await out.put((seq, batch))
                seq += 1
        except (OSError, EOFError) as exc:  # a truncated .gz, a disk error: the file itself is bad
            raise InputError(f"cannot read on: {exc}", source=str(self.source.path)) from exc
        if self.vectors:
            await self.raw.put(None)
        else:
            await self._end_workers()

    async def _end_workers(self) -> None:
        for _ in range(self.workers):
            await self.send.put(None)

    async def _add_vectors(self, batch: SourceBatch) -> None:
        if batch.bodies:  # the cache, the index (unchanged passages), then the embedder
            await fill_vectors(self.store, self.index, batch, self.embedder, self.cache, self.counts)

    async def embed(self) -> None:
        # EMBED_AHEAD batches are filled at once, handed on in order: a remote server gets the next
        # batch's requests while the last batch's are still out (and the bulk workers send meanwhile)
        pending: deque[tuple[tuple[int, SourceBatch], asyncio.Task[None]]] = deque()
        try:
            while (item := await self.raw.get()) is not None:
                if (
                    item[1].encoded and self.embedder is not None
                ):  # a source that encodes must not when vectors are added
                    raise ConfigError(f"{self.source.kind} source wrote its documents' lines, but they need embeddings")
                pending.append((item, asyncio.create_task(self._add_vectors(item[1]))))
                if len(pending) >= EMBED_AHEAD:
                    done, task = pending.popleft()
                    await task
                    await self.send.put(done)
            while pending:
                done, task = pending.popleft()
                await task
                await self.send.put(done)
        finally:
            for _, task in pending:
                task.cancel()
        await self._end_workers()

    async def work(self) -> None:
        while (item := await self.send.get()) is not None:
            seq, batch = item
            ok: list[bool] = []
            failures: list[Mapping[str, Any]] = []
            if batch.ids:
                ok, failures = await send_batch(self.store, self.index, batch, self.options)
            self.tracker.finish(seq, batch, ok, failures)

    async def run(self, batches: Iterator[SourceBatch]) -> None:
        tasks = [asyncio.create_task(self.produce(batches), name="produce")]
        if self.vectors:
            tasks.append(asyncio.create_task(self.embed(), name="embed"))
        tasks += [asyncio.create_task(self.work(), name=f"bulk-{i}") for i in range(self.workers)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _pump(
    store: Store,
    source: Source,
    index: str,
    options: LoadOptions,
    embedder: Embedder | None,
    tracker: _Tracker,
    ja_analysis: str | None,
    cache: VectorCache | None = None,
    counts: VectorCounts | None = None,
    ja_tokens: int = TOKENS,
    names: int | None = None,
) -> None:
    start = tracker.checkpoint.position
    limit = None if options.limit is None else max(0, options.limit - tracker.checkpoint.read)
    pump = _Pump(store, source, index, options, embedder, tracker, cache, counts or VectorCounts())
    await pump.run(_with_language(source.batches(start, options.batch_size, limit), ja_analysis, ja_tokens, names))


def _with_language(
    batches: Iterator[SourceBatch], ja_analysis: str | None, ja_tokens: int = TOKENS, names: int | None = None
) -> Iterator[SourceBatch]:
    """Each document's ``lang`` and, for Japanese text in a SudachiPy index, its token fields (in the
    producer's thread, like parsing; the index's token recipe), and its ``names`` where the index holds
    them (``names``: the index's names recipe, :mod:`hopsearch.service.text.names`). Ready ``_bulk`` lines
    (``encoded``) are sent as they are."""
    for batch in batches:
        for body in batch.bodies:
            annotate(body, ja_analysis, ja_tokens)
            if names:
                body["names"] = names_of(f"{body.get('title') or ''}\n{body.get('text') or ''}", body.get("lang"))
        yield batch


@contextmanager
def _few_gc_passes() -> Iterator[None]:
    """Keep the cycle collector's passes few during a load. A load makes millions of short-lived, acyclic dicts and
    strings, and each default-threshold pass of the cycle collector walks the batches in flight: ~10% of the loader's
    CPU for nothing. For the duration of a load the objects of the program so far are frozen out of the passes and the
    first threshold is raised; both are restored afterwards."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(before[0], 50_000), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


async def run_load(
    store: Store,
    source: Source,
    options: LoadOptions | None = None,
    *,
    embedder: Embedder | None = None,
    progress: Progress | None = None,
) -> LoadReport:
    """Load ``source`` into the passages index (or a new version with ``rebuild``); see the module doc."""
    options = options or LoadOptions()
    ck_default, dl_default = default_paths(options.config.state_dir, store.names.prefix, source.kind, source.path)
    ck_path = options.checkpoint or ck_default
    dl_path = options.dead_letter or dl_default
    previous, restarted = _previous_load(source, options, ck_path, embedder)
    if previous is not None and (previous.done or (options.limit is not None and previous.read >= options.limit)):
        log.info("checkpoint %s says this load is complete", ck_path)
        return _report(previous, source, 0.0, dl_path, ck_path, resumed_from=previous.position)
    if options.resume and previous is None:
        log.warning("no checkpoint at %s: starting from the beginning", ck_path)
    embedder = await embedder_of_index(
        store,
        embedder,
        rebuild=options.rebuild and previous is None,
        index=previous.index if previous else options.index,
        embedders=options.config.embedders,
    )
    began = time.monotonic()
    run = _Run(store, source, options, embedder, progress or NoProgress(), ck_path, dl_path, previous)
    final = await run.finish(await run.load())
    seconds = time.monotonic() - began
    report = _report(final, source, seconds, dl_path, ck_path, resumed_from=previous.position if previous else 0)
    extra = run.extra
    if restarted:
        extra["restarted"] = restarted
    if embedder is not None or run.counts.stored:
        extra["vectors"] = run.counts.to_dict()
    return dataclasses.replace(report, extra=extra) if extra else report


def _previous_load(
    source: Source, options: LoadOptions, ck_path: Path, embedder: Embedder | None
) -> tuple[Checkpoint | None, str]:
    """Return the checkpoint a ``--resume`` goes on from (None: start over), and why it started over instead."""
    resolved = str(source.path.resolve())
    previous = read_checkpoint(ck_path) if options.resume else None
    if previous is not None and (previous.source != resolved or previous.kind != source.kind):
        raise ConfigError(f"checkpoint {ck_path} belongs to {previous.kind} load of {previous.source}")
    if previous is not None and previous.source_size != (source.total() or 0):
        raise ConfigError(f"{source.path} changed since checkpoint {ck_path} was written; start over")
    if previous is not None and previous.embed != (embedder is not None):
        if embedder is None:
            raise ConfigError(
                f"checkpoint {ck_path} is of a load with vectors: resume it with the embedder, or start over "
                "without --resume"
            )
        # the positions done so far were loaded with --no-embed: resuming would leave them without vectors
        restarted = "the checkpoint was of a --no-embed load: started over to add vectors"
        log.warning("checkpoint %s: %s", ck_path, restarted)
        return None, restarted
    return previous, ""


class _Run:
    """One load's steps after its checkpoint is chosen: open the target, send, copy the rest, finish."""

    def __init__(
        self,
        store: Store,
        source: Source,
        options: LoadOptions,
        embedder: Embedder | None,
        progress: Progress,
        ck_path: Path,
        dl_path: Path,
        previous: Checkpoint | None,
    ) -> None:
        self.store, self.source, self.options, self.embedder = store, source, options, embedder
        self.progress, self.ck_path, self.dl_path, self.previous = progress, ck_path, dl_path, previous
        # the index the messages name until the target is known
        self.index = previous.index if previous else options.index or store.names.passages_alias
        self.swap = False
        #: whether this load added ``names`` to an index made before them (:meth:`_names`)
        self.names_added = False
        self.held: LoadSettings | None = None
        self.checkpoint = previous
        self.extra: dict[str, Any] = {}
        self.counts = VectorCounts()

    async def load(self) -> Checkpoint:
        """Open the target, send every batch, copy the rest of a rebuild; return the checkpoint at the end."""
        try:
            held, checkpoint = await self._open()
            async with held:
                checkpoint, ja_analysis = await self._send(checkpoint)
                await self._copy_rest(ja_analysis)
            return checkpoint
        except EmbedderMismatch as exc:
            shown = getattr(self.source, "only", None) or self.source.path  # a docs load of one file names the file
            raise rebuild_advice(exc, self.source.kind, shown, self.options.index) from exc
        except StoreError as exc:
            at = self.checkpoint.position if self.checkpoint else None
            raise stopped(exc, self.index, at, self.ck_path, self.held, resumable=self.source.resumable) from exc

    async def _open(self) -> tuple[LoadSettings, Checkpoint]:
        store, previous, options, source = self.store, self.previous, self.options, self.source
        rebuild, named = options.rebuild, options.index
        self.index, self.swap = await open_target(store, self.embedder, rebuild=rebuild, previous=previous, named=named)
        restore_settings = previous.restore_settings if previous else _left_over(self.ck_path, self.index)
        held = self.held = LoadSettings(store, self.index, restore_settings)
        restore = await held.remember()
        checkpoint = previous or Checkpoint(
            kind=source.kind,
            source=str(source.path.resolve()),
            source_size=source.total() or 0,
            index=self.index,
            swap_alias=self.swap,
            embed=self.embedder is not None,
            restore_settings=restore,
        )
        self.checkpoint = checkpoint
        write_checkpoint(self.ck_path, checkpoint, sync=True)
        return held, checkpoint

    async def _send(self, checkpoint: Checkpoint) -> tuple[Checkpoint, str | None]:
        """Every batch from the checkpoint on through ``_pump``; the checkpoint after, and the index's
        Japanese analysis."""
        store, source, index = self.store, self.source, self.index
        kept = self.previous.position if self.previous else None
        letters = DeadLetters(self.dl_path, source=str(source.path), keep_through=kept)
        tracker = _Tracker(checkpoint, self.ck_path, letters, self.progress)
        self.progress.start(source.total(), checkpoint.progress, checkpoint.read)
        reuses = self.embedder is not None or bool(getattr(source, "reuses_vectors", False))
        cache = VectorCache.for_settings(self.options.config) if reuses else None
        try:
            with _few_gc_passes():
                meta = await store.index_meta(index)
                ja_analysis: str | None = meta.get("ja_analysis")
                names = await self._names(meta)
                args = (ja_analysis, cache, self.counts, ja_tokens_of(meta), names)
                await _pump(store, source, index, self.options, self.embedder, tracker, *args)
        finally:
            letters.close()
            if cache is not None:
                cache.close()
            checkpoint = self.checkpoint = tracker.checkpoint
            write_checkpoint(self.ck_path, checkpoint, sync=True)
        return checkpoint, ja_analysis

    async def _names(self, meta: Mapping[str, Any]) -> int:
        """Return the names recipe the load fills: an index made before names gets the field in place (its
        ``_meta`` says so once the load is done, :meth:`finish`)."""
        if not isinstance(meta.get("names"), int):
            await self.store.add_names_field(self.index)
            self.names_added = True
        return NAMES_VERSION

    async def _copy_rest(self, ja_analysis: str | None) -> None:
        """Copy the other sources' passages from the old index, for a rebuild of one source's passages."""
        old = await self.store.passages_index() if self.swap else None
        if old is not None and old != self.index:
            own = self.source.own_passages()
            copied = await copy_rest(self.store, old, self.index, own, self.embedder, self.options, ja_analysis)
            self.extra |= {"copied": copied, "copied_from": old}

    async def finish(self, checkpoint: Checkpoint) -> Checkpoint:
        """Refresh, swap the alias, and the checkpoint marked done (unless ``--limit`` cut it short)."""
        if self.options.refresh:
            await self.store.refresh(self.index)
        if self.swap:
            await self.store.swap_alias(self.index, delete_old=not self.options.keep_old)
        # a load cut short by --limit may be resumed with a larger limit; one that read everything is done
        limit = self.options.limit
        final = checkpoint.advanced(done=limit is None or checkpoint.read < limit)
        if self.names_added and final.done:
            await self.store.mark_names(self.index)
        write_checkpoint(self.ck_path, final, sync=True)
        return final


def _left_over(ck_path: Path, index: str) -> dict[str, Any] | None:
    """Return the settings a stopped load of this source into ``index`` could not restore (a block refused
    them), for a load that starts over instead of resuming (a docs load always does) to restore."""
    try:
        earlier = read_checkpoint(ck_path)
    except ConfigError:
        return None
    if earlier is None or earlier.done or earlier.index != index or not earlier.restore_settings:
        return None
    return dict(earlier.restore_settings)


def _report(
    ck: Checkpoint, source: Source, seconds: float, dl_path: Path, ck_path: Path, *, resumed_from: int
) -> LoadReport:
    return LoadReport(
        kind=source.kind,
        source=str(source.path),
        index=ck.index,
        read=ck.read,
        indexed=ck.indexed,
        rejected=ck.rejected,
        skipped=ck.skipped,
        documents=ck.documents,
        seconds=seconds,
        dead_letter=str(dl_path),
        checkpoint=str(ck_path),
        resumed_from=resumed_from,
        swapped_alias=ck.swap_alias,
    )
