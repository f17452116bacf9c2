"""The names hop (``hops: 1`` over hopsearch's passages of a Japanese question where the index holds
``names``): the names of the question (:func:`~hopsearch.service.text.names.query_names`, the company
synonyms' terms too) and those the top :data:`~.links.NAMERS` first-hop passages hold in their ``names``
field (read from the index with the first hop, never cut again at query time), looked up in ONE ``terms``
on ``names`` beside the title lookup of the same ``_msearch`` (:func:`names_body`): passages of the other
documents that hold one of them, scored by the question's BM25 and by the names they share with the
question (a role shared, 部長, counts but never links by itself). Pure functions here; the executor runs
the body and places what it finds (:func:`placed`).

Every body carries the query's filters (the caller's Scope included), so a passage the caller may not
read is never a link and never scores one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hopsearch.service.retrieval.bodies import Source, filters_of
from hopsearch.service.retrieval.links import NAMERS, QUESTION, Candidates, document_of, title_keys
from hopsearch.service.text.japanese import Synonyms
from hopsearch.service.text.names import is_role, names_of, query_names
from hopsearch.service.types import Hit, Link, RetrievalQuery

#: The field that holds a passage's names.
NAMES_FIELD = "names"
#: The most passages one names lookup (and the title lookup beside it) returns.
NAMES_SIZE = 10
#: The most names one lookup holds (the question's first).
MAX_LOOKUP = 128
#: What a name the passage shares with the question adds to its score (the question's BM25 beside it).
QUESTION_BOOST = 4.0
#: What a name it shares with the first-hop passages adds.
PASSAGE_BOOST = 1.0
#: Where linked passages go among the first hop's (README, "Multi-hop retrieval": measured): ``fill``, in
#: the places of the chunks within ``k`` whose document is already above them (those move to the end: no
#: document the first hop found within ``k`` is pushed out); ``after3``, after the top three; ``after1``,
#: after the top one; ``interleave``, one after each first-hop passage from rank 2; ``namer``, after the
#: passage that named it (the question's after the top one).
Placement = Literal["fill", "after1", "after3", "interleave", "namer"]
PLACEMENT: Placement = "fill"
#: The most linked passages placed.
PLACED = 5
#: Only passages that share a name with the question AND one with the first hop's top passages (a bridge:
#: the org chart's row of the unit a regulation names, holding the role the question asks for) are links.
BRIDGES = False


@dataclass(frozen=True, slots=True)
class NamesPlan:
    """One query's names lookup: the question's names, and each first-hop name with its first namer."""

    asked: tuple[str, ...]
    held: Mapping[str, str]

    @property
    def linking(self) -> list[str]:
        """The names a passage must hold one of to be linked (roles apart), the question's first."""
        names = [n for n in (*self.asked, *self.held) if not is_role(n)]
        return list(dict.fromkeys(names))[:MAX_LOOKUP]

    def namer(self, name: str) -> str:
        return QUESTION if name in self.asked else self.held.get(name, QUESTION)


def stored_names(hit: Hit) -> list[str]:
    """Return the names a passage holds: its ``names`` field, else (a passage indexed before names) cut now."""
    value = hit.source.get(NAMES_FIELD)
    if isinstance(value, list):
        return [str(name) for name in value]
    return names_of(f"{hit.title}\n{hit.text}")


def names_plan(question: str, hits: Sequence[Hit], synonyms: Synonyms | None) -> NamesPlan:
    """Return the names of ``question`` and of its top :data:`NAMERS` hits, each hit's own title apart."""
    asked = tuple(query_names(question, synonyms))
    held: dict[str, str] = {}
    for hit in hits[:NAMERS]:
        own = title_keys(hit.title)
        for name in stored_names(hit):
            if name not in own:
                held.setdefault(name, hit.id)
    return NamesPlan(asked, held)


def title_candidates(plan: NamesPlan) -> Candidates:
    """Return the title lookup's names (:func:`~.links.candidates`' shape) from the plan's, not cut again (no
    mention search beside the names lookup: measured, it found nothing more)."""
    named_by: dict[str, tuple[str, ...]] = {name: (QUESTION,) for name in plan.asked}
    for name, namer in plan.held.items():
        named_by.setdefault(name, (namer,))
    return Candidates(named_by)


def names_body(
    query: RetrievalQuery,
    plan: NamesPlan,
    elsewhere: Sequence[str],
    source: Source,
    scored_by: Mapping[str, Any] | None = None,
    size: int = NAMES_SIZE,
) -> dict[str, Any]:
    """Return the passages of documents other than ``elsewhere`` that hold one of the plan's linking names, under
    the query's filters, scored by ``scored_by`` (the question's BM25) and by each name they share (named
    ``q<n>`` for the question's, ``p<n>`` for the passages', so a hit says which: ``matched_queries``)."""
    should: list[dict[str, Any]] = [dict(scored_by)] if scored_by is not None else []
    for n, name in enumerate(plan.asked):
        should.append(_shared(name, QUESTION_BOOST, f"q{n}"))
    held = [name for name in plan.held if name not in plan.asked][:MAX_LOOKUP]
    if held:  # once, whichever it holds: a hub that holds many is no better a link
        terms = {"terms": {NAMES_FIELD: held, "_name": "p"}}
        should.append({"constant_score": {"filter": terms, "boost": PASSAGE_BOOST}})
    query_body: dict[str, Any] = {
        "filter": [{"terms": {NAMES_FIELD: plan.linking}}, *filters_of(query)],
        "should": should,
        "must_not": [{"terms": {"doc_id": list(elsewhere)}}],
    }
    return {"size": size, "track_total_hits": False, "query": {"bool": query_body}, "_source": source}


