"""From ``_msearch`` answers to :class:`~hopsearch.service.types.SearchResult` s: pure functions over the
responses of a :class:`~hopsearch.service.retrieval.planner.Plan` (hits built, vectors stripped, client-side
fusion and cosine where the plan says so)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any, TypeGuard

from hopsearch.service.attached.fieldmap import HOPSEARCH_FIELDS, FieldMap, field_text
from hopsearch.service.errors import StoreError
from hopsearch.service.retrieval.bodies import EXCERPT_CHARS, EXCERPT_FRAGMENTS
from hopsearch.service.retrieval.fusion import refused, rrf, with_score
from hopsearch.service.retrieval.planner import QueryPlan
from hopsearch.service.store.esclient import failed
from hopsearch.service.types import DenseMethod, Hit, SearchResult, make_hit

RAW_ID: Callable[[Mapping[str, Any]], str] = itemgetter("_id")


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


#: The most characters of an attached document's text a hit carries (its excerpts, else its opening).
EXCERPT_LIMIT = EXCERPT_FRAGMENTS * (EXCERPT_CHARS + 100)


def _mapped_hits(found: Mapping[str, Any], fields: FieldMap) -> list[Hit]:
    """Return the hits of an attached index: the title from its mapped field, the text its excerpts (the best
    passages by the query, :func:`~.bodies.excerpt_of`) or else the mapped field's opening, the vector left
    out of the source (which keeps the whole document)."""
    out: list[Hit] = []
    for raw in found["hits"]:
        source = raw.get("_source") or {}
        if fields.vector and fields.vector in source:
            source = {key: value for key, value in source.items() if key != fields.vector}
        title = field_text(source.get(fields.title))
        excerpts = (raw.get("highlight") or {}).get(fields.text)
        text = " … ".join(excerpts) if excerpts else field_text(source.get(fields.text))
        if len(text) > EXCERPT_LIMIT:  # a whole document found by its vector: its opening
            text = text[:EXCERPT_LIMIT].rsplit(" ", 1)[0] + " …"
        out.append(make_hit(raw["_id"], raw.get("_score") or 0.0, title, text, source))
    return out


def hits_of(response: Mapping[str, Any], fields: FieldMap = HOPSEARCH_FIELDS) -> list[Hit]:
    """Return the hits of a search response (ids are strings and scores numbers in Elasticsearch's JSON), read
    through ``fields`` (an attached index's field map; the vector is then left out here)."""
    found = response.get("hits")
    if not found:
        return []
    if fields is not HOPSEARCH_FIELDS:
        return _mapped_hits(found, fields)
    out: list[Hit] = []
    append = out.append
    for raw in found["hits"]:
        source = raw.get("_source") or {}
        append(make_hit(raw["_id"], raw.get("_score") or 0.0, source.get("title", ""), source.get("text", ""), source))
    return out


def raw_hits(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = response.get("hits")
    return found["hits"] if found else []


def hit_of(raw: Mapping[str, Any], score: float, fields: FieldMap = HOPSEARCH_FIELDS) -> Hit:
    """Return a raw hit as :func:`hits_of` builds it (vector stripped), with ``score``."""
    if fields is not HOPSEARCH_FIELDS:
        return with_score(_mapped_hits({"hits": [raw]}, fields)[0], score)
    source = raw.get("_source") or {}
    hit = make_hit(raw["_id"], score, source.get("title", ""), source.get("text", ""), source)
    return strip_vector(hit) if "embedding" in source else hit


def item_reason(item: Mapping[str, Any]) -> str:
    err = item.get("error")
    if isinstance(err, dict):
        return f"{err.get('type')}: {err.get('reason')}"
    return str(err)


def total_of(response: Mapping[str, Any]) -> int:
    total = response.get("hits", {}).get("total", 0)
    return int(total.get("value", 0) if isinstance(total, dict) else total)


def without_vectors_note(count: int) -> str:
    """Return what a dense or hybrid result says when part of the index has no vector."""
    return (
        f"{count:,} documents of the index have no vector (loaded with --no-embed?): the dense side cannot "
        "find them; load them again with the embedder"
    )


def result_of(
    plan: QueryPlan,
    responses: Sequence[Mapping[str, Any]],
    vector: Sequence[float] | None,
    method: DenseMethod,
    unembedded: int = 0,
    fields: FieldMap = HOPSEARCH_FIELDS,
    vector_index: str = "",
    *,
    index: str = "",
) -> SearchResult | None:
    """Return the result of one query of a plan; ``None`` where the server refused its rrf retriever (the caller
    plans it again with client-side RRF). Any other failed search raises with its reason. Hits are read
    through ``fields`` (an attached index's field map); ``index`` names what was searched in an error."""
    query = plan.query
    for slot, position in plan.slots.items():
        if "error" in responses[position]:
            if slot == "fused" and refused(responses[position]["error"]):
                return None
            what = f"searching [{index}]" if index else "searching"
            status = responses[position].get("status")
            raise StoreError(failed(what, item_reason(responses[position])), details={"status": status})
    took = float(sum(responses[s].get("took", 0) for s in plan.slots.values()))
    raw_bm25 = responses[plan.slots["bm25"]] if "bm25" in plan.slots else {}
    if method == "rerank" and fields is not HOPSEARCH_FIELDS and fields.vector:  # the vector read, then left out
        vectors = [(raw.get("_source") or {}).get(fields.vector) for raw in raw_hits(raw_bm25)]
    else:
        vectors = []
    bm25 = hits_of(raw_bm25, fields)
    legs: dict[str, tuple[Hit, ...]] = {}
    if query.mode == "bm25":
        hits = bm25[: plan.size]
    else:
        if method == "rerank":
            assert vector is not None
            if vectors:  # an attached index's candidates, their vectors read from their raw hits
                scored = (with_score(h, cosine(vector, v)) for h, v in zip(bm25, vectors, strict=True) if _usable(v))
            else:  # a candidate without a vector (--no-embed) has no dense score
                scored = (with_score(h, cosine(vector, h.source["embedding"])) for h in bm25 if _vector(h))
            dense = sorted(scored, key=lambda h: -h.score)
            bm25 = bm25[: plan.size]
        else:
            dense = hits_of(responses[plan.slots["dense"]], fields) if "dense" in plan.slots else []
        if query.mode == "dense":
            hits = dense[: plan.size]
        elif "fused" in plan.slots:
            hits = hits_of(responses[plan.slots["fused"]], fields)[: plan.size]
        else:
            hits = rrf([bm25, dense], size=plan.size, weights=query.weights)
        if query.legs and query.mode == "hybrid":
            legs = {"bm25": stripped(bm25[: plan.size]), "dense": stripped(dense[: plan.size])}
    return SearchResult(
        query=query,
        hits=stripped(hits),
        mode=query.mode,
        dense_method=method if vector is not None else "none",
        took_ms=took,
        fusion=plan.fusion,
        fusion_note=plan.note,
        legs=legs,
        without_vectors=unembedded if vector is not None else 0,
        vector_index=vector_index if vector is not None else "",
    )


def stripped(hits: Sequence[Hit]) -> tuple[Hit, ...]:
    return tuple(strip_vector(h) if "embedding" in h.source else h for h in hits)


def _vector(hit: Hit) -> bool:
    return bool(hit.source.get("embedding"))


def _usable(vector: Any) -> TypeGuard[list[float]]:
    return isinstance(vector, list) and bool(vector)


def strip_vector(hit: Hit) -> Hit:
    if "embedding" not in hit.source:
        return hit
    source = {k: v for k, v in hit.source.items() if k != "embedding"}
    return Hit(id=hit.id, score=hit.score, title=hit.title, text=hit.text, source=source)
