"""The resume checkpoint and the dead-letter file of a load.

The checkpoint records what Elasticsearch *acknowledged*: the highest position ``p`` such that every
position up to ``p`` is accounted for (indexed, rejected into the dead letters, or skipped), the counts
up to ``p``, the target index and the index settings to restore. It is rewritten atomically (a temporary
file, then ``os.replace``) every time that position advances, so a crash of the loader or of
Elasticsearch leaves the last good state. Deterministic ``_id``s make the replay after ``p`` idempotent.

The dead-letter file is JSONL, one rejection per line (position, file, line / byte offset / record,
reason, an excerpt of the raw input). On resume, entries past the checkpoint are dropped first: the
replay rejects them again, so nothing is reported twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson

from hopsearch.loaders.model import Rejection
from hopsearch.service.errors import ConfigError

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """State of one load of one source into one index."""

    kind: str
    source: str
    source_size: int
    index: str
    swap_alias: bool
    embed: bool
    position: int = 0
    progress: int = 0
    read: int = 0
    indexed: int = 0
    rejected: int = 0
    skipped: int = 0
    documents: int = 0
    restore_settings: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    updated_at: str = ""
    version: int = CHECKPOINT_VERSION

    def advanced(self, **changes: Any) -> Checkpoint:
        return dataclasses.replace(self, updated_at=datetime.now(UTC).isoformat(), **changes)


def default_paths(state_dir: Path, prefix: str, kind: str, source: Path) -> tuple[Path, Path]:
    """``(checkpoint, dead letters)`` under ``<state_dir>/loads/``, one pair per (prefix, kind, source)."""
    key = hashlib.sha1(str(source.resolve()).encode()).hexdigest()[:12]
    stem = f"{prefix}-{kind}-{source.name}-{key}"
    folder = state_dir / "loads"
    return folder / f"{stem}.checkpoint.json", folder / f"{stem}.deadletter.jsonl"


def read_checkpoint(path: Path) -> Checkpoint | None:
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"checkpoint {path} is unreadable: {exc}") from exc
    if not isinstance(data, dict) or data.get("version") != CHECKPOINT_VERSION:
        raise ConfigError(f"checkpoint {path} has an unknown format; remove it to start over")
    names = {f.name for f in dataclasses.fields(Checkpoint)}
    return Checkpoint(**{k: v for k, v in data.items() if k in names})


def write_checkpoint(path: Path, checkpoint: Checkpoint, *, sync: bool = False) -> None:
    """Atomic replace; ``sync`` also fsyncs (used for the final and the failure write)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as out:
        out.write(orjson.dumps(dataclasses.asdict(checkpoint), option=orjson.OPT_INDENT_2))
        if sync:
            out.flush()
            os.fsync(out.fileno())
    os.replace(tmp, path)


class DeadLetters:
    """Appends rejections to a JSONL file; ``count`` is what this run wrote."""

    def __init__(self, path: Path, *, source: str, keep_through: int | None) -> None:
        """``keep_through=None`` starts the file afresh; a position keeps entries up to it (resume)."""
        self.path = path
        self.source = source
        self.count = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        if keep_through is not None and path.exists():
            kept = [
                line
                for line in path.read_bytes().splitlines()
                if line.strip() and int(orjson.loads(line).get("position", 0)) <= keep_through
            ]
            path.write_bytes(b"".join(line + b"\n" for line in kept))
        elif keep_through is None:
            path.write_bytes(b"")
        self._out: IO[bytes] = path.open("ab")

    def write(self, rejection: Rejection) -> None:
        entry = {"source": self.source, **rejection.to_dict()}
        self._out.write(orjson.dumps(entry, default=str) + b"\n")
        self.count += 1

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self._out.close()
