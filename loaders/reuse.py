"""Vectors of a batch without embedding what is known: the vector cache first, then — for passages the
source says are unchanged in the index (``SourceBatch.stored``: an ACL-only change, or a rebuild's copy of
the old version) — the vectors the index gives back (7.17 keeps them in ``_source``; 9.x leaves them out
and gives them back asked by name; 8.x from passages schema 3 keeps them out and gives them back as doc
values), and only then the embedder.

A re-sent passage is always a whole document (a partial ``_update`` would drop the token fields kept out of
``_source``, and vectors where they are excluded), so an unchanged passage needs its vector again: this
is where it comes from. A vector read back is used only where the index holds it from the same embedder
for the same title and text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hopsearch.loaders.model import SourceBatch
from hopsearch.loaders.vector_cache import VectorCache, content_hash, passage_text
from hopsearch.service.errors import ConfigError
from hopsearch.service.store import Store
from hopsearch.service.types import Embedder

#: What is read back of an unchanged passage.
STORED_FIELDS = ("embedding", "embedder", "title", "text")


@dataclass(slots=True)
class VectorCounts:
    """Where a load's vectors came from."""

    embedded: int = 0
    cached: int = 0
    stored: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"embedded": self.embedded, "from_cache": self.cached, "from_index": self.stored}


async def stored_vectors(
    store: Store, index: str, ids: Sequence[str], bodies: Sequence[dict[str, Any]], embedder_id: str | None
) -> dict[int, tuple[list[float] | None, str]]:
    """Vectors the index holds for these passages (by position in ``ids``), where the stored title and text
    are the passage's and (with ``embedder_id``) the vector is that model's; the vector is ``None`` where the
    index has one (``embedder`` is set) but does not give it back. One ``_mget`` (a load reads as the service:
    no caller's ACL applies; 9.x gives back the vectors it leaves out of ``_source`` where they are asked for
    by name, as here), on 8.x one search (:func:`vectors_of`)."""
    if not ids:
        return {}
    if store.info.major == 8:
        found = await vectors_of(store, index, ids)
    else:
        found = await store.get_sources(index, list(ids), STORED_FIELDS)
    out: dict[int, tuple[list[float] | None, str]] = {}
    for i, (doc_id, body) in enumerate(zip(ids, bodies, strict=True)):
        held = found.get(doc_id)
        if not held or not held.get("embedder"):
            continue
        if held.get("title") != body.get("title") or held.get("text") != body.get("text"):
            continue
        if embedder_id is not None and held["embedder"] != embedder_id:
            continue
        vector = held.get("embedding")
        out[i] = (list(vector) if vector else None, str(held["embedder"]))
    return out


async def vectors_of(store: Store, index: str, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """:data:`STORED_FIELDS` of the passages ``ids`` on 8.x, whose vectors a passages index of schema 3 keeps
    out of ``_source``: the float vectors come back as doc values (``docvalue_fields``; every
    ``index_options`` type keeps them, the quantized ones for rescoring). A search, so a passage written since
    the last refresh is not found (it is embedded again, or taken from the cache)."""
    body = {
        "size": len(ids),
        "query": {"ids": {"values": list(ids)}},
        "_source": [name for name in STORED_FIELDS if name != "embedding"],
        "docvalue_fields": ["embedding"],
    }
    out: dict[str, dict[str, Any]] = {}
    for hit in (await store.search(index, body))["hits"]["hits"]:
        source = dict(hit.get("_source") or {})
        values = (hit.get("fields") or {}).get("embedding")
        if values:
            source["embedding"] = values[0]
        out[str(hit["_id"])] = source
    return out


async def fill_vectors(
    store: Store,
    index: str,
    batch: SourceBatch,
    embedder: Embedder | None,
    cache: VectorCache | None,
    counts: VectorCounts,
) -> None:
    """Set ``embedding`` and ``embedder`` on the batch's bodies. Without an embedder (``--no-embed``) only
    unchanged passages get theirs back — from the index, else (vectors kept out of ``_source``) from the
    cache; one that has neither stops the load (a re-send must not drop a vector)."""
    bodies = batch.bodies
    if embedder is None:
        stored = [i for i in batch.stored if i < len(bodies)]
        ids = [batch.ids[i] for i in stored]
        held = await stored_vectors(store, index, ids, [bodies[i] for i in stored], None)
        for n, (vector, model) in held.items():
            if vector is not None:
                counts.stored += 1
            elif cache is not None:
                key = content_hash(passage_text(bodies[stored[n]]))
                vector = cache.get_many(model, [key]).get(key)
                counts.cached += vector is not None
            if vector is None:
                raise ConfigError(
                    f"[{index}] keeps the vectors of {model!r} out of _source and the vector cache lacks that of "
                    f"passage [{ids[n]}]: a load without an embedder cannot re-send it; set HOPSEARCH_EMBEDDER "
                    "to that model (it is embedded again)"
                )
            bodies[stored[n]] |= {"embedding": vector, "embedder": model}
        return
    model = embedder.model_id
    keys = [content_hash(passage_text(body)) for body in bodies]
    known = cache.get_many(model, keys) if cache is not None else {}
    missing = {i for i, key in enumerate(keys) if key not in known}
    counts.cached += len(bodies) - len(missing)
    reusable = [i for i in batch.stored if i in missing]
    new: dict[str, list[float]] = {}
    if reusable:
        held = await stored_vectors(
            store, index, [batch.ids[i] for i in reusable], [bodies[i] for i in reusable], model
        )
        for n, (vector, _) in held.items():
            if vector is not None:  # None: kept out of _source, embedded again below
                new[keys[reusable[n]]] = vector
                missing.discard(reusable[n])
                counts.stored += 1
    todo = sorted(missing)
    if todo:
        vectors = await embedder.embed([passage_text(bodies[i]) for i in todo])
        new.update((keys[i], list(vector)) for i, vector in zip(todo, vectors, strict=True))
        counts.embedded += len(todo)
    if cache is not None and new:
        cache.put_many(model, new.items())
    known.update(new)
    for body, key in zip(bodies, keys, strict=True):
        body["embedding"] = known[key]
        body["embedder"] = model