def _shared(name: str, boost: float, label: str) -> dict[str, Any]:
    return {"constant_score": {"filter": {"term": {NAMES_FIELD: name}}, "boost": boost, "_name": label}}


def linked_of(plan: NamesPlan, raws: Sequence[Mapping[str, Any]], hits: Sequence[Hit]) -> list[tuple[Link, Hit]]:
    """Each hit of a names lookup with its link: the non-role name it shares that the question named (else
    the first hop's), and who named it."""
    held = [name for name in plan.held if name not in plan.asked]
    out: list[tuple[Link, Hit]] = []
    for raw, hit in zip(raws, hits, strict=True):
        names: list[str] = []
        for label in raw.get("matched_queries") or ():
            label = str(label)
            if label[:1] == "q" and label[1:].isdigit() and int(label[1:]) < len(plan.asked):
                names.append(plan.asked[int(label[1:])])
            elif label == "p":
                own = set(stored_names(hit))
                names += [name for name in held if name in own]
        bridged = any(str(label)[:1] == "q" for label in raw.get("matched_queries") or ()) and "p" in (
            raw.get("matched_queries") or ()
        )
        names = [name for name in names if not is_role(name)]
        if names and (bridged or not BRIDGES):
            out.append((Link(names[0], plan.namer(names[0]), hit.id, "names"), hit))
    return out


def placed(
    first: Sequence[Hit],
    linked: Sequence[tuple[Link, Hit]],
    k: int,
    placement: Placement | None = None,
    most: int | None = None,
) -> tuple[list[Hit], list[Link]]:
    """Return the first hop with at most ``most`` linked passages (one a document, none of a document above it)
    placed as ``placement`` (default :data:`PLACEMENT`) says, never above the top one; cut to ``k``, with
    the links that brought a passage in."""
    placement = placement or PLACEMENT
    pool = _pool(first, linked, PLACED if most is None else most)
    if placement == "fill":
        return _filled(first, pool, k)
    slots: dict[str, list[tuple[Link, Hit]]] = {}
    if placement == "namer":
        ids = [hit.id for hit in first]
        for link, hit in pool:
            at = link.source if link.source in ids[:NAMERS] else (ids[0] if ids else QUESTION)
            slots.setdefault(at, []).append((link, hit))
    else:
        after = {"after1": 1, "after3": 3}.get(placement, 1)
        for n, item in enumerate(pool):
            place = after - 1 if placement != "interleave" else n
            if first:
                slots.setdefault(first[min(place, len(first) - 1)].id, []).append(item)
    out: list[Hit] = []
    links: list[Link] = []
    seen: set[str] = set()
    for hit in first:
        if hit.id not in seen:
            seen.add(hit.id)
            out.append(hit)
        for link, linked_hit in slots.get(hit.id, []):
            if linked_hit.id not in seen:
                seen.add(linked_hit.id)
                out.append(Hit(linked_hit.id, hit.score, linked_hit.title, linked_hit.text, linked_hit.source))
                links.append(link)
    kept = {hit.id for hit in out[:k]}
    return out[:k], [link for link in links if link.passage in kept]


def _pool(first: Sequence[Hit], linked: Sequence[tuple[Link, Hit]], most: int) -> list[tuple[Link, Hit]]:
    """Return the linked passages to place: the best of each document the first hop's top ones do not hold."""
    docs = {document_of(hit) for hit in first[:NAMERS]}
    ids = {hit.id for hit in first[:NAMERS]}
    pool: list[tuple[Link, Hit]] = []
    for link, hit in linked:
        if hit.id in ids or document_of(hit) in docs:
            continue
        docs.add(document_of(hit))
        pool.append((link, hit))
    return pool[:most]


def _filled(first: Sequence[Hit], pool: Sequence[tuple[Link, Hit]], k: int) -> tuple[list[Hit], list[Link]]:
    """``first`` with each chunk within ``k`` of a document already above it replaced by the next linked
    passage (the chunk moves to the end)."""
    todo = list(pool)
    out: list[Hit] = []
    moved: list[Hit] = []
    links: list[Link] = []
    docs: set[str] = set()
    taken = {hit.id for _, hit in pool}
    for place, hit in enumerate(first):
        if hit.id in taken:
            continue
        if place < k and document_of(hit) in docs and todo:
            link, linked = todo.pop(0)
            out.append(Hit(linked.id, hit.score, linked.title, linked.text, linked.source))
            links.append(link)
            docs.add(document_of(linked))
            moved.append(hit)
            continue
        out.append(hit)
        docs.add(document_of(hit))
    out = (out + moved)[:k]
    kept = {hit.id for hit in out}
    return out, [link for link in links if link.passage in kept]
