"""HyDE with query decomposition and Reciprocal Rank Fusion — Gao et al., "Precise Zero-Shot Dense
Retrieval without Relevance Labels" (ACL 2023) for the hypothetical passages; decomposition into
sub-queries as in Least-to-Most / Self-Ask; RRF from Cormack et al. (SIGIR 2009), k = 60.

The question is split into 1–3 self-contained sub-queries (a simple question stays one); for each,
the model writes a short hypothetical answer passage (concurrently). Each sub-query is searched twice
— the hypothetical passage by dense similarity (BM25 where no embedder is configured or the index
holds no vectors) and the sub-query itself by BM25 — all in ONE ``_msearch``; the lists are fused with RRF and the top k
passages go to one answer call. Decomposition and HyDE can each be switched off
(the constructor; the registry passes the ``hyde_decompose`` / ``hyde_hypothetical`` settings): without decomposition
the question is the only sub-query; without HyDE the sub-query is searched by itself.

Seeded (``AskOptions.seed``): the seed's passages (the question's own retrieval) come before the fused
ones in the answer's context. Every list carries the request's ``hops``.

Stopping rule: none to decide — a fixed pipeline of at most 1 decomposition call, 3 HyDE calls, one
retrieval round trip and one answer call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hopsearch.service.errors import NoVectors
from hopsearch.service.llm import Completion
from hopsearch.service.retrieval import RRF_K, rrf
from hopsearch.service.strategies.base import RecordedStrategy, RunContext, citations_of, links_detail, with_seed
from hopsearch.service.strategies.steps import (
    ask_json,
    ask_text,
    context_line,
    distinct_texts,
    final_answer,
    in_question_language,
    json_step,
    single_prompt,
    text_step,
)
from hopsearch.service.traces.recorder import Citation, Step
from hopsearch.service.types import RetrievalQuery

MAX_SUB_QUERIES = 3
LIST_K = 10
HYDE_TOKENS = 120

DECOMPOSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sub_queries": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_SUB_QUERIES,
            "items": {"type": "string", "maxLength": 200},
        }
    },
    "required": ["sub_queries"],
    "additionalProperties": False,
}


def decompose_prompt(question: str) -> str:
    return in_question_language(
        question,
        (
            "Split the question into the smallest set of self-contained sub-questions (1 to "
            f"{MAX_SUB_QUERIES}) that must be looked up to answer it. A simple question stays one "
            f"sub-question: itself.\n\nQuestion: {question}\n\n"
            "Reply with one JSON object with the key sub_queries: a list of strings."
        ),
    )


def hyde_prompt(sub_query: str) -> str:
    return in_question_language(
        sub_query,
        (
            "Write a short encyclopedia-style passage that answers this question (two or three sentences; "
            f"invent plausible details if you do not know them).\n\nQuestion: {sub_query}\nPassage:"
        ),
    )


def read_sub_queries(value: Mapping[str, Any], question: str) -> list[str]:
    """1–3 distinct sub-queries; the question itself when the model gave none."""
    return distinct_texts(value.get("sub_queries"))[:MAX_SUB_QUERIES] or [question]


@dataclass(eq=False, kw_only=True)
class HyDE(RecordedStrategy):
    """Decompose, write hypothetical passages, search (dense + BM25, one round trip), fuse, answer."""

    name = "hyde"
    # Seeded by default: unseeded it found less evidence than single with hops (first 20 shared 2Wiki
    # questions, hops 1: evidence recall 0.625 vs 0.975; seeded 0.975. README, Multi-hop retrieval).
    seed_default = True
    decompose: bool = True
    hypothetical: bool = True
    dense: bool = True

    async def _sub_queries(self, context: RunContext, question: str) -> list[str]:
        if not self.decompose:
            return [question]
        prompt = decompose_prompt(question)
        reply = await ask_json(context, "decompose", prompt, DECOMPOSE_SCHEMA, name="decomposer", depth=1)
        subs = read_sub_queries(reply.value, question)
        context.recorder.add(json_step("decompose", reply, prompt, name="decomposer", depth=1, queries=tuple(subs)))
        return subs

    async def _passages(self, context: RunContext, subs: Sequence[str]) -> list[str]:
        if not self.hypothetical:
            return list(subs)
        context.check_llm_budget(len(subs))
        prompts = [hyde_prompt(sub) for sub in subs]
        done: list[Completion] = await asyncio.gather(
            *(ask_text(context, prompt, max_tokens=HYDE_TOKENS) for prompt in prompts)
        )
        passages = []
        for sub, prompt, completion in zip(subs, prompts, done, strict=True):
            passage = " ".join(completion.text.split()) or sub
            passages.append(passage)
            context.recorder.add(text_step("hyde", completion, prompt, depth=1, queries=(sub,)))
        return passages

    def _queries(
        self, subs: Sequence[str], passages: Sequence[str], dense: bool = True, hops: int = 0
    ) -> list[RetrievalQuery]:
        """Each sub-query's lists (every one with the request's ``hops``)."""
        dense = dense and self.dense
        queries = []
        for sub, passage in zip(subs, passages, strict=True):
            if self.hypothetical:
                queries.append(RetrievalQuery(passage, k=LIST_K, mode="dense" if dense else "bm25", hops=hops))
            elif dense:
                queries.append(RetrievalQuery(sub, k=LIST_K, mode="dense", hops=hops))
            queries.append(RetrievalQuery(sub, k=LIST_K, mode="bm25", hops=hops))
        return queries

    async def _run(self, context: RunContext, question: str) -> tuple[str, Sequence[Citation]]:
        question = " ".join(question.split())
        subs = await self._sub_queries(context, question)
        passages = await self._passages(context, subs)
        hops = context.options.hops
        queries = self._queries(subs, passages, hops=hops)
        started = time.monotonic()
        try:
            results = await context.retriever.search_many(queries)  # ONE _msearch for every list
        except NoVectors:  # an index without vectors (an attached BM25-only one): its BM25 lists alone
            queries = self._queries(subs, passages, dense=False, hops=hops)
            results = await context.retriever.search_many(queries)
        fused = rrf([result.hits for result in results], k=RRF_K, size=context.options.k)
        links = links_detail([link for r in results for link in r.links], [hit.id for hit in fused])
        context.recorder.add(
            Step(
                kind="retrieve",
                depth=1,
                queries=tuple(query.text for query in queries),
                hit_ids=tuple(hit.id for hit in fused),
                output=f"{len(queries)} lists in one _msearch, fused with RRF (k={RRF_K})",
                latency_ms=round((time.monotonic() - started) * 1000, 3),
                retrievals=1,
                details={
                    "lists": [
                        {
                            "mode": r.mode,
                            "dense_method": r.dense_method,
                            "vector_index": r.vector_index,
                            "hit_ids": [h.id for h in r.hits],
                        }
                        for r in results
                    ],
                    "decompose": self.decompose,
                    "hypothetical": self.hypothetical,
                }
                | ({"links": links} if links else {}),
            )
        )
        hits = with_seed(context.seeded, fused)  # the seed's passages first, where the run is seeded
        prompt = single_prompt(question, context_line(hits))
        return await final_answer(context, prompt, depth=1, decided_by="hyde"), citations_of(hits)
