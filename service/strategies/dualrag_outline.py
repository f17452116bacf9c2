"""DualRAG's Knowledge Outline for one run, and its link to the outlines stored between questions.

:class:`RunOutline` is the run's state: the entity linker, one :class:`Section` per entity (facts,
passages seen, facts not yet saved), the Reasoner's thoughts and the citations. :class:`OutlineLink`
reuses stored fresh facts (namespace-scoped, younger than the freshness limit; looked up once per
entity per run) that the run's caller may use (every passage of their lineage readable now, within the
request's index and filters), and writes new facts back with their provenance. The run's ``lineage`` is
every passage that entered its prompts (its hits, the lineage of the facts and aliases it reused): each
new fact and alias carries it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hopsearch.service.errors import HopsearchError
from hopsearch.service.outlines.entities import EntityLinker, KnownEntity, entity_key
from hopsearch.service.outlines.lineage import OutlineReader, source
from hopsearch.service.outlines.model import AliasSource, EntityOutline, Fact, render_outline
from hopsearch.service.outlines.provenance import owner_readers, question_words
from hopsearch.service.outlines.store import OutlineStore
from hopsearch.service.strategies.base import RunContext
from hopsearch.service.strategies.dualrag_knowledge import EntitySearch
from hopsearch.service.traces.recorder import Citation, Step
from hopsearch.service.types import Hit

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Section:
    """One entity of the run's Knowledge Outline (mutable: the run's state)."""

    entity: KnownEntity
    facts: list[Fact] = field(default_factory=list)
    unsaved: list[Fact] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    stored_name: str | None = None
    stored_names: set[str] = field(default_factory=set)
    #: Names (casefolded) whose lineage is stored or written already.
    recorded: set[str] = field(default_factory=set)
    checked: bool = False

    def new_names(self) -> bool:
        """Whether the run knows a spelling the stored outline lacks."""
        names = (self.entity.name, *self.entity.aliases)
        return self.stored_name is not None and any(n.casefold() not in self.stored_names for n in names)


@dataclass(slots=True)
class RunOutline:
    """Everything a DualRAG run accumulates."""

    question: str
    linker: EntityLinker = field(default_factory=EntityLinker)
    sections: dict[str, Section] = field(default_factory=dict)
    thoughts: list[str] = field(default_factory=list)
    citations: dict[str, Citation] = field(default_factory=dict)
    #: Every lineage entry (``<index>/<id>``) that entered the run's prompts.
    lineage: set[str] = field(default_factory=set)
    #: The titles and texts of the passages summarised in this run: what tells the question's own words
    #: (:func:`~hopsearch.service.outlines.provenance.question_words`) from the passages'.
    passage_texts: list[str] = field(default_factory=list)
    #: The passages of the question's own retrieval (the seed), in the reasoner's and the answer's prompts.
    passages: list[Hit] = field(default_factory=list)
    #: The titles of the linked passages a hop brought in: entities the identifier is told of.
    titles: list[str] = field(default_factory=list)

    @property
    def holds_private(self) -> bool:
        """Whether a fact kept with its asker is in the run's outline: every fact drawn from a prompt
        holding it is the asker's too."""
        return any(f.private for s in self.sections.values() for f in s.facts)

    def question_derived(self, text: str) -> bool:
        """Whether ``text`` holds a word of the question that no passage of this run holds."""
        return bool(question_words(text, self.question, self.passage_texts))

    def render(self) -> str:
        """One heading per entity, its facts below it."""
        return render_outline([(s.entity.name, [f.summary for f in s.facts]) for s in self.sections.values()])

    def known(self) -> list[str]:
        """Return the entities of the outline (with their other names), then the titles a hop linked to."""
        named = [
            s.entity.name + (f" (also: {', '.join(s.entity.aliases)})" if s.entity.aliases else "")
            for s in self.sections.values()
        ]
        keys = {key for s in self.sections.values() for key in s.entity.key_set()}
        return named + [title for title in self.titles if entity_key(title) not in keys]

    def read(self, index: str, hits: Sequence[Hit]) -> None:
        """Passages that enter the run's prompts outside a summary (the seed): in its lineage, and what
        tells the question's own words from the passages' (:meth:`question_derived`)."""
        self.lineage.update(source(index, hit.id) for hit in hits)
        self.passage_texts.extend(f"{hit.title}\n{hit.text}" for hit in hits)

    def cite(self, ids: Sequence[str], titles: Sequence[str], score: float = 0.0) -> None:
        for number, doc_id in enumerate(ids):
            title = titles[number] if number < len(titles) else ""
            self.citations.setdefault(doc_id, Citation(id=doc_id, title=title, score=score))


def _reused(section: Section, stored_entity: str, fact: Fact) -> dict[str, Any]:
    """Return a reused fact in the step (as the reader sees it: another user's question and trace id are blank)."""
    item = {
        "entity": section.entity.name,
        "stored_entity": stored_entity,
        "summary": fact.summary,
        "passage_ids": list(fact.passage_ids),
        "created_at": fact.created_at.isoformat(),
    }
    return item | {name: value for name, value in (("question", fact.question), ("trace_id", fact.trace_id)) if value}


