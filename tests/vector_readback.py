"""The vectors a passages index holds, read back as each version gives them: ``_source`` on 7.17, ``_source``
asked by name on 9.x (which leaves vectors out of it by default), doc values on 8.x (whose passages indices
keep vectors out of ``_source`` from schema 3). Not inferred from a marker field."""

from __future__ import annotations

from typing import Any

from hopsearch.service.store import Store


async def held_vectors(store: Store, index: str | None = None) -> dict[str, tuple[Any, list[float] | None]]:
    """``{id: (embedder, vector or None)}`` of every passage (at most 1000) of ``index`` (default: the alias)."""
    name = index or store.settings.passages_alias
    body: dict[str, Any] = {"size": 1000, "query": {"match_all": {}}, "_source": ["embedding", "embedder"]}
    if store.info.major == 8:
        body |= {"_source": ["embedder"], "docvalue_fields": ["embedding"]}
    out: dict[str, tuple[Any, list[float] | None]] = {}
    for hit in (await store.search(name, body))["hits"]["hits"]:
        source = hit.get("_source") or {}
        vector = source.get("embedding") or ((hit.get("fields") or {}).get("embedding") or [None])[0]
        out[str(hit["_id"])] = (source.get("embedder"), vector)
    return out
