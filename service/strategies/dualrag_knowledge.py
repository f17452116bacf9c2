"""DualRAG's knowledge aggregation (pKA) for one step: search, merge, rerank, summarise.

- :func:`gather`: every keyword of every entity in ONE ``search_many`` call (one ``_msearch`` round trip
  on Elasticsearch; a second with a hop), each entity's lists merged without duplicates (RRF, top 50);
  with a hop, the links that brought linked passages in.
- :func:`rerank`: each entity's candidates ordered by embedding similarity to the entity name and
  cut to 10 (one embedding batch for the whole step); without an embedder the merged BM25 order.
- :func:`summarize`: the Knowledge Summarizer for each entity, concurrently (``asyncio.gather``);
  a summary that is exactly "None" is dropped (:func:`~.dualrag_prompts.is_none`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hopsearch.service.llm import Completion
from hopsearch.service.retrieval import cosine
from hopsearch.service.retrieval.fusion import rrf_groups, split
from hopsearch.service.strategies.base import RunContext
from hopsearch.service.strategies.dualrag_prompts import is_echo, is_none, summarizer_prompt
from hopsearch.service.strategies.steps import ask_text, text_step
from hopsearch.service.types import (
    Embedder,
    FusingRetriever,
    Hit,
    Link,
    QueryEmbedder,
    RetrievalMode,
    RetrievalQuery,
    Retriever,
)

RETRIEVE_K = 50
RERANK_K = 10
SUMMARY_TOKENS = 160


@dataclass(frozen=True, slots=True)
class EntitySearch:
    """The searches of one entity in one step."""

    key: str
    entity: str
    keywords: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Summary:
    """The Knowledge Summarizer's reply for one entity and the passages it read."""

    search: EntitySearch
    hits: tuple[Hit, ...]
    text: str
    dropped: bool
    completion: Completion


def queries_of(searches: Sequence[EntitySearch], mode: RetrievalMode, k: int, hops: int = 0) -> list[RetrievalQuery]:
    return [RetrievalQuery(keyword, k=k, mode=mode, hops=hops) for s in searches for keyword in s.keywords]


@dataclass(frozen=True, slots=True)
class Candidates:
    """Each entity's candidates (by entity key) and, with a hop, the links that brought linked passages in."""

    hits: dict[str, list[Hit]]
    links: dict[str, tuple[Link, ...]]


async def gather(
    retriever: Retriever,
    searches: Sequence[EntitySearch],
    *,
    mode: RetrievalMode = "bm25",
    k: int = RETRIEVE_K,
    hops: int = 0,
) -> Candidates:
    """Each entity's candidates: all keywords of all entities in ONE round trip (two with a hop), each
    entity's result lists fused without duplicates (RRF) and cut to ``k``; fused by the retriever where it
    can without a hop (:class:`~hopsearch.service.types.FusingRetriever`: only the kept hits are built).
    With a hop, each entity's links whose passage is among its candidates."""
    groups = [queries_of([search], mode, k, hops) for search in searches]
    if isinstance(retriever, FusingRetriever) and not hops:
        fused = await retriever.search_fused(groups, k)
        return Candidates({s.key: hits for s, hits in zip(searches, fused, strict=True)}, {})
    results = await retriever.search_many([query for group in groups for query in group])
    lengths = [len(group) for group in groups]
    fused = rrf_groups(lengths, [result.hits for result in results], size=k)
    linked = [[link for result in group for link in result.links] for group in split(lengths, results)]
    hits = {s.key: found for s, found in zip(searches, fused, strict=True)}
    links: dict[str, tuple[Link, ...]] = {}
    for search, found, named in zip(searches, fused, linked, strict=True):
        ids = {hit.id for hit in found}
        links[search.key] = tuple(link for link in named if link.passage in ids)
    return Candidates(hits, links)


def _passage_text(hit: Hit) -> str:
    return f"{hit.title}. {hit.text}"[:2000]


async def rerank(
    embedder: Embedder | None,
    searches: Sequence[EntitySearch],
    candidates: Mapping[str, Sequence[Hit]],
    *,
    top: int = RERANK_K,
) -> dict[str, list[Hit]]:
    """Each entity's candidates by cosine similarity to its name, cut to ``top`` (one embedding
    batch); without an embedder, the merged order cut to ``top``."""
    if embedder is None:
        return {key: list(hits[:top]) for key, hits in candidates.items()}
    names = {search.key: search.entity for search in searches}
    passages: dict[str, Hit] = {}
    for hits in candidates.values():
        for hit in hits:
            passages.setdefault(hit.id, hit)
    keys = list(candidates)
    queries = [names.get(key, key) for key in keys]
    texts = [_passage_text(hit) for hit in passages.values()]
    if isinstance(embedder, QueryEmbedder):  # e5: the names are queries, the passages passages
        vectors = await embedder.embed_queries(queries) + await embedder.embed(texts)
    else:
        vectors = await embedder.embed(queries + texts)
    entity_vectors = dict(zip(keys, vectors[: len(keys)], strict=True))
    passage_vectors = dict(zip(passages, vectors[len(keys) :], strict=True))
    ranked: dict[str, list[Hit]] = {}
    for key, hits in candidates.items():
        scored = sorted(
            hits, key=lambda hit: -cosine(entity_vectors[key], passage_vectors[hit.id])
        )  # stable: ties keep the merged order
        ranked[key] = scored[:top]
    return ranked


async def summarize(
    context: RunContext,
    question: str,
    outline: str,
    thoughts: Sequence[str],
    jobs: Sequence[tuple[EntitySearch, Sequence[Hit]]],
    *,
    depth: int = 0,
) -> list[Summary]:
    """Run the Knowledge Summarizer for each (entity, new passages), concurrently; one step each, in the order of
    ``jobs``. Summaries that are exactly "None", or that echo the prompt (``echo`` in the step:
    :func:`~.dualrag_prompts.is_echo`), come back with ``dropped`` set."""
    if not jobs:
        return []
    context.check_llm_budget(len(jobs))

    async def one(search: EntitySearch, hits: Sequence[Hit]) -> tuple[str, Completion]:
        prompt = summarizer_prompt(question, search.entity, outline, thoughts, hits)
        done = await ask_text(context, prompt, max_tokens=SUMMARY_TOKENS)
        return prompt, done

    started = time.monotonic()
    replies = await asyncio.gather(*(one(search, hits) for search, hits in jobs))
    wall = round((time.monotonic() - started) * 1000, 3)
    out: list[Summary] = []
    for (search, hits), (prompt, done) in zip(jobs, replies, strict=True):
        text = " ".join(done.text.split())
        echo = not is_none(text) and is_echo(text, question)
        dropped = echo or is_none(text)
        context.recorder.add(
            text_step(
                "summarize",
                done,
                prompt,
                depth=depth,
                queries=(search.entity,),
                hit_ids=tuple(hit.id for hit in hits),
                details={
                    "entity": search.entity,
                    "dropped": dropped,
                    "echo": echo,
                    "concurrent": len(jobs),
                    "wall_ms": wall,
                },
            )
        )
        out.append(Summary(search, tuple(hits), text, dropped, done))
    return out