def _stored_name(run: RunOutline, names: Sequence[str]) -> str:
    """Choose the name a new outline is stored under: the first of ``names`` that holds no word of the question alone
    (:meth:`RunOutline.question_derived`), so that the entity name everyone who may read one of its facts or aliases
    sees never came from the asker; the first name where every one did (its facts and aliases are then the asker's
    alone)."""
    return next((n for n in names if not run.question_derived(n)), names[0])


def reader_of(context: RunContext) -> OutlineReader:
    """Who the run reads outlines as: its caller, bound to the request's index and filters."""
    scope = context.request.scope
    return OutlineReader(scope.caller, scope.acl_default, index=scope.index, filters=scope.filters)


class OutlineLink:
    """Reuse and persistence of outlines, with a freshness limit, in the namespace of each run's request."""

    def __init__(self, store: OutlineStore | None, max_age_s: float, persist: bool) -> None:
        self.store = store
        self.max_age_s = max_age_s
        self.persist = persist

    async def reuse(
        self, context: RunContext, run: RunOutline, searches: Sequence[EntitySearch], depth: int
    ) -> list[EntitySearch]:
        """Add stored fresh facts for the entities not yet looked up in this run (recorded as one
        ``outline_reuse`` step); return the searches still to run."""
        unchecked = {s.key for s in searches if not run.sections[s.key].checked}
        if self.store is None or not unchecked:
            return list(searches)
        for key in unchecked:
            run.sections[key].checked = True
        names = [n for key in unchecked for n in (run.sections[key].entity.name, *run.sections[key].entity.aliases)]
        started = time.monotonic()
        try:
            stored = await self.store.lookup(context.request.namespace, names, reader_of(context))
        except HopsearchError as exc:
            log.warning("outline lookup failed; retrieving instead: %s", exc)
            return list(searches)
        remaining: list[EntitySearch] = []
        reused: list[dict[str, Any]] = []
        for search in searches:
            section = run.sections[search.key]
            keys = section.entity.key_set()
            match = next((o for o in stored if search.key in unchecked and keys & set(o.keys())), None)
            if match is not None:
                section.stored_name = match.entity
                section.stored_names = {n.casefold() for n in (match.entity, *match.aliases)}
                section.recorded |= {a.name.casefold() for a in match.alias_lineage} | {match.entity.casefold()}
                for record in match.alias_lineage:
                    run.lineage.update(record.lineage)
                for alias in (match.entity, *match.aliases):
                    section.entity.add_alias(alias)
            fresh = match.fresh_facts(self.max_age_s) if match is not None and self.max_age_s > 0 else ()
            if match is None or not fresh:
                remaining.append(search)
                continue
            for fact in fresh:
                section.facts.append(fact)
                section.seen.update(fact.passage_ids)
                run.lineage.update(fact.lineage or ())
                run.cite(fact.passage_ids, fact.passage_titles)
                reused.append(_reused(section, match.entity, fact))
        if reused:
            entities = tuple(dict.fromkeys(item["entity"] for item in reused))
            sections = [(e, [i["summary"] for i in reused if i["entity"] == e]) for e in entities]
            context.recorder.add(
                Step(
                    kind="outline_reuse",
                    depth=depth,
                    queries=entities,
                    hit_ids=tuple(dict.fromkeys(p for item in reused for p in item["passage_ids"])),
                    output=render_outline(sections),
                    latency_ms=round((time.monotonic() - started) * 1000, 3),
                    decision="parametric",
                    decided_by="outline",
                    details={"namespace": context.request.namespace, "max_age_s": self.max_age_s, "facts": reused},
                )
            )
        return remaining

    async def save(self, run: RunOutline, namespace: str, owner: str | None = None) -> None:
        """Write the facts and spellings found since the last save (a failed write is logged, not fatal). A
        spelling that came from the question (:meth:`RunOutline.question_derived`) is ``owner``'s alone."""
        if self.store is None or not self.persist:
            return
        outlines = []
        saved: list[tuple[Section, str]] = []
        for section in run.sections.values():
            if not section.unsaved and not section.new_names():
                continue
            names = (section.entity.name, *section.entity.aliases)
            name = section.stored_name or _stored_name(run, names)
            aliases = tuple(a for a in names if a.casefold() != name.casefold())
            lineage = tuple(sorted(run.lineage))
            records = tuple(
                AliasSource(a, lineage, owner_readers(owner) if run.question_derived(a) else None)
                for a in aliases
                if a.casefold() not in section.recorded
            )
            outlines.append(EntityOutline(namespace, name, aliases, tuple(section.unsaved), alias_lineage=records))
            saved.append((section, name))
        if not outlines:
            return
        try:
            await self.store.save(outlines)
        except HopsearchError as exc:
            log.warning("could not save outlines: %s", exc)
            return
        for section, name in saved:
            section.unsaved.clear()
            spellings = {n.casefold() for n in (section.entity.name, *section.entity.aliases)}
            section.recorded |= spellings
            # stored now: a spelling learnt later is saved even without a new fact
            section.stored_name = name
            section.stored_names |= spellings
