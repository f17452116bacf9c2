"""A local cache of passage vectors by (embedder id, content hash), so that a load can re-send a passage
whose text it has embedded before — an ACL change, a rebuild, a vector kept out of ``_source`` — without
embedding it again.

    cache = VectorCache.for_settings(settings)          # None where vector_cache_mb is 0
    hashes = [content_hash(text) for text in texts]
    found = cache.get_many(embedder.model_id, hashes)   # {hash: vector} of those cached
    cache.put_many(embedder.model_id, zip(hashes, vectors))

One SQLite file (``<cache_dir>/vectors.sqlite3``, WAL: several loads may share it), vectors as float32
blobs. Bounded: past ``max_bytes`` of vectors the least recently used go (a hit marks its rows used,
one ``UPDATE`` per :meth:`get_many`). The key is the text the embedder was given (``content_hash``: SHA-256),
with the embedder's id: another model, or another precision of one (its id differs), never shares vectors.
The cache is only ever a shortcut: a miss embeds, and a damaged file is started anew (logged).
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType

import numpy as np

from hopsearch.loaders.config import LoadConfig
from hopsearch.service.config.settings import Settings

log = logging.getLogger(__name__)

FILE_NAME = "vectors.sqlite3"
#: Rows asked for in one ``SELECT … IN`` (SQLite's default limit of host parameters is 32,766).
_CHUNK = 900
_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
    embedder TEXT NOT NULL,
    hash TEXT NOT NULL,
    vector BLOB NOT NULL,
    used REAL NOT NULL,
    PRIMARY KEY (embedder, hash)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS vectors_used ON vectors (used);
CREATE TABLE IF NOT EXISTS totals (id INTEGER PRIMARY KEY CHECK (id = 0), bytes INTEGER NOT NULL);
INSERT OR IGNORE INTO totals VALUES (0, 0);
"""


def content_hash(text: str) -> str:
    """Return the key of a text's vector: SHA-256 of its UTF-8 bytes (the exact text the embedder was given)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def passage_text(body: dict[str, object]) -> str:
    """Return the text a load embeds for a passage (title, a newline, text)."""
    return f"{body.get('title', '')}\n{body.get('text', '')}"


class VectorCache:
    """Vectors by (embedder id, content hash) in one SQLite file, at most ``max_bytes`` of them."""

    def __init__(self, path: Path, *, max_bytes: int = 1024 * 1024 * 1024) -> None:
        self.path = path
        self.max_bytes = max_bytes
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:  # not a database (damaged, or another file): start anew
            log.warning("vector cache %s unreadable (%s): started anew", path, exc)
            path.unlink(missing_ok=True)
            self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        return db

    @classmethod
    def for_settings(cls, settings: Settings | LoadConfig) -> VectorCache | None:
        """Return the cache of these settings (``<cache_dir>/vectors.sqlite3``, ``vector_cache_mb``), None if off."""
        if settings.vector_cache_mb <= 0:
            return None
        path = settings.cache_dir / FILE_NAME
        try:
            return cls(path, max_bytes=settings.vector_cache_mb * 1024 * 1024)
        except (OSError, sqlite3.Error) as exc:  # a folder this user cannot write: a load without the cache
            log.warning(
                "vector cache %s cannot be opened (%s): this load runs without it (vectors are read back or "
                "embedded again); set HOPSEARCH_CACHE_DIR to a writable folder, or HOPSEARCH_VECTOR_CACHE_MB=0",
                path,
                exc,
            )
            return None

    def get_many(self, embedder: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        """Return the cached vectors of ``hashes`` (those there are) for ``embedder``, by hash."""
        found: dict[str, list[float]] = {}
        wanted = list(dict.fromkeys(hashes))
        for start in range(0, len(wanted), _CHUNK):
            part = wanted[start : start + _CHUNK]
            marks = ",".join("?" * len(part))
            rows = self._db.execute(
                f"SELECT hash, vector FROM vectors WHERE embedder = ? AND hash IN ({marks})", (embedder, *part)
            ).fetchall()
            for key, blob in rows:
                found[key] = np.frombuffer(blob, dtype="<f4").tolist()
        if found:
            now = time.time()
            keys = list(found)
            for start in range(0, len(keys), _CHUNK):
                part = keys[start : start + _CHUNK]
                marks = ",".join("?" * len(part))
                self._db.execute(
                    f"UPDATE vectors SET used = ? WHERE embedder = ? AND hash IN ({marks})", (now, embedder, *part)
                )
        return found

    def put_many(self, embedder: str, items: Iterable[tuple[str, Sequence[float]]]) -> int:
        """Store vectors (hash, vector) of ``embedder``; returns how many. Past ``max_bytes`` the least
        recently used vectors are dropped, in the same transaction."""
        now = time.time()  # a microsecond apart: eviction keeps the order they were put in
        rows = [
            (embedder, key, np.asarray(vector, dtype="<f4").tobytes(), now + n * 1e-6)
            for n, (key, vector) in enumerate(items)
        ]
        if not rows:
            return 0
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            replaced = 0
            for start in range(0, len(rows), _CHUNK):
                part = [r[1] for r in rows[start : start + _CHUNK]]
                marks = ",".join("?" * len(part))
                (size,) = db.execute(
                    f"SELECT COALESCE(SUM(LENGTH(vector)), 0) FROM vectors WHERE embedder = ? AND hash IN ({marks})",
                    (embedder, *part),
                ).fetchone()
                replaced += int(size)
            db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?, ?)", rows)
            added = sum(len(r[2]) for r in rows) - replaced
            (total,) = db.execute(
                "UPDATE totals SET bytes = bytes + ? WHERE id = 0 RETURNING bytes", (added,)
            ).fetchone()
            if total > self.max_bytes:
                self._evict(int(total) - self.max_bytes)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return len(rows)

    def _evict(self, excess: int) -> None:
        """Drop the least recently used vectors until ``excess`` bytes are gone (inside a transaction)."""
        freed = 0
        while freed < excess:
            victims = self._db.execute(
                "SELECT embedder, hash, LENGTH(vector) FROM vectors ORDER BY used LIMIT 1000"
            ).fetchall()
            if not victims:
                break
            taken = []
            for embedder, key, size in victims:
                taken.append((embedder, key))
                freed += int(size)
                if freed >= excess:
                    break
            self._db.executemany("DELETE FROM vectors WHERE embedder = ? AND hash = ?", taken)
        self._db.execute("UPDATE totals SET bytes = MAX(0, bytes - ?) WHERE id = 0", (freed,))

    @property
    def bytes(self) -> int:
        """Bytes of vectors held."""
        (total,) = self._db.execute("SELECT bytes FROM totals WHERE id = 0").fetchone()
        return int(total)

    def __len__(self) -> int:
        (count,) = self._db.execute("SELECT COUNT(*) FROM vectors").fetchone()
        return int(count)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> VectorCache:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
