"""A small company corpus with restricted documents, each carrying a marker string, the callers that read
it, and the check an attacker would make: search a whole response (serialised) for every marker.

Every marked record shares the query words (``salary handbook minutes``), so every search finds all the
marked records a caller may read; the fillers share none of them. Loaded through the real JSONL loader
(its ``acl`` field), with vectors where an embedder is given.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hopsearch.loaders.api import load_jsonl
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.access import ADMIN, Caller
from hopsearch.service.store import Store

#: record id → (marker, acl field or None)
MARKED: dict[str, tuple[str, Any]] = {
    "hr-salary": ("SALARY-MARKER-9", ["group:hr"]),
    "board-minutes": ("BOARD-MARKER-7", "group:board"),
    "handbook": ("PUBLIC-MARKER-1", "public"),
    "no-acl": ("NOACL-MARKER-3", None),
    "private-note": ("PRIVATE-MARKER-5", "private"),
}
MARKERS = {marker for marker, _ in MARKED.values()}
QUERY = "salary handbook minutes"
QUESTION = "What do the company records say about the salary handbook minutes?"
CALLERS: dict[str, Caller] = {
    "admin": ADMIN,
    "hr": Caller.of(["group:hr", "public"], subject="alice", key="backend", owner="key:backend/sub:alice"),
    "public": Caller.of(["public"], subject="bob", key="backend", owner="key:backend/sub:bob"),
}


def records() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for doc_id, (marker, acl) in MARKED.items():
        record: dict[str, Any] = {
            "_id": doc_id,
            "title": f"Company record {doc_id}",
            "text": f"The salary handbook minutes say: {marker}. This record is {doc_id.replace('-', ' ')}.",
        }
        if acl is not None:
            record["acl"] = acl
        out.append(record)
    fillers = ["Rivers flow into the sea.", "Mountains are tall.", "The moon orbits the earth."]
    out += [{"_id": f"filler-{n}", "title": "Nature", "text": text, "acl": "public"} for n, text in enumerate(fillers)]
    return out


def readable(caller: str, acl_default: str) -> set[str]:
    """The markers ``caller`` may read."""
    if caller == "admin":
        return set(MARKERS)
    seen = {"PUBLIC-MARKER-1"}
    if caller == "hr":
        seen.add("SALARY-MARKER-9")
    if acl_default == "public":
        seen.add("NOACL-MARKER-3")
    return seen


def found_markers(value: Any) -> set[str]:
    """The markers anywhere in ``value`` (dataclasses, mappings, lists, text), serialised whole."""
    text = json.dumps(_plain(value), ensure_ascii=False, default=str)
    return {marker for marker in MARKERS if marker in text}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return value


def leaks(value: Any, caller: str, acl_default: str) -> set[str]:
    """Markers in ``value`` that ``caller`` may not read."""
    return found_markers(value) - readable(caller, acl_default)


def has_acl_key(value: Any) -> bool:
    """Whether an ``acl`` field appears anywhere in ``value`` but a result's ``query`` (its filters hold the
    caller's own principals: the access filter, no passage's data)."""
    plain = _plain(value)

    def walk(node: Any) -> bool:
        if isinstance(node, dict):
            return "acl" in node or any(walk(v) for k, v in node.items() if k != "query")
        if isinstance(node, list):
            return any(walk(v) for v in node)
        return False

    return walk(plain)


def write_corpus(folder: Path, rows: Iterable[dict[str, Any]] | None = None) -> Path:
    path = folder / "company.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (rows if rows is not None else records())))
    return path


async def load_corpus(store: Store, folder: Path, embedder: Any = None) -> None:
    report = await load_jsonl(store, write_corpus(folder), LoadOptions(batch_size=50), embedder=embedder)
    assert report.reconciled and report.rejected == 0, report


def squash(text: str) -> str:
    """A prompt as one whitespace token (no stop string, no max_tokens cut can shorten it)."""
    return "·".join(text.split())


def restated_knowledge(prompt: str) -> str:
    """What a summarizer that restates everything it was given as knowledge writes: the prompt's outline
    and passages, squashed — not its instructions nor its question (a summary holding those is an echo
    of the prompt, dropped: :func:`hopsearch.service.strategies.dualrag_prompts.is_echo`)."""
    outline = prompt.split("Knowledge outline:\n", 1)[-1].split("\n\nReasoning so far:", 1)[0]
    passages = prompt.split("Passages about ", 1)[-1].split(":\n", 1)[-1].split("\n\nIn one to three", 1)[0]
    outline = "" if outline.strip() == "(nothing known yet)" else outline.replace("## ", "")
    return squash(f"{outline}\n{passages}")
