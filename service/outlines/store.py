"""Where outlines persist: the :class:`OutlineStore` protocol and :class:`EsOutlineStore`, the documents of
``<prefix>-outlines`` (``es_mappings/outlines.json``).

Every read is a reader's (:class:`~hopsearch.service.outlines.lineage.OutlineReader`): it gets only what
it may use (:func:`~hopsearch.service.outlines.model.usable`), checked in ONE ``_msearch`` against the passages'
current ACLs. A search filters inside the query as well (the facts' and aliases' ``readers``, nested), so
ranks and counts say nothing of facts the reader may not see.

Writes are read-merge-write (the test distributions have no painless for scripted updates), conditional
on the version read (``if_seq_no``/``if_primary_term``, a first write ``op_type=create``): where another
question or service process saved the entity in between, Elasticsearch answers 409 and the save
re-reads and merges again, up to ``SAVE_ATTEMPTS`` times, then raises
:class:`~hopsearch.service.errors.VersionConflict`. No fact is lost to a concurrent save. A save first
gives each new fact and alias its ``readers`` from the current ACLs of its lineage (one ``_msearch``).

Schemas (``_meta.schema_version``): 1, facts as objects without lineage; 2, facts and aliases nested
with lineage and readers. A schema-1 index keeps answering: its facts without lineage are admins'
only, its searches are admins' only, and :func:`schema_note` names ``hopsearch outlines rebuild``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from hopsearch.service.config.settings import DEFAULT_TIMEOUT_S, Settings
from hopsearch.service.errors import VersionConflict
from hopsearch.service.outlines.entities import entity_key
from hopsearch.service.outlines.lineage import (
    ADMIN_READER,
    OutlineReader,
    readable_sources,
    readers_clause,
    readers_of,
    source_acls,
)
from hopsearch.service.outlines.model import AliasSource, EntityOutline, Fact, outline_id, usable
from hopsearch.service.store import Store

log = logging.getLogger(__name__)

#: Conditional writes of one outline before a save gives up (each lost race re-reads and merges again).
SAVE_ATTEMPTS = 32
#: The outlines schema this code writes (facts and aliases nested, with lineage).
OUTLINES_SCHEMA = 2


def schema_note(index: str, version: int) -> str:
    """Return what to say of an outlines index made under an older schema ("" where it is current)."""
    if version >= OUTLINES_SCHEMA or version == 0:
        return ""
    return (
        f"outlines index [{index}] has schema {version} < {OUTLINES_SCHEMA} (made before fact lineage): its facts "
        f"without lineage are admins' only and searching it is for admins; `hopsearch outlines rebuild` moves it "
        f"to schema {OUTLINES_SCHEMA}, keeping every outline"
    )


def _nested(path: str, query: Mapping[str, Any], reader: OutlineReader) -> dict[str, Any]:
    filters = [] if reader.caller.admin else [readers_clause(path, reader)]
    inner = {"bool": {"must": [dict(query)], "filter": filters}}
    return {"nested": {"path": path, "score_mode": "max", "query": inner}}


def entity_query(entity: str, namespace: str | None = None, *, phrase: bool = False) -> dict[str, Any]:
    """Outlines of an entity: its entity key, its exact name or alias, or the normalised keys DualRAG
    stores outlines under (candidates: what a reader may use of them is decided after)."""
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


def _reader_entity_query(entity: str, reader: OutlineReader) -> dict[str, Any]:
    names = sorted({entity, entity.strip(), entity.strip().casefold()})
    should: list[dict[str, Any]] = [{"terms": {"entity_key": [*names, entity_key(entity)]}}]
    should += [{"terms": {"entity.keyword": names}}, {"match_phrase": {"entity": entity}}]
    should.append(_nested("alias_lineage", {"terms": {"alias_lineage.name.keyword": names}}, reader))
    should.append(_nested("alias_lineage", {"match_phrase": {"alias_lineage.name": entity}}, reader))
    return {"bool": {"should": should, "minimum_should_match": 1}}


def search_body(
    *,
    query: str | None = None,
    entity: str | None = None,
    namespace: str | None = None,
    size: int = 10,
    reader: OutlineReader = ADMIN_READER,
    schema: int = OUTLINES_SCHEMA,
) -> dict[str, Any]:
    """Return the outline search: full text over names, aliases and facts and/or an entity, within a namespace
    where one is given. Under schema 2 the facts and aliases matched are only those whose ``readers``
    name one of the reader's principals, and a document matches only where one of them does."""
    must: list[dict[str, Any]] = []
    filters: list[dict[str, Any]] = [{"term": {"namespace": namespace}}] if namespace else []
    if schema < OUTLINES_SCHEMA:
        if query:
            fields = ["entity^3", "aliases^2", "facts.summary"]
            must.append({"multi_match": {"query": query, "fields": fields, "type": "best_fields", "tie_breaker": 0.3}})
        if entity:
            must.append(entity_query(entity, phrase=True))
        return {"size": size, "query": {"bool": {"must": must or [{"match_all": {}}], "filter": filters}}}
    if query:
        names = (
            {"match": {"aliases": {"query": query, "boost": 2}}}
            if reader.caller.admin
            else _nested("alias_lineage", {"match": {"alias_lineage.name": {"query": query, "boost": 2}}}, reader)
        )
        should = [
            {"match": {"entity": {"query": query, "boost": 3}}},
            names,
            _nested("facts", {"match": {"facts.summary": query}}, reader),
        ]
        must.append({"bool": {"should": should, "minimum_should_match": 1}})
    if entity:
        must.append(entity_query(entity, phrase=True) if reader.caller.admin else _reader_entity_query(entity, reader))
    if not reader.caller.admin:
        visible = [_nested(path, {"match_all": {}}, reader) for path in ("facts", "alias_lineage")]
        filters.append({"bool": {"should": visible, "minimum_should_match": 1}})
    return {"size": size, "query": {"bool": {"must": must or [{"match_all": {}}], "filter": filters}}}


