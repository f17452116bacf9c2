"""Questions over indexed documents (``supporting`` = file names, as ``hopsearch index docs`` loaded them):
the passages of each supporting document, so that evidence recall over the passages a strategy cited or
retrieved counts documents, as it counts paragraphs (by title) for the benchmark files.

A document counts as found when any one of its passages is among them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hopsearch.service.store import Store

#: Passages of one document read back at most (a document is cut into far fewer).
MAX_CHUNKS = 10_000


def _wildcard(name: str) -> str:
    return "".join(f"\\{c}" if c in "*?\\" else c for c in name)


async def file_passages(store: Store, index: str, names: Iterable[str]) -> dict[str, frozenset[str]]:
    """Return the passage ids of every document whose file is called ``name`` (in any folder), in ONE ``_msearch``."""
    wanted = list(dict.fromkeys(names))
    searches: list[tuple[str, dict[str, Any]]] = []
    for name in wanted:
        where = [{"term": {"source": "docs"}}, {"wildcard": {"path": {"value": f"*/{_wildcard(name)}"}}}]
        searches.append((index, {"size": MAX_CHUNKS, "_source": False, "query": {"bool": {"filter": where}}}))
    responses = await store.msearch(searches)
    return {
        name: frozenset(str(hit["_id"]) for hit in response["hits"]["hits"])
        for name, response in zip(wanted, responses, strict=True)
    }


def files_found(files: Sequence[frozenset[str]], ids: Iterable[str]) -> float | None:
    """Return the share of ``files`` (each its passage ids) with a passage among ``ids``; ``None`` without files."""
    if not files:
        return None
    seen = set(ids)
    return sum(1 for passages in files if passages & seen) / len(files)
