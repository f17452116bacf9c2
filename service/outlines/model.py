"""Knowledge outlines that outlive a question: one document per (namespace, entity key).

An :class:`EntityOutline` is an entity's name, its aliases and its facts; every :class:`Fact` keeps its
provenance (the question and sub-query that produced it, the passage ids it rests on, the model, the
time, the trace id, the key and subject that wrote it) and its lineage (every passage it was derived
from, and the principals that could read all of them: :mod:`hopsearch.service.outlines.lineage`); every
alias its lineage too (:class:`AliasSource`). Storage is :mod:`hopsearch.service.outlines.store`.

Freshness is the caller's rule: :meth:`EntityOutline.fresh_facts` keeps facts younger than a limit.
A merge unions aliases and appends facts once (same summary and lineage = same fact); the newest
``MAX_FACTS`` are kept per **lineage scope** (the readers, the indices and the writing key), so facts
one key writes never push out facts of another scope. :func:`usable` is what a reader may use of an outline.

Every field, where it comes from, and who may read it ("users": whoever may use the fact or alias, i.e. may
read every passage of its lineage now; "owner": the namespaced owner that asked, :meth:`Fact.shown_to`;
admins read everything). Text that came from the asker is the owner's alone — blanked for everyone else
(``question``, ``sub_query``) or kept as a whole fact or alias readable by ``owner:<owner>`` only (a
``summary``, alias or entity name holding a word of the question that no passage holds,
:mod:`~hopsearch.service.outlines.provenance`)::

    Fact field      comes from                                         who may read it
    summary         the summarizer (model), from passages + question   users; owner alone where ``private``
    question        the asker                                          owner
    sub_query       the identifier's keywords (copies the question)    owner
    passage_ids     the passages summarised                            users
    passage_titles  the passages summarised                            users
    model           the service's model setting / the reply            users
    created_at      the service's clock                                users
    trace_id        the asker's trace                                  owner (once the trace is written)
    trace_status    computed at read (never stored)                    owner (the trace is the owner's)
    lineage         every passage that entered the prompt              users
    readers         the lineage's ACLs, or ``owner:<owner>``           users (a private fact: owner)
    key, subject    the asker's key and token subject                  owner
    owner           the asker's namespaced owner                       owner
    private         computed at write (question words in summary)      users (a private fact: owner)

    Alias field     comes from                                         who may read it
    name            the identifier (model): the passages or question   users; owner alone where it holds a
                                                                       question-only word (readers owner:)
    lineage         every passage that entered the run's prompts       as name
    readers         the lineage's ACLs, or ``owner:<owner>``           as name

    Outline field   comes from                                         who may read it
    entity          the first of the run's names with no question-only whoever may use one fact or alias
                    word (DualRAG's ``_stored_name``); the asker's
                    other names are aliases kept with the owner
    aliases, keys,  the names of ``alias_lineage``, their keys         only the usable aliases' (legacy
    entity_key                                                         aliases without lineage: admins)
    updated_at      the last save                                      admins; others: newest usable fact
    namespace       the writing key's namespace                        whoever reads the namespace

The outline search (``_outlines/_search`` with ``query``) matches the entity name, the alias names a reader
may use and the summaries of facts it may use — never ``question`` or ``sub_query`` — so a hit reveals none
of another owner's text. DualRAG's prompts hold the summaries of reused facts and the entity names and
aliases of their outlines as the reader sees them; its ``outline_reuse`` step the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hopsearch.service.outlines.entities import entity_key
from hopsearch.service.outlines.lineage import OutlineReader, may_read, split_source

#: Facts kept per entity and lineage scope (:attr:`Fact.scope`).
MAX_FACTS = 100


def _time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _strings(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(str(v) for v in value)


def _usable(
    lineage: Sequence[str] | None, readers: Sequence[str] | None, reader: OutlineReader, ok: Collection[str]
) -> bool:
    if lineage is None:  # written before lineage: admins only
        return reader.caller.admin
    return may_read(readers, reader) and all(entry in ok for entry in lineage)


@dataclass(frozen=True, slots=True)
class Fact:
    """One summary about an entity, with where it came from. ``lineage`` (``<index>/<id>`` entries) is
    None for a fact written before lineage existed; ``readers`` the principals that could read all of it."""

    summary: str
    question: str
    sub_query: str
    passage_ids: tuple[str, ...]
    model: str
    created_at: datetime
    trace_id: str
    passage_titles: tuple[str, ...] = ()
    lineage: tuple[str, ...] | None = None
    readers: tuple[str, ...] | None = None
    key: str | None = None
    subject: str | None = None
    #: Whom the fact's question belongs to (:func:`~hopsearch.service.access.owner_id`); None: a fact
    #: written before owners were namespaced, whose question, key and trace are shown to admins alone.
    owner: str | None = None
    #: Set where the summary holds text found in the question and in no passage of the lineage
    #: (:func:`~hopsearch.service.outlines.lineage.question_words`): the fact is then its owner's alone.
    private: bool = False
    #: As read (never stored): ``pending`` where the trace it names is not written yet, ``lost`` where it
    #: never will be (the service stopped during the question); the trace id is then not named.
    trace_status: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "summary": self.summary,
            "question": self.question,
            "sub_query": self.sub_query,
            "passage_ids": list(self.passage_ids),
            "passage_titles": list(self.passage_titles),
            "model": self.model,
            "created_at": self.created_at.isoformat(),
            "trace_id": self.trace_id,
        }
        if self.lineage is not None:
            out["lineage"] = list(self.lineage)
            out["readers"] = list(self.readers or ())
        if self.key is not None:
            out["key"] = self.key
        if self.subject is not None:
            out["subject"] = self.subject
        if self.owner is not None:
            out["owner"] = self.owner
        if self.private:
            out["private"] = True
        if self.trace_status:
            out["trace_status"] = self.trace_status
        return out

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
            lineage=_strings(data.get("lineage")),
            readers=_strings(data.get("readers")),
            key=str(data["key"]) if data.get("key") is not None else None,
            subject=str(data["subject"]) if data.get("subject") is not None else None,
            owner=str(data["owner"]) if data.get("owner") is not None else None,
            private=data.get("private") is True,
        )

    def with_trace(self, written: Collection[str], pending_s: float, now: datetime | None = None) -> Fact:
        """Return the fact naming its trace only where it was written (``written``: the trace ids that exist);
        else ``pending`` within ``pending_s`` of the fact (its question may still run), ``lost`` after."""
        if not self.trace_id or self.trace_id in written:
            return self
        young = (now or datetime.now(UTC)) - self.created_at < timedelta(seconds=pending_s)
        return replace(self, trace_id="", trace_status="pending" if young else "lost")

    @property
    def identity(self) -> tuple[str, tuple[str, ...], tuple[str, ...] | None]:
        return self.summary.strip(), self.passage_ids, self.lineage

    @property
    def scope(self) -> tuple[tuple[str, ...], tuple[str, ...], str]:
        """What the cap is kept per: the readers, the lineage's indices and the writing key."""
        indices = tuple(sorted({split_source(e)[0] for e in self.lineage or ()}))
        return self.readers or (), indices, self.key or ""

    def shown_to(self, reader: OutlineReader) -> Fact:
        """Return the fact as ``reader`` sees it: what came from another owner's question (its question and
        sub-query) and who asked (trace id, key, subject, owner) are not shown to a non-admin (compared by
        namespaced owner, never by bare subject): the table in this module's docstring."""
        if reader.caller.owns(self.owner):
            return self
        return replace(self, question="", sub_query="", trace_id="", key=None, subject=None, owner=None)


