"""Model-free retrieval quality: recall@k and all@k of a question's supporting paragraphs.

- recall@k: the share of a question's supporting paragraphs (matched by title; for questions over
  indexed documents, the supporting documents matched by the file name of each hit's ``path``) among
  its top k hits, averaged over questions;
- all@k: the share of questions with every supporting paragraph in the top k.

Both overall, per question type and per number of gold paragraphs a question needs. A retrieval
"mode" here is a spec string: ``bm25``, ``dense``, ``hybrid`` (client RRF), ``hybrid:bool``,
``hybrid:es_rrf``, each optionally ``+rerank``. :func:`trace_recall` scores the passages a strategy
retrieved over a whole question, from its trace.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Literal, cast

from hopsearch.service.errors import ConfigError
from hopsearch.service.evaluation.documents import files_found
from hopsearch.service.requests import Query
from hopsearch.service.types import Fusion, Hit, RetrievalMode, SearchResult

FUSIONS = ("rrf", "bool", "es_rrf")
#: The search use case over the evaluated index (the front end builds the request of each batch).
Search = Callable[[Sequence[Query]], Awaitable[list[SearchResult]]]


@dataclass(frozen=True, slots=True)
class GoldItem:
    """A question with its supporting paragraphs: titles (for hits) and passage ids (for traces)."""

    id: str
    question: str
    type: str
    gold_titles: frozenset[str]
    gold_ids: frozenset[str] = frozenset()
    #: What ``gold_titles`` names: hits' titles, or the file names of the documents hits come from.
    by: Literal["title", "file"] = "title"
    #: For ``by="file"``: each supporting document's passage ids (:func:`.documents.file_passages`), what
    #: a trace's passages are scored against.
    gold_files: tuple[frozenset[str], ...] = ()

    def names(self, hits: Sequence[Hit]) -> list[str]:
        """Return what of each hit is matched against ``gold_titles``."""
        if self.by == "file":
            return [PurePath(str(hit.source.get("path") or "")).name for hit in hits]
        return [hit.title for hit in hits]


@dataclass(frozen=True, slots=True)
class Scored:
    item: GoldItem
    recall: float
    complete: bool


def query_of(spec: str, text: str, k: int, hops: int = 0) -> Query:
    """Return the retrieval query of a mode spec (``hybrid:bool+rerank``); a bad spec is a :class:`ConfigError`."""
    base, _, extra = spec.partition("+")
    if extra not in ("", "rerank"):
        raise ConfigError(f"mode {spec!r}: only '+rerank' may follow a mode")
    mode, _, fusion = base.partition(":")
    if mode not in ("bm25", "dense", "hybrid") or (fusion and (mode != "hybrid" or fusion not in FUSIONS)):
        raise ConfigError(f"mode {spec!r}: one of bm25, dense, hybrid, hybrid:rrf, hybrid:bool, hybrid:es_rrf")
    return Query(
        text,
        k=k,
        mode=cast(RetrievalMode, mode),
        fusion=cast(Fusion, fusion or "rrf"),
        rerank=extra == "rerank",
        hops=hops,
    )


def score_titles(item: GoldItem, titles: Sequence[str]) -> Scored:
    found = item.gold_titles & set(titles)
    n = len(item.gold_titles)
    return Scored(item, len(found) / n if n else 0.0, n > 0 and len(found) == n)


def score_ids(item: GoldItem, ids: Iterable[str]) -> Scored:
    if item.by == "file":
        share = files_found(item.gold_files, ids) or 0.0
        return Scored(item, share, share == 1.0)
    found = item.gold_ids & set(ids)
    n = len(item.gold_ids)
    return Scored(item, len(found) / n if n else 0.0, n > 0 and len(found) == n)


def summarize(scored: Sequence[Scored], label: str) -> dict[str, Any]:
    """``{recall@<label>, all@<label>, n, by_type: {...}, by_gold: {"2": {...}}}``."""

    def block(rows: Sequence[Scored]) -> dict[str, Any]:
        n = len(rows)
        return {
            f"recall@{label}": round(sum(r.recall for r in rows) / n, 4) if n else 0.0,
            f"all@{label}": round(sum(r.complete for r in rows) / n, 4) if n else 0.0,
            "n": n,
        }

    by_type: dict[str, list[Scored]] = defaultdict(list)
    by_gold: dict[str, list[Scored]] = defaultdict(list)
    for row in scored:
        by_type[row.item.type or "-"].append(row)
        by_gold[str(len(row.item.gold_titles))].append(row)
    out = block(scored)
    out["by_type"] = {name: block(rows) for name, rows in sorted(by_type.items())}
    out["by_gold"] = {name: block(rows) for name, rows in sorted(by_gold.items(), key=lambda kv: int(kv[0]))}
    return out


def row_name(spec: str, hops: int) -> str:
    """Return a report's row: the mode spec, with `` hops=N`` where it hops."""
    return f"{spec} hops={hops}" if hops else spec


async def evaluate_mode(
    search: Search, items: Sequence[GoldItem], spec: str, k: int, *, batch: int = 32, hops: int = 0
) -> dict[str, Any]:
    """recall@k and all@k of one mode spec over ``items`` (``batch`` questions per ``_msearch``) with
    ``hops``, with the fusion that actually ran (and why not the one asked for) and the reranker when one
    ran; ``linked``: the share of questions whose top k holds a passage the hop brought in."""
    scored: list[Scored] = []
    fusions: Counter[str] = Counter()
    notes: Counter[str] = Counter()
    rerankers: set[str] = set()
    linked = 0
    for start in range(0, len(items), batch):
        chunk = items[start : start + batch]
        results = await search([query_of(spec, item.question, k, hops) for item in chunk])
        for item, result in zip(chunk, results, strict=True):
            scored.append(score_titles(item, item.names(result.hits[:k])))
            linked += bool(result.links)
            fusions[result.fusion] += 1
            if result.fusion_note:
                notes[result.fusion_note] += 1
            if result.reranked_by:
                rerankers.add(result.reranked_by)
    out = summarize(scored, str(k))
    out["fusion"] = fusions.most_common(1)[0][0] if fusions else "none"
    if notes:
        out["fusion_note"] = notes.most_common(1)[0][0]
    if rerankers:
        out["reranked_by"] = sorted(rerankers)[0]
    if hops:
        out["hops"] = hops
        out["linked"] = round(linked / len(scored), 4) if scored else 0.0
    return out


def trace_hit_ids(trace: Mapping[str, Any]) -> list[str]:
    """Every passage id the trace's retrieval steps returned, first occurrence kept."""
    seen: dict[str, None] = {}
    for step in trace.get("steps") or []:
        if step.get("kind") == "retrieve":
            for hit_id in step.get("hit_ids") or []:
                seen.setdefault(str(hit_id), None)
    return list(seen)


def trace_recall(items: Sequence[GoldItem], traces: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Return the same numbers for the passages strategies retrieved over whole questions: ``traces`` maps a
    question id to its trace document. ``passages`` is the mean number of distinct passages retrieved."""
    scored: list[Scored] = []
    counts: list[int] = []
    for item in items:
        trace = traces.get(item.id)
        if trace is None:
            continue
        ids = trace_hit_ids(trace)
        counts.append(len(ids))
        scored.append(score_ids(item, ids))
    out = summarize(scored, "trace")
    out["passages"] = round(sum(counts) / len(counts), 2) if counts else 0.0
    return out
