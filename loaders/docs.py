"""Company documents: a directory tree of ``.md``, ``.txt``, ``.csv``, ``.html``, ``.pdf``, ``.docx``,
``.xlsx`` and ``.pptx`` files (:data:`~hopsearch.loaders.extract.EXTRACTORS`).

Incremental by content: every chunk carries its file's ``content_sha`` (SHA-256 of the bytes) and the
file's chunk count (``metadata.chunks``). Before a load the index is asked, with one composite
aggregation, which (path, sha) pairs it holds, how many chunks of each and how many of those have a
vector; a file whose sha matches and whose chunks are all there is skipped, unless the load embeds and
some of its chunks have no vector (loaded with ``--no-embed``): those are indexed again, with vectors.
Every vector is written with its model's id (``embedder``), and only vectors of the load's embedder
count (``Store.check_embedder`` also refuses vectors of another model than the index's). A changed
file's chunks are overwritten in place (``_id`` = ``<doc_id>-<n>``, ``doc_id`` = an HMAC-SHA-256 of the
absolute path keyed by the deployment's secret: :func:`doc_id_of`) and its surplus old chunks are
deleted; files under the root that are gone from the tree have all their chunks deleted. A file the index
holds under another id (the SHA-1 of its path, before issue 51) is re-keyed by the next load: sent again
under its id, its chunks under the old one deleted, once.

Permissions: each chunk carries its file's ``acl`` (``--acl`` and ``.hopsearch-acl.yaml`` sidecars:
:mod:`hopsearch.loaders.acl`), and the index is asked which principals each file's chunks hold. A file
whose content is unchanged but whose ACL is not is re-sent whole (token fields included), its vectors
from the vector cache or read back from the index, never embedded again.

Every chunk also records its extractor's version (``metadata.extractor``,
:func:`~hopsearch.loaders.extract.extractor_version`): a file whose chunks an older version made is read
again though its bytes are unchanged (text files first indexed as latin-1 mojibake); so is one whose
chunks hold no names of the current recipe (``metadata.names``, :mod:`hopsearch.service.text.names`: an
index made before names gets them in place). Files of a suffix
that is not read (``.doc``, ``.xls``, ``.zip``…) are counted by suffix (``files_not_read``), apart from
the files read.

Positions are files in sorted walk order. A file is rejected (dead letter with its path) when it cannot be
read — a broken symlink, a FIFO or other non-regular file, a file that vanished or cannot be opened, an
unreadable directory — when its library fails on it (a corrupt PDF), when its text cannot be decoded with
confidence (:mod:`hopsearch.loaders.decode`), when its text is over ``docs_max_text_mb``, when a zip-based
file is over the ``zip_max_*`` limits (a zip bomb, refused before it is inflated), when it yields no text (an
empty file), or when its name is not UTF-8 (it is shown escaped: ``bad\\xff.md``). A file that cannot be read
keeps its earlier chunks, if any; one whose bytes were read but yield no text now has them deleted: they are
not what the file holds. The files under a directory that cannot be listed are unknown, not gone: their chunks
stay, and the report names the directory (``unreadable_dirs``; the CLI exits non-zero on it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import os
import stat
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from hopsearch.loaders.acl import SIDECAR, FolderAcls
from hopsearch.loaders.batching import cut
from hopsearch.loaders.chunking import chunk_document
from hopsearch.loaders.extract import EXTRACTORS, extract, extractor_version
from hopsearch.loaders.model import LoadOptions, LoadReport, Progress, SourceBatch
from hopsearch.loaders.pipeline import run_load
from hopsearch.loaders.target import embedder_of_index
from hopsearch.loaders.ziplimits import ZipLimits
from hopsearch.service.auth.deployment import deployment_secret
from hopsearch.service.errors import InputError
from hopsearch.service.outlines.purge import purge_derived
from hopsearch.service.store import FileState, Store
from hopsearch.service.text.lang import detect_lang
from hopsearch.service.text.names import NAMES_VERSION
from hopsearch.service.types import Embedder

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 64 * 1024 * 1024

#: path -> what the index holds of each version of the file (:meth:`Store.file_states`)
State = dict[str, list[FileState]]


def doc_id_of(path: str, secret: bytes) -> str:
    """Return a file's document id: an HMAC-SHA-256 of its absolute path keyed by the deployment's secret.

    The secret (:mod:`hopsearch.service.auth.deployment`) keeps the id from giving the path away.
    """
    return hmac.new(secret, path.encode(), hashlib.sha256).hexdigest()[:32]


def shown(path: str) -> str:
    """``path`` as text that can be stored and printed: bytes of its name that are not UTF-8 (Python keeps
    them as lone surrogates) written as ``\\xff``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _not_utf8(path: str) -> bool:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


