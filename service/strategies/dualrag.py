"""DualRAG — Cheng et al., "DualRAG: A Dual-Process Approach to Integrate Reasoning and Retrieval for
Multi-Hop Question Answering" (ACL 2025, arXiv:2504.18243).

Each iteration: the Reasoner writes the next thought and says whether knowledge is missing
(``{thought, need_retrieve}``); if so, the Entity Identifier names the entities it is about, with
search keywords (``{entities: [{entity, keywords, same_as}]}``), and each name is linked to a known
entity (same normalised key, a known alias, or the model's ``same_as``); names and keywords copied from
the prompt itself (its keys, "(none)", "a | b | c") are dropped and listed in the step. Entities whose fresh facts
are stored in the outlines index (same namespace, younger than ``outline_max_age_s``) reuse them
instead of retrieving — once per run, as an ``outline_reuse`` step that lists the facts and their
passage ids. For the others, every keyword is searched in ONE ``_msearch``, each entity's lists are
merged without duplicates (top 50) and reranked against the entity (top 10); passages not yet seen
for the entity go to the Knowledge Summarizer, all entities concurrently; a summary that is exactly
"None", or that echoes the prompt (its instructions or the question: :func:`~.dualrag_prompts.is_echo`,
``echo`` in the step), is dropped. The Knowledge Outline (one heading per entity, its facts below) goes
into every later prompt, and new facts are written back with their provenance. A fact whose summary or
entity name holds words of the question that none of its passages holds — or drawn from a prompt that
held such a fact — is kept with its asker (:mod:`~hopsearch.service.outlines.provenance`); the others
stay shared. The summarizer's prompt keeps the question, as the paper gives it: a summary is only worth
keeping for what it says towards the question, and the provenance check, not the prompt, is what keeps
the asker's words from other users.

With ``hops``, each keyword's search hops (the step lists the names followed, ``details.links``), and the
titles of the linked passages it read are named to the Entity Identifier as known entities. Seeded
(``AskOptions.seed``): the question's own passages are shown to the Reasoner and to the final answer
("Passages found for the question"), cited, and in the lineage of every fact the run writes (they entered
its prompts).

Stopping rule: the Reasoner says no retrieval is needed (``reasoner``); 5 iterations
(``iteration-limit``, or the budget's ``max_steps`` if lower); the retrieval budget is spent
(``retrieval-budget``); the Entity Identifier names no entity (``no-entities``); or every keyword it
names was already searched for that entity in this question (``repeat``: keywords searched before
are never searched again, and a step with the decision ``repeat`` lists them). Then one final
answer call. The rule that stopped the loop is the final step's ``decided_by``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from hopsearch.service.config.settings import DEFAULT_OUTLINE_MAX_AGE_S
from hopsearch.service.outlines.lineage import source
from hopsearch.service.outlines.model import Fact
from hopsearch.service.outlines.provenance import owner_readers
from hopsearch.service.outlines.store import OutlineStore
from hopsearch.service.strategies.base import RecordedStrategy, RunContext, links_detail
from hopsearch.service.strategies.dualrag_knowledge import EntitySearch, gather, rerank, summarize
from hopsearch.service.strategies.dualrag_outline import OutlineLink, RunOutline, Section
from hopsearch.service.strategies.dualrag_prompts import (
    IDENTIFIER_SCHEMA,
    MAX_KEYWORDS,
    REASONER_SCHEMA,
    answer_prompt,
    identifier_prompt,
    prompt_copies,
    read_entities,
    read_reasoning,
    reasoner_prompt,
)
from hopsearch.service.strategies.steps import ask_json, final_answer, json_step, normalise_query, read_reply
from hopsearch.service.traces.recorder import Citation, Step
from hopsearch.service.types import Embedder, Link, NamingRetriever

log = logging.getLogger(__name__)

MAX_ITERATIONS = 5


@dataclass(eq=False, kw_only=True)
class DualRAG(RecordedStrategy):
    """DualRAG over any :class:`Retriever`; outlines persist through an optional :class:`OutlineStore`."""

    name = "dualrag"
    # Its queries are the Entity Identifier's keywords, not sentences. Replaying every retrieve step of
    # four 2Wiki runs (100 questions) in both modes with the same keywords, BM25 found more of the
    # supporting paragraphs each time (evidence recall 0.110-0.120 vs 0.092-0.115): the keywords'
    # embeddings add little, and the step reranks by embedding anyway (dualrag_knowledge.rerank).
    preferred_retrieval_mode = "bm25"
    # Seeded by default: its Reasoner asks for retrieval on few questions with a small model, so unseeded it
    # found far less evidence than single with hops (first 20 shared 2Wiki questions, hops 1: evidence
    # recall 0.000 vs 0.975; seeded 0.988. README, Multi-hop retrieval).
    seed_default = True
    outlines: OutlineStore | None = None
    embedder: Embedder | None = None
    max_age_s: float = DEFAULT_OUTLINE_MAX_AGE_S
    persist: bool = True
    #: The titles of the passages a hop linked to are named to the Entity Identifier as known entities.
    link_entities: bool = True

    def __post_init__(self) -> None:
        self.link = OutlineLink(self.outlines, self.max_age_s, self.persist)

    async def _run(self, context: RunContext, question: str) -> tuple[str, Sequence[Citation]]:
        question = " ".join(question.split())
        run = RunOutline(question)
        if context.seeded:  # the question's own passages: in the reasoner's and the answer's prompts, cited
            run.passages = list(context.seeded)
            run.read(context.request.scope.index, context.seeded)
            for hit in context.seeded:
                run.cite((hit.id,), (hit.title,), hit.score)
            self._learn_titles(run, context.seed_links)
        limit = min(MAX_ITERATIONS, context.options.budget.max_steps)
        stop = "iteration-limit"
        depth = 0
        searched: set[tuple[str, str]] = set()  # (entity key, normalised keyword) searched in this run
        for depth in range(1, limit + 1):
            prompt = reasoner_prompt(question, run.render(), run.thoughts, run.passages)
            reply = await ask_json(context, "reason", prompt, REASONER_SCHEMA, name="reasoner", depth=depth)
            reasoning = read_reply(context, "reason", reply, prompt, read_reasoning, name="reasoner", depth=depth)
            if reasoning.thought:
                run.thoughts.append(reasoning.thought)
            decision = "retrieve" if reasoning.need_retrieve else "final"
            context.recorder.add(json_step("reason", reply, prompt, name="reasoner", depth=depth, decision=decision))
            if not reasoning.need_retrieve:
                stop = "reasoner"
                break
            if not context.may_retrieve():
                stop = "retrieval-budget"
                break
            searches = await self._identify(context, run, depth)
            if not searches:
                stop = "no-entities"
                break
            if context.options.repeat_guard:
                searches = unsearched(context, searches, searched, depth)
                if not searches:
                    stop = "repeat"
                    break
            searches = await self.link.reuse(context, run, searches, depth)
            if searches:
                await self._aggregate(context, run, searches, depth)
            await self.link.save(run, context.request.namespace, context.request.scope.caller.owner)
        return await self._final(context, run, stop, depth)

    async def _identify(self, context: RunContext, run: RunOutline, depth: int) -> list[EntitySearch]:
        prompt = identifier_prompt(run.question, run.render(), run.thoughts, run.known())
        reply = await ask_json(
            context, "identify", prompt, IDENTIFIER_SCHEMA, name="identifier", depth=depth, max_tokens=512
        )
        merged: dict[str, list[str]] = {}
        links: list[dict[str, str]] = []
        named = context.retriever if isinstance(context.retriever, NamingRetriever) else None
        for item in read_reply(context, "identify", reply, prompt, read_entities, name="identifier", depth=depth):
            name, same_as = item.entity, item.same_as
            if named is not None:  # the company's synonyms: one entity under its first name
                name, same_as = named.canonical(name), named.canonical(same_as) if same_as else same_as
            link = run.linker.link(name, same_as)
            if link is None:
                continue
            entity = link.entity
            run.sections.setdefault(entity.key, Section(entity))
            links.append({"name": link.name, "entity": entity.name, "how": link.how})
            words = merged.setdefault(entity.key, [])
            words += [k for k in item.keywords if k.casefold() not in {w.casefold() for w in words}]
        searches = [
            EntitySearch(key, run.sections[key].entity.name, tuple(words[: 2 * MAX_KEYWORDS]))
            for key, words in merged.items()
        ]
        details: dict[str, object] = {"links": links}
        copies = prompt_copies(reply.value)
        if copies:  # the prompt's own words (its keys, "(none)", "a | b | c"): never searched
            details["copied_from_prompt"] = copies
            details["note"] = f"not searched, copied from the prompt: {' | '.join(copies)}"
        context.recorder.add(
            json_step(
                "identify",
                reply,
                prompt,
                name="identifier",
                depth=depth,
                queries=tuple(k for s in searches for k in s.keywords),
                details=details,
            )
        )
        return searches

    async def _aggregate(self, context: RunContext, run: RunOutline, searches: list[EntitySearch], depth: int) -> None:
        started = time.monotonic()
        mode = context.options.retrieval_mode
        found = await gather(context.retriever, searches, mode=mode, hops=context.options.hops)
        candidates = found.hits
        ranked = await rerank(self.embedder, searches, candidates)
        hit_ids = tuple(dict.fromkeys(h.id for hits in ranked.values() for h in hits))
        linked = [link for s in searches for link in found.links.get(s.key, ())]
        details: dict[str, Any] = {
            "entities": {s.entity: list(s.keywords) for s in searches},
            "candidates": {s.entity: len(candidates[s.key]) for s in searches},
            "rerank": "embedding" if self.embedder is not None else "retrieval-order",
        }
        links = links_detail(linked, hit_ids)
        if links:
            details["links"] = links
        context.recorder.add(
            Step(
                kind="retrieve",
                depth=depth,
                queries=tuple(k for s in searches for k in s.keywords),
                hit_ids=hit_ids,
                output=f"{sum(len(s.keywords) for s in searches)} queries in one _msearch ({mode})",
                latency_ms=round((time.monotonic() - started) * 1000, 3),
                retrievals=1,
                details=details,
            )
        )
        kept = set(hit_ids)
        self._learn_titles(run, [link for link in linked if link.passage in kept])
        jobs = []
        for search in searches:
            section = run.sections[search.key]
            new = [hit for hit in ranked[search.key] if hit.id not in section.seen]
            section.seen.update(hit.id for hit in new)
            if new:
                jobs.append((search, new))
        now = datetime.now(UTC)
        prompted = set(run.lineage)  # the summarizer's prompt holds the whole outline and the thoughts
        caller = context.request.scope.caller
        index = context.request.scope.index
        for summary in await summarize(context, run.question, run.render(), run.thoughts, jobs, depth=depth):
            if summary.dropped or not summary.text:
                continue
            ids = tuple(hit.id for hit in summary.hits)
            lineage = tuple(sorted(prompted | {source(index, hit.id) for hit in summary.hits}))
            titles = tuple(hit.title for hit in summary.hits)
            run.passage_texts.extend(f"{hit.title}\n{hit.text}" for hit in summary.hits)
            private = run.holds_private or run.question_derived(f"{summary.search.entity}\n{summary.text}")
            fact = Fact(
                summary=summary.text,
                question=run.question,
                sub_query="; ".join(summary.search.keywords),
                passage_ids=ids,
                passage_titles=titles,
                model=summary.completion.model,
                created_at=now,
                trace_id=context.recorder.trace_id,
                lineage=lineage,
                key=caller.key,
                subject=caller.subject,
                owner=caller.owner,
                private=private,
                readers=owner_readers(caller.owner) if private else None,
            )
            run.lineage.update(lineage)
            section = run.sections[summary.search.key]
            section.facts.append(fact)
            section.unsaved.append(fact)
            for hit in summary.hits:
                run.cite((hit.id,), (hit.title,), hit.score)

    def _learn_titles(self, run: RunOutline, links: Sequence[Link]) -> None:
        """Add the titles of linked passages the run read to the entities the identifier is told of (where
        :attr:`link_entities`)."""
        if not self.link_entities:
            return
        for link in links:
            if link.name not in run.titles:
                run.titles.append(link.name)

    async def _final(
        self, context: RunContext, run: RunOutline, stop: str, iterations: int
    ) -> tuple[str, Sequence[Citation]]:
        prompt = answer_prompt(run.question, run.render(), run.thoughts, run.passages)
        entities = [s.entity.name for s in run.sections.values()]
        details = {"stop": stop, "iterations": iterations, "entities": entities}
        answer = await final_answer(context, prompt, depth=iterations, decided_by=stop, details=details)
        return answer, tuple(run.citations.values())


def unsearched(
    context: RunContext, searches: Sequence[EntitySearch], searched: set[tuple[str, str]], depth: int
) -> list[EntitySearch]:
    """Return the searches less every keyword already searched for its entity in this run (recorded as a ``repeat`` step
    when any is dropped); the kept keywords are added to ``searched``."""
    kept: list[EntitySearch] = []
    repeated: list[str] = []
    now: set[tuple[str, str]] = set()
    for search in searches:
        fresh = []
        for keyword in search.keywords:
            key = (search.key, normalise_query(keyword))
            if key in searched:
                repeated.append(keyword)
            elif key not in now:
                now.add(key)
                fresh.append(keyword)
        if fresh:
            kept.append(replace(search, keywords=tuple(fresh)))
    searched.update(now)
    if repeated:
        context.recorder.add(
            Step(
                kind="retrieve",
                depth=depth,
                queries=tuple(repeated),
                output=f"{len(repeated)} keyword(s) already searched in this question: not searched again",
                decision="repeat",
                decided_by="repeat",
            )
        )
    return kept