@dataclass(frozen=True, slots=True)
class AliasSource:
    """A name an entity is also known by, with the lineage of the prompt it was learnt from."""

    name: str
    lineage: tuple[str, ...]
    readers: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "lineage": list(self.lineage), "readers": list(self.readers or ())}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AliasSource:
        return cls(
            str(data.get("name", "")),
            tuple(str(e) for e in data.get("lineage") or ()),
            _strings(data.get("readers")),
        )


@dataclass(frozen=True, slots=True)
class EntityOutline:
    """An entity's stored knowledge within a namespace."""

    namespace: str
    entity: str
    aliases: tuple[str, ...] = ()
    facts: tuple[Fact, ...] = ()
    updated_at: datetime | None = None
    alias_lineage: tuple[AliasSource, ...] = ()

    @property
    def key(self) -> str:
        return entity_key(self.entity)

    def keys(self) -> list[str]:
        """Return the entity key first, then the keys of the aliases (each once)."""
        found = [self.key]
        for alias in self.aliases:
            key = entity_key(alias)
            if key and key not in found:
                found.append(key)
        return found

    def lineage(self) -> set[str]:
        """Every lineage entry of its facts and aliases."""
        entries = {e for fact in self.facts for e in fact.lineage or ()}
        return entries | {e for alias in self.alias_lineage for e in alias.lineage}

    def fresh_facts(self, max_age_s: float, now: datetime | None = None) -> tuple[Fact, ...]:
        cutoff = (now or datetime.now(UTC)) - timedelta(seconds=max_age_s)
        return tuple(fact for fact in self.facts if fact.created_at >= cutoff)

    def merged(self, other: EntityOutline) -> EntityOutline:
        """Return this outline with ``other``'s aliases and new facts added (the newest ``MAX_FACTS`` kept per
        lineage scope)."""
        aliases = list(self.aliases)
        folded = {self.entity.casefold(), *(a.casefold() for a in aliases)}
        for alias in (other.entity, *other.aliases):
            if alias.casefold() not in folded:
                aliases.append(alias)
                folded.add(alias.casefold())
        records = list(self.alias_lineage)
        known_records = {(r.name.casefold(), r.lineage) for r in records}
        records += [r for r in other.alias_lineage if (r.name.casefold(), r.lineage) not in known_records]
        facts = list(self.facts)
        known = {fact.identity for fact in facts}
        facts += [fact for fact in other.facts if fact.identity not in known]
        facts.sort(key=lambda fact: fact.created_at)
        kept: dict[tuple[tuple[str, ...], tuple[str, ...], str], list[Fact]] = {}
        for fact in facts:
            kept.setdefault(fact.scope, []).append(fact)
        newest = {id(f) for group in kept.values() for f in group[-MAX_FACTS:]}
        return replace(
            self,
            aliases=tuple(aliases),
            facts=tuple(f for f in facts if id(f) in newest),
            alias_lineage=tuple(records),
        )

    def without(self, gone: Callable[[str], bool]) -> EntityOutline:
        """Return this outline less every fact and alias whose lineage holds an entry ``gone`` says is (a purge)."""
        facts = tuple(f for f in self.facts if not any(gone(e) for e in f.lineage or ()))
        records = tuple(r for r in self.alias_lineage if not any(gone(e) for e in r.lineage))
        dropped = {r.name.casefold() for r in self.alias_lineage} - {r.name.casefold() for r in records}
        aliases = tuple(a for a in self.aliases if a.casefold() not in dropped)
        return replace(self, facts=facts, alias_lineage=records, aliases=aliases)

    def to_document(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "entity_key": self.key,
            "entity": self.entity,
            "aliases": list(self.aliases),
            "alias_lineage": [a.to_dict() for a in self.alias_lineage],
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
            alias_lineage=tuple(AliasSource.from_dict(a) for a in doc.get("alias_lineage") or ()),
        )


