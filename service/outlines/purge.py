"""Erasing what was derived from a document, wherever it was copied (APPI): the outline facts and aliases
whose lineage holds it, and the traces that quote it.

:func:`purge_outlines` runs where passages go away (``hopsearch indices delete``, a load that removes a
document): every fact and alias derived from them is removed (read-merge-write, conditional on the
version read, as saves are). Until then, and where a purge could not run, the at-use check makes them
unusable anyway (:mod:`hopsearch.service.outlines.lineage`: a missing passage reads as nobody's).
:func:`purge_traces` is the admin's ``hopsearch traces purge --doc ID``: traces whose steps or
citations name the document are deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any

from hopsearch.service.errors import HopsearchError, IndexMissing, StoreError
from hopsearch.service.outlines.lineage import source, split_source
from hopsearch.service.outlines.model import EntityOutline
from hopsearch.service.outlines.store import OUTLINES_SCHEMA, EsOutlineStore
from hopsearch.service.store import Store, load_template

log = logging.getLogger(__name__)

PAGE = 500
ATTEMPTS = 8


async def index_names(store: Store, name: str) -> set[str]:
    """``name``, the indices an alias ``name`` points at and the aliases of each (lineage names the index
    a question read: mostly the passages alias)."""
    names = {name}
    try:
        response = await store.get_aliases(name)
    except IndexMissing:
        return names
    for concrete, body in response.items():
        names.add(concrete)
        names |= set((body or {}).get("aliases") or {})
    return names


def _literal(text: str) -> str:
    """``text`` matched literally by a ``wildcard`` query."""
    return "".join(f"\\{c}" if c in "\\*?" else c for c in text)


def _query(entries: Collection[str], indices: Collection[str], doc_ids: Collection[str]) -> dict[str, Any]:
    should: list[dict[str, Any]] = []
    for path in ("facts", "alias_lineage"):
        field = f"{path}.lineage"
        inner: list[dict[str, Any]] = []
        if entries:
            inner.append({"terms": {field: sorted(entries)}})
        inner += [{"prefix": {field: f"{index}/"}} for index in sorted(indices)]
        inner += [{"wildcard": {field: f"*/{_literal(doc_id)}"}} for doc_id in sorted(doc_ids)]
        should.append({"nested": {"path": path, "query": {"bool": {"should": inner, "minimum_should_match": 1}}}})
    return {"bool": {"should": should, "minimum_should_match": 1}}


async def purge_outlines(
    store: Store,
    *,
    entries: Collection[str] = (),
    indices: Collection[str] = (),
    doc_ids: Collection[str] = (),
) -> int:
    """Remove every fact and alias whose lineage holds one of ``entries`` (``<index>/<id>``), a passage of
    one of ``indices``, or a document of one of ``doc_ids`` in any index. Returns the facts removed."""
    if not (entries or indices or doc_ids):
        return 0
    outlines = EsOutlineStore(store)
    schema = await outlines.schema()
    if schema == 0:
        return 0

    def gone(entry: str) -> bool:
        index, doc_id = split_source(entry)
        return entry in entries or index in indices or doc_id in doc_ids

    query = _query(entries, indices, doc_ids) if schema >= OUTLINES_SCHEMA else {"match_all": {}}
    removed = 0
    after: list[Any] | None = None
    while True:
        sort = [{"namespace": "asc"}, {"entity_key": "asc"}]
        body: dict[str, Any] = {"size": PAGE, "_source": False, "query": query, "sort": sort}
        if after is not None:
            body["search_after"] = after
        hits = (await store.search(outlines.index, body))["hits"]["hits"]
        for hit in hits:
            removed += await _purge_one(outlines, str(hit["_id"]), gone)
        if len(hits) < PAGE:
            return removed
        after = hits[-1]["sort"]


async def _purge_one(outlines: EsOutlineStore, doc_id: str, gone: Callable[[str], bool]) -> int:
    for _ in range(ATTEMPTS):
        stored = await outlines.store.get_versioned(outlines.index, doc_id)
        if stored is None:
            return 0
        outline = EntityOutline.from_document(stored[0])
        kept = outline.without(gone)
        removed = len(outline.facts) - len(kept.facts)
        if removed == 0 and len(kept.alias_lineage) == len(outline.alias_lineage):
            return 0
        if await outlines.write(doc_id, kept, stored[1:]):
            return removed
    log.warning("outline %s kept changing: its purge is left to the at-use check", doc_id)
    return 0


async def purge_derived(store: Store, index: str, ids: Sequence[str]) -> None:
    """Erase the outline facts derived from the deleted passages ``ids`` of ``index`` (the cascade of
    :meth:`~hopsearch.service.store.Store.delete_passages`); a failed purge leaves them to the at-use check,
    which reads a missing passage as nobody's, so the caller goes on."""
    try:
        names = await index_names(store, index)
        removed = await purge_outlines(store, entries={source(name, i) for name in names for i in ids})
    except HopsearchError as exc:
        log.warning("outline facts derived from %d deleted chunks not purged: %s", len(ids), exc)
        return
    if removed:
        log.info("purged %d outline facts derived from %d deleted chunks", removed, len(ids))


