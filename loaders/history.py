"""A small report per load, kept under ``<state_dir>/loads/reports/``: what ``hopsearch loads`` lists.

The checkpoint of a source is rewritten by every load of it and says only where the last one stopped;
these reports are one file per load (JSON: the :class:`~hopsearch.loaders.model.LoadReport`, the index
prefix, start and end), so past loads and their dead-letter files stay findable.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from hopsearch.loaders.model import LoadReport


def reports_dir(state_dir: Path) -> Path:
    return state_dir / "loads" / "reports"


@dataclass(frozen=True, slots=True)
class PastLoad:
    id: str
    prefix: str
    started_at: str
    finished_at: str
    report: dict[str, Any]

    @property
    def dead_letters(self) -> int:
        """Rejections on record in the dead-letter file now (a later load of the source rewrites it)."""
        path = Path(str(self.report.get("dead_letter") or ""))
        try:
            with path.open("rb") as lines:
                return sum(1 for line in lines if line.strip())
        except OSError:
            return 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "prefix": self.prefix,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "report": self.report,
        }


def record(state_dir: Path, prefix: str, report: LoadReport, started_at: datetime) -> PastLoad:
    """Write the report of one finished load; returns it as it will be listed."""
    finished = datetime.now(UTC)
    load_id = f"{finished.strftime('%Y%m%dT%H%M%S')}-{report.kind}-{secrets.token_hex(3)}"
    past = PastLoad(load_id, prefix, started_at.isoformat(), finished.isoformat(), report.to_dict())
    folder = reports_dir(state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f".{load_id}.json.tmp"
    temporary.write_bytes(orjson.dumps(past.to_dict(), option=orjson.OPT_INDENT_2))
    os.replace(temporary, folder / f"{load_id}.json")
    return past


def past_loads(state_dir: Path, prefix: str | None = None) -> list[PastLoad]:
    """Return recorded loads, newest first (of one index prefix where given); unreadable files are skipped."""
    loads = []
    for path in reports_dir(state_dir).glob("*.json"):
        try:
            data = orjson.loads(path.read_bytes())
            past = PastLoad(
                str(data["id"]), str(data["prefix"]), str(data["started_at"]), str(data["finished_at"]), data["report"]
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if prefix is None or past.prefix == prefix:
            loads.append(past)
    return sorted(loads, key=lambda past: past.finished_at, reverse=True)
