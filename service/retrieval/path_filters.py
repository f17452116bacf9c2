"""A filter on ``path`` means the path a hit shows.

Documents indexed from a folder store the server's absolute ``path`` and the folder itself
(``metadata.root``); API hits show ``path`` relative to that folder (:mod:`~hopsearch.service.retrieval.hit_sources`).
So a ``path`` value that starts with ``/`` is the absolute path, matched as stored; any other value is
relative to the folder its document was indexed from: ``{"term": {"path": "guide/intro.md"}}`` matches
``<root>/guide/intro.md`` for each indexed root (with that root: folders may nest), and documents
without a folder (JSONL, DPR) whose stored ``path`` is that value. ``terms`` and ``range`` read the
same way (a range with relative bounds stays within each folder). The roots come from one terms
aggregation, made only for a search whose filters name a relative path.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from hopsearch.service.store import Store
from hopsearch.service.types import RetrievalQuery

#: Where a document's folder is kept (a dynamic string: its ``keyword`` sub-field is exact).
ROOT_FIELD = "metadata.root.keyword"
MAX_ROOTS = 1000
_BOOL_LISTS = ("filter", "should", "must", "must_not")


def _relative(value: Any) -> bool:
    return isinstance(value, str) and not value.startswith("/")


def _under(root: str, value: str) -> str:
    return f"{root.rstrip('/')}/{posixpath.normpath(value)}"


def names_relative_path(clauses: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a clause filters ``path`` by a relative value (then the roots are needed)."""
    for clause in clauses:
        for kind, body in clause.items():
            if kind == "bool" and isinstance(body, Mapping):
                if any(names_relative_path(body.get(key) or []) for key in _BOOL_LISTS):
                    return True
            elif kind in ("term", "terms", "range") and isinstance(body, Mapping) and "path" in body:
                value = body["path"]
                values = value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else [value]
                if any(_relative(v) for v in values):
                    return True
    return False


def relative_paths(clause: Mapping[str, Any], roots: Sequence[str]) -> dict[str, Any]:
    """``clause`` with each relative ``path`` value read under every root (see the module docstring)."""
    kind, body = next(iter(clause.items())) if len(clause) == 1 else ("", None)
    if kind == "bool" and isinstance(body, Mapping):
        inner = {
            key: [relative_paths(sub, roots) for sub in value] if key in _BOOL_LISTS else value
            for key, value in body.items()
        }
        return {"bool": inner}
    if kind not in ("term", "terms", "range") or not isinstance(body, Mapping) or set(body) != {"path"}:
        return dict(clause)
    value = body["path"]
    if kind == "term" and _relative(value):
        return _either([{"term": {"path": value}}], [{"term": {"path": _under(root, value)}} for root in roots], roots)
    if kind == "terms" and isinstance(value, list) and any(_relative(v) for v in value):
        absolute = [v for v in value if not _relative(v)]
        relative = [v for v in value if _relative(v)]
        plain: list[dict[str, Any]] = [{"terms": {"path": relative}}]
        if absolute:
            plain.append({"terms": {"path": absolute}})
        rooted: list[dict[str, Any]] = [{"terms": {"path": [_under(root, v) for v in relative]}} for root in roots]
        return _either(plain, rooted, roots)
    if kind == "range" and isinstance(value, Mapping) and value and all(_relative(v) for v in value.values()):
        # Documents with a folder store absolute paths, which every relative range would take in.
        unfolded = {"range": {"path": dict(value)}}
        alone = {"bool": {"filter": [unfolded], "must_not": [{"exists": {"field": "metadata.root"}}]}}
        bounded: list[dict[str, Any]] = [
            {"range": {"path": {b: _under(root, v) for b, v in value.items()}}} for root in roots
        ]
        return _either([alone], bounded, roots)
    return dict(clause)


def _either(plain: list[dict[str, Any]], rooted: list[dict[str, Any]], roots: Sequence[str]) -> dict[str, Any]:
    """One of ``plain`` (as stored) or, for some root, its document's root and ``rooted`` clause."""
    under = [
        {"bool": {"filter": [{"term": {ROOT_FIELD: root}}, clause]}} for root, clause in zip(roots, rooted, strict=True)
    ]
    return {"bool": {"should": [*plain, *under], "minimum_should_match": 1}}


async def folder_roots(store: Store, index: str, access: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """Return the folders the documents of ``index`` (those ``access`` lets the caller read) were indexed from."""
    body: dict[str, Any] = {"size": 0, "aggs": {"roots": {"terms": {"field": ROOT_FIELD, "size": MAX_ROOTS}}}}
    if access:
        body["query"] = {"bool": {"filter": [dict(clause) for clause in access]}}
    found = await store.search(index, body)
    return [str(bucket["key"]) for bucket in found.get("aggregations", {}).get("roots", {}).get("buckets", [])]


async def with_relative_paths(
    store: Store, index: str, queries: Sequence[RetrievalQuery], access: Sequence[Mapping[str, Any]] = ()
) -> Sequence[RetrievalQuery]:
    """Return ``queries`` with their relative ``path`` filters read under the folders of ``index`` (of the passages
    ``access`` lets the caller read); the same queries (no request made) where no filter names a relative
    path."""
    if not any(names_relative_path(query.filters) for query in queries):
        return queries
    roots = await folder_roots(store, index, access)
    return [replace(q, filters=tuple(relative_paths(f, roots) for f in q.filters)) for q in queries]
