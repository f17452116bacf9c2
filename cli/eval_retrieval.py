"""``hopsearch eval retrieval QUESTIONS``: recall@k and all@k of the supporting paragraphs, per retrieval
mode (and fusion, and with the reranker where one is configured), per question type and per number of
gold paragraphs; ``--traces ROWS`` adds the passages strategies retrieved over whole questions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from hopsearch.cli.options import caller_options, cli_caller
from hopsearch.cli.render import echo_json
from hopsearch.loaders.api import ensure_qa_contexts
from hopsearch.loaders.config import LoadConfig
from hopsearch.loaders.questions import QARecord, read_questions
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.config.settings import Settings, load_settings
from hopsearch.service.errors import HopsearchError, IndexMissing, InputError
from hopsearch.service.evaluation.documents import file_passages
from hopsearch.service.evaluation.recall import GoldItem, evaluate_mode, query_of, row_name, trace_recall
from hopsearch.service.requests import CLI_SEARCH, Query
from hopsearch.service.types import SearchResult


def default_modes(settings: Settings) -> list[str]:
    modes = ["bm25"]
    if settings.embedder != "none":
        modes += ["dense", "hybrid", "hybrid:bool", "hybrid:es_rrf"]
    if settings.rerank_url:
        modes += ["bm25+rerank"] + (["hybrid+rerank"] if settings.embedder != "none" else [])
    return modes


def gold_items(records: list[QARecord]) -> list[GoldItem]:
    return [
        GoldItem(
            r.id, r.question, r.type, frozenset(r.supporting), r.gold_ids, by="file" if r.dataset == "docs" else "title"
        )
        for r in records
        if r.supporting
    ]


async def with_file_passages(runtime: Runtime, index: str, items: list[GoldItem]) -> list[GoldItem]:
    """``items`` over indexed documents with the passage ids of their supporting documents (for traces)."""
    found = await file_passages(runtime.store, index, [n for item in items for n in sorted(item.gold_titles)])
    return [
        replace(item, gold_files=tuple(found[n] for n in sorted(item.gold_titles))) if item.by == "file" else item
        for item in items
    ]


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Per-question rows of ``hopsearch eval answers --out``: question id and trace id."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            rows.append({"id": str(row["id"]), "trace_id": str(row["trace_id"])})
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise InputError(
                f"not a row of `hopsearch eval answers --out` ({exc})", source=str(path), position=number
            ) from exc
    return rows


async def _traces(runtime: Runtime, path: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    found: dict[str, dict[str, Any]] = {}
    strategies: set[str] = set()
    for row in read_rows(path):
        doc = await runtime.store.get_document(runtime.settings.traces_index, row["trace_id"])
        if doc is None:
            raise IndexMissing(
                f"trace {row['trace_id']} of question {row['id']} is not in {runtime.settings.traces_index}"
            )
        found[row["id"]] = doc
        strategies.add(str(doc.get("strategy", "?")))
    return "strategy:" + "+".join(sorted(strategies)), found


async def _run(
    path: Path,
    modes: list[str],
    k: int,
    limit: int | None,
    index: str | None,
    corpus: bool,
    rows: tuple[Path, ...],
    caller_as: tuple[str | None, tuple[str, ...]] = (None, ()),
    hops: tuple[int, ...] = (0,),
) -> dict[str, Any]:
    records = read_questions(path, limit=limit)
    items = gold_items(records)
    if not items:
        raise InputError(
            "no question has supporting_facts (or MuSiQue's is_supporting) to score against", source=str(path)
        )
    settings = load_settings(**({"index_prefix": index} if index else {}))
    modes = modes or default_modes(settings)
    for spec in modes:
        query_of(spec, "", k)  # a bad spec fails before any work
    report: dict[str, Any] = {}
    async with await Runtime.open(settings) as runtime:
        if corpus:
            loaded = await ensure_qa_contexts(
                runtime.store, path, records, embedder=runtime.embedder, config=LoadConfig.of(runtime.settings)
            )
            present = int(loaded.extra["already_indexed"])
            click.echo(
                f"corpus: indexed {loaded.indexed - present} context passages ({present} already present)", err=True
            )
        await runtime.store.require_passages(settings.passages_alias)
        caller = await cli_caller(runtime.store, *caller_as)

        async def search(queries: Sequence[Query]) -> list[SearchResult]:
            request = await usecases.search_request(runtime, queries, caller=caller, fields=CLI_SEARCH)
            return await usecases.search(runtime, request)

        for spec in modes:
            for n in hops:
                report[row_name(spec, n)] = await evaluate_mode(search, items, spec, k, hops=n)
        if rows and any(item.by == "file" for item in items):
            items = await with_file_passages(runtime, settings.passages_alias, items)
        for rows_path in rows:
            name, traces = await _traces(runtime, rows_path)
            report[name] = trace_recall(items, traces)
    return report


def _cell(block: dict[str, Any], metric: str) -> str:
    return f"{block[metric]:.3f}" if metric in block else ""


def table_rows(report: dict[str, Any], k: int) -> tuple[list[str], list[list[str]]]:
    types = sorted({t for block in report.values() for t in block["by_type"]})
    golds = sorted({g for block in report.values() for g in block["by_gold"]}, key=int)
    header = ["mode", "fusion", "recall", "all", *types, *(f"{g} gold" for g in golds)]
    lines = []
    for spec, block in report.items():
        label = "trace" if spec.startswith("strategy:") else str(k)
        fusion = block.get("fusion", "")
        if block.get("fusion_note"):
            fusion += " (fallback)"
        cells = [spec, fusion, _cell(block, f"recall@{label}"), _cell(block, f"all@{label}")]
        cells += [_cell(block["by_type"].get(t, {}), f"recall@{label}") for t in types]
        cells += [_cell(block["by_gold"].get(g, {}), f"recall@{label}") for g in golds]
        lines.append(cells)
    return header, lines


@click.command("retrieval")
@click.argument("questions", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--mode",
    "modes",
    multiple=True,
    help="bm25, dense, hybrid, hybrid:bool, hybrid:es_rrf, each +rerank "
    "(repeatable; default: every mode this setup can run).",
)
@click.option("-k", "k", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--limit", type=int, default=None, help="Only the first N questions.")
@click.option("--index", default=None, help="Index prefix (default: settings).")
@click.option("--corpus-from-context", is_flag=True, help="Index the questions' context paragraphs first.")
@click.option(
    "--traces",
    "rows",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Rows of `hopsearch eval answers --out`: score the passages each strategy retrieved (repeatable).",
)
@click.option(
    "--hops",
    "hops",
    multiple=True,
    type=click.IntRange(0, 1),
    help="Hops of each mode (repeatable: `--hops 0 --hops 1` gives both rows; default 0): 1 also follows the "
    "titles the question and the first hop name.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--markdown", is_flag=True, help="Print the table as Markdown.")
@caller_options
def retrieval(
    questions: Path,
    modes: tuple[str, ...],
    k: int,
    limit: int | None,
    index: str | None,
    corpus_from_context: bool,
    rows: tuple[Path, ...],
    hops: tuple[int, ...],
    as_json: bool,
    markdown: bool,
    key: str | None,
    principals: tuple[str, ...],
) -> None:
    """Model-free retrieval quality on QUESTIONS: recall@k (share of a question's supporting paragraphs,
    matched by title, in its top k) and all@k (share of questions with all of them), per mode, per
    question type and per number of gold paragraphs."""
    try:
        as_caller = (key, principals)
        report = asyncio.run(
            _run(questions, list(modes), k, limit, index, corpus_from_context, rows, as_caller, hops or (0,))
        )
    except HopsearchError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        echo_json(report)
        return
    header, lines = table_rows(report, k)
    if markdown:
        click.echo("| " + " | ".join(header) + " |")
        click.echo("|" + "---|" * len(header))
        for cells in lines:
            click.echo("| " + " | ".join(cells) + " |")
    else:
        table = Table(title=f"retrieval on {questions.name}: recall@{k} (per type and gold count), all@{k}")
        for column in header:
            table.add_column(column, justify="left" if column in ("mode", "fusion") else "right")
        for cells in lines:
            table.add_row(*cells)
        Console().print(table)
    for spec, block in report.items():
        if block.get("fusion_note"):
            click.echo(f"{spec}: {block['fusion_note']}")