async def purge_traces(store: Store, doc_ids: Collection[str]) -> list[str]:
    """Delete the traces whose steps or citations name one of ``doc_ids``; returns their ids."""
    index = store.names.traces
    if not doc_ids or not await store.exists(index):
        return []
    ids = sorted(doc_ids)
    query = {
        "bool": {
            "should": [{"terms": {"steps.hit_ids": ids}}, {"terms": {"citations.id": ids}}],
            "minimum_should_match": 1,
        }
    }
    found: list[str] = []
    while True:
        hits = (await store.search(index, {"size": PAGE, "_source": False, "query": query}))["hits"]["hits"]
        if not hits:
            return found
        batch = [str(hit["_id"]) for hit in hits]
        if set(batch) & set(found):  # a delete that did not happen: never loop on it
            raise StoreError(f"could not delete traces {sorted(set(batch) & set(found))[:5]}")
        await store.bulk({"_op_type": "delete", "_index": index, "_id": i} for i in batch)
        await store.refresh(index)
        found += batch


async def _all_outlines(store: Store, index: str) -> list[tuple[str, dict[str, Any]]]:
    docs: list[tuple[str, dict[str, Any]]] = []
    after: list[Any] | None = None
    while True:
        body: dict[str, Any] = {"size": PAGE, "sort": [{"namespace": "asc"}, {"entity_key": "asc"}]}
        if after is not None:
            body["search_after"] = after
        hits = (await store.search(index, body))["hits"]["hits"]
        docs += [(str(h["_id"]), dict(h["_source"])) for h in hits]
        if len(hits) < PAGE:
            return docs
        after = hits[-1]["sort"]


async def _fill(store: Store, index: str, docs: list[tuple[str, dict[str, Any]]]) -> None:
    await store.create_index(index, load_template("outlines"))
    _, errors = await store.bulk({"_index": index, "_id": i, "_source": doc} for i, doc in docs)
    if errors:
        raise StoreError(f"rebuilding {index}: {len(errors)} outline(s) not written", details={"errors": errors[:3]})
    await store.refresh(index)


async def rebuild_outlines(store: Store) -> tuple[int, int]:
    """Move the outlines index to the current schema keeping every outline (facts without lineage stay,
    admins' only): copied into ``<index>-rebuild``, the index recreated and filled, the copy deleted.
    Returns (the schema before, the outlines moved)."""
    outlines = EsOutlineStore(store)
    before = await outlines.schema()
    if before == 0 or before >= OUTLINES_SCHEMA:
        return before, 0
    docs = await _all_outlines(store, outlines.index)
    spare = f"{outlines.index}-rebuild"
    if await store.exists(spare):
        raise StoreError(
            f"[{spare}] exists (an earlier rebuild stopped): its outlines are the copy; restore or delete it"
        )
    await _fill(store, spare, docs)
    await store.delete_indices([outlines.index])
    await _fill(store, outlines.index, docs)
    await store.delete_indices([spare])
    return before, len(docs)