class OutlineStore(Protocol):
    """Where outlines persist between questions."""

    async def lookup(self, namespace: str, names: Sequence[str], reader: OutlineReader) -> list[EntityOutline]:
        """Return what ``reader`` may use of the stored outlines whose entity key or a usable alias key equals the
        key of one of ``names``."""
        ...

    async def save(self, outlines: Sequence[EntityOutline]) -> None:
        """Merge each outline into the stored one (or create it)."""
        ...


@dataclass(frozen=True, slots=True)
class OutlinesConfig:
    """The settings an :class:`EsOutlineStore` uses (defaults: :class:`Settings`' own)."""

    #: the readers of a new fact whose passages carry no ACL (``acl_default``)
    acl_default: Literal["private", "public"] = "private"
    #: how long a fact's trace may be unwritten before the fact reads as ``lost`` (``llm_deadline`` + 60 s:
    #: the question that found it may still be running)
    trace_pending_s: float = DEFAULT_TIMEOUT_S + 60

    @classmethod
    def of(cls, settings: Settings) -> OutlinesConfig:
        return cls(settings.acl_default, settings.llm_deadline + 60)


class EsOutlineStore:
    """The :class:`OutlineStore` over the outlines index of a :class:`Store`."""

    def __init__(self, store: Store, index: str | None = None, config: OutlinesConfig | None = None) -> None:
        self.store = store
        self.index = index or store.names.outlines
        self.config = config or OutlinesConfig()
        self._schema: int | None = None

    async def schema(self) -> int:
        """Return the outlines index's schema version (0: no index yet; asked once)."""
        if self._schema is None:
            if not await self.store.exists(self.index):
                return 0
            mapping = await self.store.get_mapping(self.index)
            versions = [int(m.get("mappings", {}).get("_meta", {}).get("schema_version", 1)) for m in mapping.values()]
            self._schema = min(versions, default=1)
        return self._schema

    async def note(self) -> str:
        return schema_note(self.index, await self.schema())

    async def views(
        self, outlines: Sequence[EntityOutline], reader: OutlineReader, names: Sequence[str] = ()
    ) -> list[EntityOutline | None]:
        """Return what ``reader`` may use of each of ``outlines`` (None: nothing), in one check of every lineage
        entry. With ``names``, an outline stays only where one of their keys is its entity key or the key
        of an alias it may use."""
        readable = await readable_sources(self.store, reader, {e for o in outlines for e in o.lineage()})
        wanted = {key for name in names if (key := entity_key(name))}
        out: list[EntityOutline | None] = []
        for outline in outlines:
            view = usable(outline, reader, readable)
            out.append(view if view is not None and (not wanted or wanted & set(view.keys())) else None)
        return await self._traced(out)

    async def _traced(self, views: list[EntityOutline | None]) -> list[EntityOutline | None]:
        """Each fact naming its trace only where the trace was written (one ``_mget``): a service stopped
        during a question leaves facts whose trace never will be (``lost``)."""
        named = sorted({f.trace_id for v in views if v is not None for f in v.facts if f.trace_id})
        if not named:
            return views
        written = set(await self.store.get_sources(self.store.names.traces, named, ["trace_id"]))
        pending_s = self.config.trace_pending_s
        return [
            None if v is None else replace(v, facts=tuple(f.with_trace(written, pending_s) for f in v.facts))
            for v in views
        ]

    async def get(self, namespace: str, entity: str, reader: OutlineReader = ADMIN_READER) -> EntityOutline | None:
        """Return what ``reader`` may use of the outline an entity name (or one of its aliases) names, or ``None``."""
        found = await self.lookup(namespace, [entity], reader)
        return found[0] if found else None

    async def lookup(
        self, namespace: str, names: Sequence[str], reader: OutlineReader = ADMIN_READER
    ) -> list[EntityOutline]:
        keys = sorted({key for name in names if (key := entity_key(name))})
        if not keys:
            return []
        body = {
            "size": min(10 * len(keys), 1000),
            "query": {"bool": {"filter": [{"term": {"namespace": namespace}}, {"terms": {"keys": keys}}]}},
        }
        response = await self.store.search(self.index, body)
        stored = [EntityOutline.from_document(hit["_source"]) for hit in response["hits"]["hits"]]
        outlines = [view for view in await self.views(stored, reader, names) if view is not None]
        # An exact entity key beats a shared alias.
        return sorted(outlines, key=lambda outline: (outline.key not in keys, outline.entity))

    async def _with_readers(self, outlines: Sequence[EntityOutline]) -> list[EntityOutline]:
        """Each new fact and alias with the readers of its lineage (the passages' ACLs now)."""
        pending = {e for o in outlines for f in o.facts if f.lineage and f.readers is None for e in f.lineage}
        pending |= {e for o in outlines for a in o.alias_lineage if a.readers is None for e in a.lineage}
        acls = await source_acls(self.store, pending)
        default = self.config.acl_default

        def fact(f: Fact) -> Fact:
            if not f.lineage or f.readers is not None:
                return f
            return replace(f, readers=readers_of((acls[e] for e in f.lineage), default))

        def alias(a: AliasSource) -> AliasSource:
            return a if a.readers is not None else replace(a, readers=readers_of((acls[e] for e in a.lineage), default))

        return [
            replace(o, facts=tuple(map(fact, o.facts)), alias_lineage=tuple(map(alias, o.alias_lineage)))
            for o in outlines
        ]

    async def _save_one(self, outline: EntityOutline) -> None:
        doc_id = outline_id(outline.namespace, outline.key)
        for attempt in range(SAVE_ATTEMPTS):
            stored = await self.store.get_versioned(self.index, doc_id)
            merged = EntityOutline.from_document(stored[0]).merged(outline) if stored else outline
            if await self.write(doc_id, merged, stored[1:] if stored else None):
                return
            log.debug("outline %s changed while saving (attempt %d): merging again", doc_id, attempt + 1)
            await asyncio.sleep(random.uniform(0, 0.01 * 2 ** min(attempt, 5)))
        raise VersionConflict(
            f"outline of {outline.entity!r} in namespace {outline.namespace!r} kept changing: "
            f"gave up after {SAVE_ATTEMPTS} conditional writes",
            details={"index": self.index, "id": doc_id, "attempts": SAVE_ATTEMPTS},
        )

    async def write(self, doc_id: str, outline: EntityOutline, version: tuple[int, int] | None) -> bool:
        """Write ``outline`` where the stored one is still at ``version`` (None: create); False on a conflict."""
        doc = replace(outline, updated_at=datetime.now(UTC)).to_document()
        try:
            if version is None:
                await self.store.put_document(self.index, doc_id, doc, refresh=True, create=True)
            else:
                seq_no, term = version
                await self.store.put_document(
                    self.index, doc_id, doc, refresh=True, if_seq_no=seq_no, if_primary_term=term
                )
        except VersionConflict:
            return False
        return True

    async def save(self, outlines: Sequence[EntityOutline]) -> None:
        # Never let a write auto-create the index: that gives it dynamic mappings, and the concurrent
        # saves' reads race the new shard's start (no_shard_available).
        await self.store.ensure_side_indices()
        ready = await self._with_readers([o for o in outlines if o.key])
        await asyncio.gather(*(self._save_one(outline) for outline in ready))

    async def search(
        self, namespace: str, query: str, *, size: int = 10, reader: OutlineReader = ADMIN_READER
    ) -> list[EntityOutline]:
        found = await self.search_outlines(query=query, namespace=namespace, size=size, reader=reader)
        return [outline for _, outline in found[0]]

    async def search_outlines(
        self,
        *,
        query: str | None = None,
        entity: str | None = None,
        namespace: str | None = None,
        size: int = 10,
        reader: OutlineReader = ADMIN_READER,
    ) -> tuple[list[tuple[dict[str, Any], EntityOutline]], int]:
        """Return the hits of :func:`search_body` (each with what ``reader`` may use of it) and the total. Under
        schema 1 a non-admin finds nothing."""
        schema = await self.schema()
        if schema == 0 or (schema < OUTLINES_SCHEMA and not reader.caller.admin):
            return [], 0
        body = search_body(query=query, entity=entity, namespace=namespace, size=size, reader=reader, schema=schema)
        response = await self.store.search(self.index, body)
        hits = response.get("hits", {}).get("hits", [])
        views = await self.views([EntityOutline.from_document(h["_source"]) for h in hits], reader)
        shown = [(dict(h), view) for h, view in zip(hits, views, strict=True) if view is not None]
        total = response.get("hits", {}).get("total", {})
        value = total.get("value", len(hits)) if isinstance(total, dict) else int(total)
        return shown, value - (len(hits) - len(shown))

    async def latest(
        self, entity: str, namespace: str | None = None, reader: OutlineReader = ADMIN_READER
    ) -> tuple[dict[str, Any], EntityOutline] | None:
        """Return the most recently updated outline of an entity (by key, name or alias) that ``reader`` may use
        some of, as its search hit and what the reader may use of it."""
        body = {"size": 10, "query": entity_query(entity, namespace), "sort": [{"updated_at": {"order": "desc"}}]}
        hits = (await self.store.search(self.index, body)).get("hits", {}).get("hits", [])
        views = await self.views([EntityOutline.from_document(h["_source"]) for h in hits], reader, [entity])
        return next(((dict(h), view) for h, view in zip(hits, views, strict=True) if view is not None), None)