NOT_UTF8 = "file name is not valid UTF-8 (a passage's path is stored as UTF-8 text): rename the file to load it"


class DocsSource:
    """The files under ``root`` as batches of chunks; files unchanged against ``state`` are skipped."""

    kind = "docs"
    #: An unchanged file whose ACL changed is re-sent whole, its vectors read back (:mod:`..reuse`).
    reuses_vectors = True
    resumable = False

    def __init__(
        self,
        root: Path,
        state: State,
        *,
        min_words: int = 100,
        max_words: int = 200,
        embed: bool = False,
        only: Path | None = None,
        zip_limits: ZipLimits | None = None,
        acls: FolderAcls | None = None,
        max_text: int | None = None,
        secret: bytes = b"",
        held_ids: dict[str, set[str]] | None = None,
    ) -> None:
        self.path = root
        self.secret = secret  # keys the document ids (:func:`doc_id_of`)
        self.held_ids = held_ids or {}  # path -> the doc ids its chunks have in the index
        self.rekeyed: set[str] = set()  # files held under another id (older scheme): re-sent, old chunks deleted
        self.max_text = max_text  # characters of text one file may yield (``docs_max_text_mb``)
        self.zip_limits = zip_limits or ZipLimits()
        self.state = state
        self.embed = embed
        self.only = only  # one file of ``root`` instead of the whole tree
        self.min_words = min_words
        self.max_words = max_words
        self.walk_errors: list[tuple[str, str]] = []
        self.not_read: Counter[str] = Counter()  # suffix -> files of it under the root that are not read
        self.files = self._walk()
        self.seen: set[str] = set(self.files)
        self.changed: dict[str, int] = {}  # path -> chunk count of the new version
        self.unextracted: set[str] = set()  # read, but no text came out: its earlier chunks are deleted
        self.acl_changed = 0  # unchanged files re-sent for their ACL alone
        self.acls = acls or FolderAcls()
        self.acls.check({root, *(Path(f).parent for f in self.files)})  # a bad sidecar stops the load here

    def _walk(self) -> list[str]:
        if self.only is not None:
            return [str(self.only)]
        found: list[str] = []

        def on_error(exc: OSError) -> None:
            why = f"unreadable directory: {exc.strerror or exc} (chunks of its files kept)"
            self.walk_errors.append((shown(str(exc.filename)), why))

        for folder, dirs, names in os.walk(self.path, onerror=on_error):
            dirs.sort()
            for name in sorted(names):
                if Path(name).suffix.lower() in EXTRACTORS:
                    found.append(os.path.join(folder, name))
                elif name != SIDECAR:
                    self.not_read[Path(name).suffix.lower() or "(no suffix)"] += 1
        return found

    def total(self) -> int | None:
        return len(self.files) + len(self.walk_errors)

    def own_passages(self) -> dict[str, Any]:
        """Return the chunks of this folder's files (of the one file, with ``only``), but for those under a
        directory that could not be listed: unknown, not gone."""
        where = {"term": {"path": str(self.only)}} if self.only else {"prefix": {"path": f"{self.path}{os.sep}"}}
        unknown = [{"prefix": {"path": f"{folder.rstrip(os.sep)}{os.sep}"}} for folder, _ in self.walk_errors]
        return {"bool": {"filter": [{"term": {"source": "docs"}}, where], "must_not": unknown}}

    def _read(self, path: str) -> tuple[bytes, os.stat_result]:
        try:
            info = os.stat(path)
        except FileNotFoundError as exc:
            kind = "broken symlink" if os.path.islink(path) else "file disappeared"
            raise InputError(f"unreadable: {kind} ({exc.strerror})") from exc
        except OSError as exc:
            raise InputError(f"unreadable: {exc.strerror or exc}") from exc
        if not stat.S_ISREG(info.st_mode):
            raise InputError("unreadable: not a regular file (FIFO, socket or device)")
        if info.st_size > MAX_FILE_BYTES:
            raise InputError(f"file larger than {MAX_FILE_BYTES} bytes")
        try:
            with open(path, "rb") as fh:
                return fh.read(), info
        except OSError as exc:
            raise InputError(f"unreadable: {exc.strerror or exc}") from exc

    def _check_budget(self, chars: int) -> None:
        """Refuse a file whose text is over the per-file budget (the rest of the folder still loads)."""
        if self.max_text is not None and chars > self.max_text:
            raise InputError(
                f"text of {chars:,} characters is over the per-file budget of {self.max_text:,} "
                "(docs_max_text_mb): not indexed"
            )

    def _complete(self, sha: str, held: FileState) -> bool:
        """Whether the index already holds this version of a file in full (with vectors, if this load embeds)."""
        return (
            held.content_sha == sha
            and held.present == held.expected
            and (not self.embed or held.vectors == held.present)
        )

    def batches(self, start_after: int, batch_size: int, limit: int | None) -> Iterator[SourceBatch]:
        stamp = datetime.now(UTC).isoformat()
        entries = [(p, None) for p in self.files] + [(p, why) for p, why in self.walk_errors]

        def fill(batch: SourceBatch, files: Iterator[tuple[int, tuple[str, str | None]]]) -> None:
            for position, (path, walk_error) in files:
                batch.last = position
                if walk_error is None and _not_utf8(path):
                    walk_error = NOT_UTF8
                if walk_error is not None:
                    batch.reject(position, {"file": shown(path)}, walk_error)
                else:
                    self._add_file(batch, position, path, stamp)
                if len(batch.ids) >= batch_size:
                    return

        yield from cut(
            enumerate(entries[start_after:], start=start_after + 1),
            fill,
            start_after=start_after,
            batch_size=batch_size,
            limit=limit,
            progress=lambda batch: batch.last,
            make=partial(SourceBatch, one_doc_per_position=False),
        )

    def _add_file(self, batch: SourceBatch, position: int, path: str, stamp: str) -> None:
        """One file's chunks into ``batch``, or its rejection; skipped where the index holds it already."""
        where = {"file": path}
        try:
            data, info = self._read(path)
            sha = hashlib.sha256(data).hexdigest()
            known = self.state.get(path, [])
            acl = self.acls.acl_of(Path(path))
            version = extractor_version(Path(path).suffix)
            held = known[0] if len(known) == 1 else None
            fresh = held is not None and held.extractor >= version and held.names >= NAMES_VERSION  # else read again
            unchanged = held is not None and self._complete(sha, held) and fresh
            doc_id = doc_id_of(path, self.secret)
            if self.held_ids.get(path, {doc_id}) != {doc_id}:
                self.rekeyed.add(path)
                unchanged = False  # sent again, whole, under its id: its chunks under the old one go
            if unchanged and held is not None and held.acl == (acl or ()):
                batch.skipped += 1
                return
        except InputError as exc:
            batch.reject(position, where, exc.reason)
            return
        try:
            title, blocks = extract(Path(path).suffix, data, source=path, limits=self.zip_limits)
            self._check_budget(sum(len(b.text) for b in blocks))
            lang = detect_lang(" ".join(b.text for b in blocks))
            chunks = chunk_document(blocks, lang, min_words=self.min_words, max_words=self.max_words)
            if not chunks:
                raise InputError("no text extracted (empty document)")
        except InputError as exc:
            self.unextracted.add(path)
            batch.reject(position, where, exc.reason)
            return
        # surplus old chunks go for a re-sent file too (they would keep its old ACL)
        self.changed[path] = len(chunks)
        self.acl_changed += unchanged  # only its ACL changed: the same chunks again, whole, vectors kept
        meta = {
            "mtime": datetime.fromtimestamp(info.st_mtime, UTC).isoformat(),
            "size": info.st_size,
            "type": Path(path).suffix.lower().lstrip("."),
            "chunks": len(chunks),
            "root": str(self.path),
            "extractor": version,
            "names": NAMES_VERSION,
        }
        for n, chunk in enumerate(chunks):
            body: dict[str, Any] = {
                "title": title or Path(path).stem,
                "text": chunk.text,
                "source": "docs",
                "doc_id": doc_id,
                "chunk": n,
                "path": path,
                "url": Path(path).as_uri(),
                "headings": list(chunk.headings),
                "lang": lang,
                "metadata": meta,
                "content_sha": sha,
                "indexed_at": stamp,
            }
            if acl is not None:
                body["acl"] = list(acl)
            if unchanged:
                batch.stored.append(len(batch.bodies))
            batch.add(position, f"{doc_id}-{n}", body, {**where, "chunk": n})


