"""Knowledge outlines that outlive a question: one document per (namespace, entity key).

An :class:`EntityOutline` is an entity's name, its aliases and its facts; every :class:`Fact` keeps its
provenance (the question and sub-query that produced it, the passage ids it rests on, the model, the
time and the trace id). Strategies reach storage through the small :class:`OutlineStore` protocol;
:class:`EsOutlineStore` keeps the documents in ``<prefix>-outlines`` (``es_mappings/outlines.json``).

Freshness is the caller's rule: :meth:`EntityOutline.fresh_facts` keeps facts younger than a limit.
Writes are read-merge-write (the test distributions have no painless for scripted updates): aliases
are unioned, facts appended once (same summary and passages = same fact), the newest ``MAX_FACTS``
kept. The write is conditional on the version read (``if_seq_no``/``if_primary_term``, a first write
``op_type=create``): where another question or service process saved the entity in between,
Elasticsearch answers 409 and the save re-reads and merges again, up to ``SAVE_ATTEMPTS`` times, then
raises :class:`~hopsearch.service.errors.VersionConflict`. No fact is lost to a concurrent save.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from hopsearch.service.entities import entity_key
from hopsearch.service.errors import VersionConflict
from hopsearch.service.store import Store

log = logging.getLogger(__name__)

MAX_FACTS = 100
#: Conditional writes of one outline before a save gives up (each lost race re-reads and merges again).
SAVE_ATTEMPTS = 32
#: The text fields an outline search matches, with their boosts (the CLI and HTTP searches share them).
TEXT_FIELDS = ("entity^3", "aliases^2", "facts.summary")


def _time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Fact:
    """One summary about an entity, with where it came from."""

    summary: str
    question: str
    sub_query: str
    passage_ids: tuple[str, ...]
    model: str
    created_at: datetime
    trace_id: str
    passage_titles: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "question": self.question,
            "sub_query": self.sub_query,
            "passage_ids": list(self.passage_ids),
            "passage_titles": list(self.passage_titles),
            "model": self.model,
            "created_at": self.created_at.isoformat(),
            "trace_id": self.trace_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fact:
        return cls(
            summary=str(data.get("summary", "")),
            question=str(data.get("question", "")),
            sub_query=str(data.get("sub_query", "")),
            passage_ids=tuple(str(p) for p in data.get("passage_ids") or ()),
            passage_titles=tuple(str(t) for t in data.get("passage_titles") or ()),
            model=str(data.get("model", "")),
            created_at=_time(data.get("created_at") or datetime.now(UTC)),
            trace_id=str(data.get("trace_id", "")),
        )

    @property
    def identity(self) -> tuple[str, tuple[str, ...]]:
        return self.summary.strip(), self.passage_ids


@dataclass(frozen=True, slots=True)
class EntityOutline:
    """An entity's stored knowledge within a namespace."""

    namespace: str
    entity: str
    aliases: tuple[str, ...] = ()
    facts: tuple[Fact, ...] = ()
    updated_at: datetime | None = None

    @property
    def key(self) -> str:
        return entity_key(self.entity)

    def keys(self) -> list[str]:
        """The entity key first, then the keys of the aliases (each once)."""
        found = [self.key]
        for alias in self.aliases:
            key = entity_key(alias)
            if key and key not in found:
                found.append(key)
        return found

    def fresh_facts(self, max_age_s: float, now: datetime | None = None) -> tuple[Fact, ...]:
        cutoff = (now or datetime.now(UTC)) - timedelta(seconds=max_age_s)
        return tuple(fact for fact in self.facts if fact.created_at >= cutoff)

    def merged(self, other: EntityOutline) -> EntityOutline:
        """This outline with ``other``'s aliases and new facts added (newest ``MAX_FACTS`` kept)."""
        aliases = list(self.aliases)
        folded = {self.entity.casefold(), *(a.casefold() for a in aliases)}
        for alias in (other.entity, *other.aliases):
            if alias.casefold() not in folded:
                aliases.append(alias)
                folded.add(alias.casefold())
        facts = list(self.facts)
        known = {fact.identity for fact in facts}
        facts += [fact for fact in other.facts if fact.identity not in known]
        facts.sort(key=lambda fact: fact.created_at)
        return replace(self, aliases=tuple(aliases), facts=tuple(facts[-MAX_FACTS:]))

    def to_document(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "entity_key": self.key,
            "entity": self.entity,
            "aliases": list(self.aliases),
            "keys": self.keys(),
            "facts": [fact.to_dict() for fact in self.facts],
            "updated_at": (self.updated_at or datetime.now(UTC)).isoformat(),
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> EntityOutline:
        updated = doc.get("updated_at")
        return cls(
            namespace=str(doc.get("namespace", "")),
            entity=str(doc.get("entity", "")),
            aliases=tuple(str(a) for a in doc.get("aliases") or ()),
            facts=tuple(Fact.from_dict(f) for f in doc.get("facts") or ()),
            updated_at=_time(updated) if updated else None,
        )


def render_outline(sections: Sequence[tuple[str, Sequence[str]]]) -> str:
    """The Knowledge Outline: one heading per entity, its facts below it ("" when empty)."""
    blocks = []
    for entity, facts in sections:
        if facts:
            lines = "\n".join(f"- {' '.join(fact.split())}" for fact in facts)
            blocks.append(f"## {entity}\n{lines}")
    return "\n\n".join(blocks)


def outline_id(namespace: str, key: str) -> str:
    """The document ``_id`` of an entity in a namespace (a digest: keys may be long)."""
    return hashlib.sha1(f"{namespace}\x00{key}".encode()).hexdigest()


def entity_query(entity: str, namespace: str | None = None, *, phrase: bool = False) -> dict[str, Any]:
    """Outlines of an entity: its entity key, its exact name or alias, or the normalised keys DualRAG
    stores outlines under. ``phrase`` adds case-insensitive (still literal) phrase matches on the name
    and aliases."""
    names = sorted({entity, entity.strip(), entity.strip().casefold()})
    should: list[dict[str, Any]] = [{"terms": {"entity_key": names}}]
    should += [{"terms": {"entity.keyword": names}}, {"terms": {"aliases.keyword": names}}]
    key = entity_key(entity)
    if key:
        should.append({"term": {"keys": key}})
    if phrase:
        should += [{"match_phrase": {field: entity}} for field in ("entity", "aliases")]
    query: dict[str, Any] = {"bool": {"should": should, "minimum_should_match": 1}}
    if namespace:
        query["bool"]["filter"] = [{"term": {"namespace": namespace}}]
    return query


def search_body(
    *, query: str | None = None, entity: str | None = None, namespace: str | None = None, size: int = 10
) -> dict[str, Any]:
    """The outline search: full text over names, aliases and facts (:data:`TEXT_FIELDS`) and/or an
    entity (:func:`entity_query`), within a namespace where one is given."""
    must: list[dict[str, Any]] = []
    if query:
        must.append(
            {"multi_match": {"query": query, "fields": list(TEXT_FIELDS), "type": "best_fields", "tie_breaker": 0.3}}
        )
    if entity:
        must.append(entity_query(entity, phrase=True))
    filters = [{"term": {"namespace": namespace}}] if namespace else []
    return {"size": size, "query": {"bool": {"must": must or [{"match_all": {}}], "filter": filters}}}


class OutlineStore(Protocol):
    """Where outlines persist between questions."""

    async def lookup(self, namespace: str, names: Sequence[str]) -> list[EntityOutline]:
        """Stored outlines whose entity key or an alias key equals the key of one of ``names``."""
        ...

    async def save(self, outlines: Sequence[EntityOutline]) -> None:
        """Merge each outline into the stored one (or create it)."""
        ...

    async def search(self, namespace: str, query: str, *, size: int = 10) -> list[EntityOutline]:
        """Full-text search over entity names, aliases and fact summaries."""
        ...


class EsOutlineStore:
    """The :class:`OutlineStore` over the outlines index of a :class:`Store`."""

    def __init__(self, store: Store, index: str | None = None) -> None:
        self.store = store
        self.index = index or store.settings.outlines_index

    async def get(self, namespace: str, entity: str) -> EntityOutline | None:
        """The outline an entity name (or one of its aliases) names, or ``None``."""
        found = await self.lookup(namespace, [entity])
        return found[0] if found else None

    async def lookup(self, namespace: str, names: Sequence[str]) -> list[EntityOutline]:
        keys = sorted({key for name in names if (key := entity_key(name))})
        if not keys:
            return []
        body = {
            "size": min(10 * len(keys), 1000),
            "query": {"bool": {"filter": [{"term": {"namespace": namespace}}, {"terms": {"keys": keys}}]}},
        }
        response = await self.store.search(self.index, body)
        outlines = [EntityOutline.from_document(hit["_source"]) for hit in response["hits"]["hits"]]
        # An exact entity key beats a shared alias.
        return sorted(outlines, key=lambda outline: (outline.key not in keys, outline.entity))

    async def _save_one(self, outline: EntityOutline) -> None:
        doc_id = outline_id(outline.namespace, outline.key)
        for attempt in range(SAVE_ATTEMPTS):
            stored = await self.store.get_versioned(self.index, doc_id)
            merged = EntityOutline.from_document(stored[0]).merged(outline) if stored else outline
            doc = replace(merged, updated_at=datetime.now(UTC)).to_document()
            try:
                if stored is None:
                    await self.store.put_document(self.index, doc_id, doc, refresh=True, create=True)
                else:
                    _, seq_no, term = stored
                    await self.store.put_document(
                        self.index, doc_id, doc, refresh=True, if_seq_no=seq_no, if_primary_term=term
                    )
                return
            except VersionConflict:
                log.debug("outline %s changed while saving (attempt %d): merging again", doc_id, attempt + 1)
                await asyncio.sleep(random.uniform(0, 0.01 * 2 ** min(attempt, 5)))
        raise VersionConflict(
            f"outline of {outline.entity!r} in namespace {outline.namespace!r} kept changing: "
            f"gave up after {SAVE_ATTEMPTS} conditional writes",
            details={"index": self.index, "id": doc_id, "attempts": SAVE_ATTEMPTS},
        )

    async def save(self, outlines: Sequence[EntityOutline]) -> None:
        # Never let a write auto-create the index: that gives it dynamic mappings, and the concurrent
        # saves' reads race the new shard's start (no_shard_available).
        await self.store.ensure_side_indices()
        await asyncio.gather(*(self._save_one(outline) for outline in outlines if outline.key))

    async def search(self, namespace: str, query: str, *, size: int = 10) -> list[EntityOutline]:
        response = await self.search_hits(query=query, namespace=namespace, size=size)
        return [EntityOutline.from_document(hit["_source"]) for hit in response["hits"]["hits"]]

    async def search_hits(
        self, *, query: str | None = None, entity: str | None = None, namespace: str | None = None, size: int = 10
    ) -> dict[str, Any]:
        """The search response of :func:`search_body` (hits with ``_id``, ``_score``, ``_source``)."""
        return await self.store.search(
            self.index, search_body(query=query, entity=entity, namespace=namespace, size=size)
        )

    async def latest_hit(self, entity: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The most recently updated outline of an entity (by key, name or alias) as a search hit."""
        body = {"size": 1, "query": entity_query(entity, namespace), "sort": [{"updated_at": {"order": "desc"}}]}
        hits = (await self.store.search(self.index, body)).get("hits", {}).get("hits", [])
        return dict(hits[0]) if hits else None
