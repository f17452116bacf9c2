"""Passages by file: what a passages index holds of each loaded file (:class:`FileState`, one composite
aggregation, paged), and deleting passages with what was derived from them (ids paged by ``search_after``,
then bulk deletes; ``_delete_by_query`` lives in the reindex module, which the 7.17 test distribution lacks)."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hopsearch.service.store.documents import Documents
from hopsearch.service.store.indices import IndexLifecycle
from hopsearch.service.store.searches import Searches

log = logging.getLogger(__name__)

#: What runs after passages are deleted, with their index and ids: erasing what was derived from them
#: (:func:`hopsearch.service.outlines.purge.purge_derived`, which the store cannot import).
Cascade = Callable[[str, Sequence[str]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class FileState:
    """What a passages index holds of one version of a loaded file."""

    content_sha: str
    #: chunks present
    present: int
    #: chunks expected (``metadata.chunks``; None where no chunk says)
    expected: int | None
    #: chunks with a vector of the embedder asked about
    vectors: int
    #: the principals every chunk has (None: they differ, a re-send cut short)
    acl: tuple[str, ...] | None
    #: the extractor version the chunks were made with
    extractor: int
    #: the version of the names every chunk carries (``metadata.names``; 0: a chunk without them)
    names: int = 0


class Passages(IndexLifecycle, Documents, Searches):
    """Passages read and deleted by the file they came from."""

    async def file_states(
        self, name: str, root: str, embedder_id: str | None = None, only: str | None = None
    ) -> dict[str, list[FileState]]:
        """Map each loaded file under ``root`` (``only``: that file alone) to what ``name`` holds of it (one
        entry per content hash); the vector count is of chunks with a vector of ``embedder_id``."""
        if not await self.exists(name):
            return {}
        await self.refresh(name)  # a load stopped by a block never refreshed: its chunks count as held too
        where = {"term": {"path": only}} if only is not None else {"prefix": {"path": f"{root}{os.sep}"}}
        query = {"bool": {"filter": [{"term": {"source": "docs"}}, where]}}
        sources = [{"path": {"terms": {"field": "path"}}}, {"sha": {"terms": {"field": "content_sha"}}}]
        state: dict[str, list[FileState]] = {}
        after: dict[str, Any] | None = None
        while True:
            composite: dict[str, Any] = {"size": 1000, "sources": sources}
            if after:
                composite["after"] = after
            per_file = {
                "expected": {"max": {"field": "metadata.chunks"}},
                "vectors": {"filter": {"term": {"embedder": embedder_id or ""}}},
                "acl": {"terms": {"field": "acl", "size": 1000}},
                "extractor": {"min": {"field": "metadata.extractor"}},
                "names": {"min": {"field": "metadata.names"}},
            }
            aggs = {"files": {"composite": composite, "aggs": per_file}}
            response = await self.search(name, {"size": 0, "query": query, "aggs": aggs})
            files = response["aggregations"]["files"]
            for bucket in files["buckets"]:
                state.setdefault(bucket["key"]["path"], []).append(_file_state(bucket))
            after = files.get("after_key")
            if not after or not files["buckets"]:
                return state

    async def held_doc_ids(self, name: str, root: str, only: str | None = None) -> dict[str, set[str]]:
        """Map each loaded file under ``root`` (``only``: that file alone) to the document ids ``name`` holds it
        under (one composite aggregation, paged): a file held under another id than its own is re-keyed."""
        if not await self.exists(name):
            return {}
        where = {"term": {"path": only}} if only is not None else {"prefix": {"path": f"{root}{os.sep}"}}
        query = {"bool": {"filter": [{"term": {"source": "docs"}}, where]}}
        sources = [{"path": {"terms": {"field": "path"}}}, {"doc_id": {"terms": {"field": "doc_id"}}}]
        held: dict[str, set[str]] = {}
        after: dict[str, Any] | None = None
        while True:
            composite: dict[str, Any] = {"size": 1000, "sources": sources} | ({"after": after} if after else {})
            response = await self.search(name, {"size": 0, "query": query, "aggs": {"ids": {"composite": composite}}})
            found = response["aggregations"]["ids"]
            for bucket in found["buckets"]:
                held.setdefault(bucket["key"]["path"], set()).add(bucket["key"]["doc_id"])
            after = found.get("after_key")
            if not after or not found["buckets"]:
                return held

    async def delete_passages(
        self,
        index: str,
        paths: Sequence[str] = (),
        chunks_from: Sequence[tuple[str, int]] = (),
        other_ids: Sequence[tuple[str, str]] = (),
        *,
        cascade: Cascade,
    ) -> int:
        """Delete the chunks of ``paths``, those of each ``(path, n)`` of ``chunks_from`` from chunk ``n`` on and
        those of each ``(path, doc_id)`` of ``other_ids`` under another document id (a re-keyed file), then run
        ``cascade`` over their ids (what was derived from them); returns the chunks deleted."""
        clauses: list[dict[str, Any]] = [
            {"bool": {"filter": [{"term": {"path": path}}, {"range": {"chunk": {"gte": n}}}]}}
            for path, n in chunks_from
        ]
        clauses += [{"term": {"path": path}} for path in paths]
        clauses += [
            {"bool": {"filter": [{"term": {"path": path}}], "must_not": [{"term": {"doc_id": doc_id}}]}}
            for path, doc_id in other_ids
        ]
        ids = await self._matching_ids(index, clauses)
        if not ids:
            return 0
        ok, errors = await self.bulk({"_op_type": "delete", "_index": index, "_id": i} for i in ids)
        if errors:
            log.warning("%d stale chunks could not be deleted: %s", len(errors), errors[0])
        await self.refresh(index)
        await cascade(index, ids)
        return ok

    async def _matching_ids(self, index: str, clauses: Sequence[dict[str, Any]]) -> list[str]:
        """Collect the ids of the chunks matching any of ``clauses`` (200 a query, paged by ``search_after``)."""
        ids: list[str] = []
        for start in range(0, len(clauses), 200):
            query = {"bool": {"should": list(clauses[start : start + 200]), "minimum_should_match": 1}}
            after: list[Any] | None = None
            while True:
                body: dict[str, Any] = {
                    "size": 1000,
                    "_source": False,
                    "query": query,
                    "sort": [{"path": "asc"}, {"chunk": "asc"}],
                }
                if after is not None:
                    body["search_after"] = after
                hits = (await self.search(index, body))["hits"]["hits"]
                ids += [hit["_id"] for hit in hits]
                if len(hits) < 1000:
                    break
                after = hits[-1]["sort"]
        return ids


def _file_state(bucket: dict[str, Any]) -> FileState:
    value = bucket["expected"].get("value")
    count = int(bucket["doc_count"])
    return FileState(
        content_sha=bucket["key"]["sha"],
        present=count,
        expected=int(value) if value is not None else None,
        vectors=int(bucket["vectors"]["doc_count"]),
        acl=_acl_of(bucket, count),
        extractor=int(bucket["extractor"].get("value") or 1),
        names=int(bucket.get("names", {}).get("value") or 0),
    )


def _acl_of(bucket: dict[str, Any], count: int) -> tuple[str, ...] | None:
    """Return the principals every one of a file's ``count`` chunks has (its terms aggregation on ``acl``), or None
    where they differ (a re-send cut short): such a file is sent again."""
    terms = bucket.get("acl", {}).get("buckets", [])
    if any(int(term["doc_count"]) != count for term in terms):
        return None
    return tuple(sorted(str(term["key"]) for term in terms))
