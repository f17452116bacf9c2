"""``hopsearch indices upgrade``: move a passages index made under an older schema to the current one,
keeping everything, and optionally give its passages without ``acl`` an ACL.

The move itself is in place (:meth:`~hopsearch.service.store.indices.IndexLifecycle.upgrade_in_place`):
schema 2 only adds fields, so no passage is copied and nothing (vectors, token fields) can be lost.

``--acl P …`` then re-sends every passage that has no ``acl`` with those principals: whole documents (a
partial ``_update`` would drop the token fields kept out of ``_source``, and vectors where they are
excluded), their ``_source`` as stored, their Japanese token fields made again, their vectors as stored —
or, where the index keeps vectors out of ``_source``, from the vector cache or the configured embedder
(it must be the index's). The passages to do are found again after each batch (they leave the query as
they get their ``acl``), so an interrupted run is simply run again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from hopsearch.loaders.bulk import send_batch
from hopsearch.loaders.config import LoadConfig
from hopsearch.loaders.model import LoadOptions, SourceBatch
from hopsearch.loaders.reuse import VectorCounts, fill_vectors
from hopsearch.loaders.vector_cache import VectorCache
from hopsearch.service.access import document_acl
from hopsearch.service.errors import ConfigError, StoreError
from hopsearch.service.store import Store
from hopsearch.service.store.indices import IN_PLACE_VERSION
from hopsearch.service.text.japanese import annotate, ja_tokens_of
from hopsearch.service.types import Embedder

log = logging.getLogger(__name__)

WITHOUT_ACL = {"bool": {"must_not": [{"exists": {"field": "acl"}}]}}


async def upgrade_index(
    store: Store,
    name: str,
    *,
    acl: Sequence[str] | None = None,
    embedder: Embedder | None = None,
    batch_size: int = 500,
    config: LoadConfig | None = None,
) -> dict[str, Any]:
    """Upgrade ``name`` (an index, or the indices behind an alias) in place; with ``acl``, give the passages
    without one these principals. Returns what was done, per index."""
    principals = document_acl(acl) if acl else None
    if await store.attachment(name) is not None:
        raise ConfigError(
            f"[{name}] is an attached index: hopsearch reads it and never writes to it", details={"index": name}
        )
    done = await store.upgrade_in_place(name)
    rows: list[dict[str, Any]] = []
    for index, before in done:
        row: dict[str, Any] = {"index": index, "from": before, "to": max(before, IN_PLACE_VERSION)}
        if principals is not None:
            row["acl_given"], row["vectors"] = await _give_acl(
                store, index, principals, embedder, batch_size, config or LoadConfig()
            )
        rows.append(row)
    return {"indices": rows}


async def _give_acl(
    store: Store, index: str, acl: list[str], embedder: Embedder | None, batch_size: int, config: LoadConfig
) -> tuple[int, dict[str, int]]:
    meta = await store.index_meta(index)
    ja_analysis = meta.get("ja_analysis")
    counts = VectorCounts()
    cache = VectorCache.for_settings(config) if meta.get("embedder") else None
    given = 0
    seen: set[str] = set()
    try:
        while True:
            await store.refresh(index)
            body = {"size": batch_size, "query": WITHOUT_ACL, "sort": ["_doc"]}
            hits = (await store.search(index, body))["hits"]["hits"]
            if not hits:
                return given, counts.to_dict()
            again = [hit["_id"] for hit in hits if hit["_id"] in seen]
            if again:  # sent, yet still without acl: never loop on it
                raise StoreError(f"passage [{again[0]}] of [{index}] did not take its acl; nothing else changed")
            batch = SourceBatch(after=0)
            for hit in hits:
                passage = dict(hit.get("_source") or {}) | {"acl": acl}
                annotate(passage, ja_analysis, ja_tokens_of(meta))  # token fields are never in _source: made again
                batch.add(0, str(hit["_id"]), passage, {"_id": hit["_id"]})
            await _vectors(store, index, batch, meta, embedder, cache, counts)
            seen.update(batch.ids)
            _, failures = await send_batch(store, index, batch, LoadOptions())
            if failures:
                _, item = next(iter(failures[0].items()))
                raise StoreError(f"{len(failures)} passages of [{index}] could not be re-sent: {item.get('error')}")
            given += len(hits)
            log.info("%s: %d passages given acl %s", index, given, acl)
    finally:
        if cache is not None:
            cache.close()


async def _vectors(
    store: Store,
    index: str,
    batch: SourceBatch,
    meta: dict[str, Any],
    embedder: Embedder | None,
    cache: VectorCache | None,
    counts: VectorCounts,
) -> None:
    """Vectors for the passages whose ``_source`` holds none, where the index has vectors (kept out of
    ``_source``): the cache, the index where it gives them back (9.x), else the configured embedder, which
    must be the index's (without one, a passage none of those has stops the run: no vector is dropped)."""
    model = meta.get("embedder")
    lacking = [i for i, body in enumerate(batch.bodies) if model and "embedding" not in body]
    if not lacking:
        return
    if embedder is not None and embedder.model_id != model:
        raise ConfigError(
            f"[{index}] keeps vectors of {model!r} out of _source: set HOPSEARCH_EMBEDDER to it ({embedder.model_id})"
        )
    part = SourceBatch(after=0)
    for i in lacking:
        part.add(0, batch.ids[i], batch.bodies[i], {})
    part.stored = list(range(len(lacking)))  # unchanged: the index may give its vectors back
    await fill_vectors(store, index, part, embedder, cache, counts)