def _under_any(path: str, folders: list[str]) -> bool:
    """Whether ``path`` lies in one of ``folders`` (whose listing failed: its files are unknown)."""
    return any(path == folder or path.startswith(folder.rstrip(os.sep) + os.sep) for folder in folders)


def _target(path: Path) -> tuple[Path, Path | None]:
    """``(root, only)``: a directory is walked; a single file is loaded alone (its folder is the root)."""
    if path.is_dir():
        return path.resolve(), None
    if path.is_file():
        if path.suffix.lower() not in EXTRACTORS:
            raise InputError(f"not a supported document type ({', '.join(sorted(EXTRACTORS))})", source=str(path))
        resolved = path.resolve()
        return resolved.parent, resolved
    raise InputError("no such file or directory", source=str(path))


async def load_docs(
    store: Store,
    root: Path,
    options: LoadOptions | None = None,
    *,
    embedder: Embedder | None = None,
    progress: Progress | None = None,
    acl: Sequence[str] | None = None,
) -> LoadReport:
    """Index (incrementally) the documents under ``root`` (a directory, or one file); the report counts
    files. ``options.index`` loads into that index or alias instead of the default one. ``acl``: the
    principals of the files no sidecar covers (:mod:`hopsearch.loaders.acl`); a file whose ACL changed is
    re-sent whole without embedding it again."""
    root, only = _target(root)
    try:
        acls = FolderAcls(acl if acl is not None else (options.acl if options is not None else None))
    except ValueError as exc:
        raise InputError(str(exc), source="--acl") from exc
    options = dataclasses.replace(options or LoadOptions(), resume=False, limit=None)
    embedder = await embedder_of_index(
        store, embedder, rebuild=options.rebuild, index=options.index, embedders=options.config.embedders
    )
    embedder_id = embedder.model_id if embedder is not None else None
    name = options.index or store.names.passages_alias
    just = str(only) if only else None
    state = {} if options.rebuild else await store.file_states(name, str(root), embedder_id, just)
    held = {} if options.rebuild else await store.held_doc_ids(name, str(root), just)
    secret = await deployment_secret(store)
    source = DocsSource(
        root,
        state,
        embed=embedder is not None,
        only=only,
        zip_limits=options.config.zip_limits,
        acls=acls,
        max_text=options.config.max_text,
        secret=secret,
        held_ids=held,
    )
    report = await run_load(store, source, options, embedder=embedder, progress=progress)
    surplus = [(path, count) for path, count in source.changed.items() if path in state]
    rekeyed = [(path, doc_id_of(path, secret)) for path in sorted(source.rekeyed & set(source.changed))]
    unreadable = [folder for folder, _ in source.walk_errors]
    gone = [path for path in state if path not in source.seen and not _under_any(path, unreadable)]
    paths = gone + [path for path in sorted(source.unextracted) if path in state]
    cascade = partial(purge_derived, store)
    deleted = (
        await store.delete_passages(report.index, paths, surplus, rekeyed, cascade=cascade)
        if paths or surplus or rekeyed
        else 0
    )
    extra = {
        **report.extra,
        "files_new_or_changed": len(source.changed) - source.acl_changed,
        "files_acl_changed": source.acl_changed,
        "files_removed": len(gone),
        "files_rekeyed": len(rekeyed),
        "files_unextracted_removed": sum(path in state for path in source.unextracted),
        "files_not_read": dict(sorted(source.not_read.items())),
        "unreadable_dirs": unreadable,
        "acl_sidecars": source.acls.sidecars,
    }
    return dataclasses.replace(report, deleted=deleted, extra=extra)