def usable(outline: EntityOutline, reader: OutlineReader, readable: Collection[str]) -> EntityOutline | None:
    """Return what ``reader`` may use of ``outline``, given the lineage entries it may read now (``readable``:
    :func:`~hopsearch.service.outlines.lineage.readable_sources`): the usable facts as the reader sees them,
    the aliases with a usable lineage (admins: those without lineage too); None where nothing is usable."""
    facts = tuple(f.shown_to(reader) for f in outline.facts if _usable(f.lineage, f.readers, reader, readable))
    good = {r.name.casefold() for r in outline.alias_lineage if _usable(r.lineage, r.readers, reader, readable)}
    recorded = {r.name.casefold() for r in outline.alias_lineage}
    legacy = reader.caller.admin
    aliases = tuple(a for a in outline.aliases if a.casefold() in good or (legacy and a.casefold() not in recorded))
    if not facts and not aliases:
        return None
    records = tuple(r for r in outline.alias_lineage if r.name.casefold() in good)
    updated = outline.updated_at
    if not reader.caller.admin:
        updated = max((f.created_at for f in facts), default=None)
    return replace(outline, facts=facts, aliases=aliases, alias_lineage=records, updated_at=updated)


def render_outline(sections: Sequence[tuple[str, Sequence[str]]]) -> str:
    """Return the Knowledge Outline: one heading per entity, its facts below it ("" when empty)."""
    blocks = []
    for entity, facts in sections:
        if facts:
            lines = "\n".join(f"- {' '.join(fact.split())}" for fact in facts)
            blocks.append(f"## {entity}\n{lines}")
    return "\n\n".join(blocks)


def outline_id(namespace: str, key: str) -> str:
    """Return the document ``_id`` of an entity in a namespace (a digest: keys may be long)."""
    return hashlib.sha1(f"{namespace}\x00{key}".encode()).hexdigest()
