"""Replay a strategy's retrieve steps in each retrieval mode, without the LLM: which mode finds more of the
supporting paragraphs for the very same queries.

    .venv/bin/python benchmarks/replay_modes.py QUESTIONS ROWS [ROWS ...] --prefix P [--prefix P ...]
        [--mode bm25 --mode hybrid]

ROWS: the rows of ``hopsearch eval answers --out`` (one file per run; ``--prefix`` names each run's index
prefix, in the same order: its traces and passages). For every question the trace's retrieve steps are
run again in each mode with the product's own code — DualRAG's step as DualRAG runs it (each entity's
keywords fused with ``gather``, reranked with ``rerank``), any other step as its queries at
the step's k — and the titles found are matched against the question's supporting paragraphs
(2Wiki / HotpotQA ``supporting_facts``). Prints evidence recall per run and mode. Comparing modes on the
same queries takes the model's run-to-run variation out: a second run of the same code writes other
keywords (llama-cpp-python's sampling depends on what it evaluated before), and moves a single run's
evidence recall by about 0.01-0.03 on 100 questions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from hopsearch.loaders.questions import read_questions
from hopsearch.service.access import ADMIN, Scope
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.config.settings import load_settings
from hopsearch.service.strategies.dualrag_knowledge import EntitySearch, gather, rerank
from hopsearch.service.types import RetrievalMode, RetrievalQuery


def key(title: str) -> str:
    return " ".join(title.casefold().split())


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


async def replay_run(questions: Path, rows: Path, prefix: str, modes: Sequence[str]) -> dict[str, float]:
    supporting = {r.id: {key(t) for t in r.supporting if t.strip()} for r in read_questions(questions)}
    recalls: dict[str, list[float]] = {mode: [] for mode in modes}
    async with await Runtime.open(load_settings(index_prefix=prefix)) as runtime:
        for row in read_rows(rows):
            wanted = supporting.get(row["id"])
            if not wanted:
                continue
            trace = await runtime.store.get_document(runtime.settings.traces_index, row["trace_id"])
            steps: list[dict[str, Any]] = [
                s
                for s in (trace or {}).get("steps", [])
                if s["kind"] == "retrieve" and s.get("decision") != "repeat" and s.get("queries")
            ]
            for mode in modes:
                found: set[str] = set()
                for step in steps:
                    found |= await replay_step(runtime, step, cast(RetrievalMode, mode))
                recalls[mode].append(len(wanted & found) / len(wanted))
    return {mode: sum(values) / len(values) if values else float("nan") for mode, values in recalls.items()}


async def replay_step(runtime: Runtime, step: dict[str, Any], mode: RetrievalMode) -> set[str]:
    entities = (step.get("details") or {}).get("entities")
    if entities:  # a DualRAG step: each entity's keywords fused, reranked by the entity name
        searches = [EntitySearch(name, name, tuple(words)) for name, words in entities.items()]
        retriever = runtime.retriever.bind(Scope(runtime.settings.passages_alias, ADMIN))
        candidates = (await gather(retriever, searches, mode=mode)).hits
        ranked = await rerank(runtime.embedder, searches, candidates)
        return {key(hit.title) for hits in ranked.values() for hit in hits}
    queries = step["queries"]
    k = len(step.get("hit_ids") or ()) // len(queries) or 3  # the step's k; 3 (the default) where it found nothing
    scope = Scope(runtime.settings.passages_alias, ADMIN)
    results = await runtime.retriever.search_many(scope, [RetrievalQuery(q, k=k, mode=mode) for q in queries])
    return {key(hit.title) for result in results for hit in result.hits}


async def main(args: argparse.Namespace) -> None:
    if len(args.rows) != len(args.prefix):
        raise SystemExit("give one --prefix per ROWS file, in the same order")
    for rows, prefix in zip(args.rows, args.prefix, strict=True):
        recall = await replay_run(args.questions, rows, prefix, args.mode or ["bm25", "hybrid"])
        shown = "  ".join(f"{mode} {value:.3f}" for mode, value in recall.items())
        print(f"{rows.name} ({prefix}): evidence recall replayed: {shown}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("questions", type=Path)
    parser.add_argument("rows", type=Path, nargs="+")
    parser.add_argument("--prefix", action="append", required=True)
    parser.add_argument("--mode", action="append", choices=["bm25", "dense", "hybrid"])
    asyncio.run(main(parser.parse_args()))
