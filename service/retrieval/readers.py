"""What a caller sees of the passages it may read: hits without ``acl`` and, where the settings say so,
ranks for scores (for non-admins); and passages looked up by id through the access filter.

Every search body already carries the scope's access filter (:func:`~.planner.scoped`); this module is
the other half of a non-admin's view, applied where results leave the executor, so that every front end
(``_retrieve``, ``_ask`` and its citations and trace, ``/retrieve``, MCP, the CLI, ``eval``) gets the same:

- ``acl`` is never returned to a non-admin (who may read a passage is not theirs to learn), nor ``names``
  (what the index made of a passage, read by the second hop);
- with ``api_non_admin_scores = ranks`` a non-admin's hit scores are ``1 / rank`` (1.0, 0.5, 0.333… in
  the order Elasticsearch, the fusion or the reranker gave): BM25 statistics (document frequencies, average
  lengths) count passages the caller cannot read, so a score can hint at restricted terms.

A lookup by id (the viewer's passage titles) is a search over the ids with the access filter, never an
``_mget``: a get cannot be filtered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from hopsearch.service.access import Scope
from hopsearch.service.errors import IndexMissing
from hopsearch.service.store import Store
from hopsearch.service.types import Hit, SearchResult

#: The field of a passage a non-admin never sees.
ACL_FIELD = "acl"
#: The names a passage holds (the second hop's, :mod:`.namelinks`): like ``path``, not a non-admin's to read.
NAMES_FIELD = "names"


def shown_hits(scope: Scope, hits: Sequence[Hit]) -> list[Hit]:
    """``hits`` as ``scope``'s caller sees them (unchanged for an admin)."""
    if scope.caller.admin:
        return list(hits)
    ranks = scope.scores == "ranks"
    acl_field = scope.acl.field or ACL_FIELD  # an attached index's own ACL field
    out: list[Hit] = []
    private = (acl_field, ACL_FIELD, NAMES_FIELD)
    for rank, hit in enumerate(hits, start=1):
        if any(name in hit.source for name in private):
            source = {k: v for k, v in hit.source.items() if k not in private}
            hit = Hit(id=hit.id, score=hit.score, title=hit.title, text=hit.text, source=source)
        out.append(replace(hit, score=1.0 / rank) if ranks else hit)
    return out


def shown(scope: Scope, result: SearchResult) -> SearchResult:
    """Return a result (its hits and fusion legs) as ``scope``'s caller sees it."""
    if scope.caller.admin:
        return result
    legs = {name: tuple(shown_hits(scope, hits)) for name, hits in result.legs.items()}
    return replace(result, hits=tuple(shown_hits(scope, result.hits)), legs=legs)


def by_id_body(ids: Sequence[str], scope: Scope, fields: Sequence[str]) -> dict[str, Any]:
    """Return the search that reads passages ``ids`` that ``scope``'s caller may read."""
    return {
        "size": len(ids),
        "track_total_hits": False,
        "query": {"bool": {"filter": [{"ids": {"values": list(ids)}}, *[dict(c) for c in scope.access()]]}},
        "_source": [f for f in fields if f not in (ACL_FIELD, NAMES_FIELD, scope.acl.field) or scope.caller.admin],
    }


async def passages_by_id(
    store: Store, scope: Scope, ids: Sequence[str], fields: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """``fields`` of the passages ``ids`` of ``scope.index`` that exist and the caller may read, by id
    (one search; at most 10,000 ids, Elasticsearch's default result window)."""
    wanted = list(dict.fromkeys(ids))[:10_000]
    if not wanted:
        return {}
    scope = await store.bound(scope)  # an attached index's readers
    try:
        found = await store.search(scope.index, by_id_body(wanted, scope, fields))
    except IndexMissing:
        return {}
    return {hit["_id"]: hit.get("_source") or {} for hit in found.get("hits", {}).get("hits", [])}
