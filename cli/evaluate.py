"""``hopsearch eval [answers] QUESTIONS``: run a strategy over a benchmark question file and score it;
``hopsearch eval retrieval QUESTIONS``: recall of the supporting paragraphs (:mod:`.eval_retrieval`)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from hopsearch.cli.eval_retrieval import retrieval
from hopsearch.cli.filters import filter_clauses, filter_options
from hopsearch.cli.options import ask_options, caller_options, cli_caller
from hopsearch.cli.render import echo_json
from hopsearch.loaders.api import ensure_qa_contexts
from hopsearch.loaders.config import LoadConfig
from hopsearch.loaders.questions import QARecord, read_questions
from hopsearch.service.access import Caller
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.config.settings import load_settings
from hopsearch.service.errors import ConfigError, HopsearchError
from hopsearch.service.evaluation.documents import file_passages
from hopsearch.service.evaluation.runner import Ask, EvalItem, EvalRow, run_eval, summarize
from hopsearch.service.requests import CLI_ASK, RetrievalPolicy
from hopsearch.service.strategies import Answer, depth_for
from hopsearch.service.strategies.deeprag import demonstrations_for
from hopsearch.service.types import RetrievalMode

COLUMNS = ("n", "em", "f1", "acc", "retrievals", "llm_calls", "tokens_in", "tokens_out", "wall_s", "errors")


def summary_table(title: str, summary: dict[str, dict[str, float]]) -> Table:
    table = Table(title=title)
    table.add_column("type")
    for column in COLUMNS:
        table.add_column(column, justify="right")
    for name in ["all", *sorted(k for k in summary if k != "all")]:
        row = summary[name]
        cells = [f"{int(row[c])}" if c in ("n", "errors") else f"{row[c]:.3f}" for c in COLUMNS]
        table.add_row(name, *cells)
    return table


@dataclass(frozen=True, slots=True)
class EvalJob:
    path: Path
    strategy: str
    limit: int | None
    index: str | None
    prefix: str | None
    concurrency: int
    corpus_from_context: bool
    mode: str
    few_shot: bool
    out: Path
    filters: tuple[dict[str, Any], ...] = ()
    retrieval_mode: str | None = None
    key: str | None = None
    principals: tuple[str, ...] = ()
    hops: int | None = None
    seed: bool | None = None


async def _run(job: EvalJob, console: Console) -> dict[str, dict[str, float]]:
    records = read_questions(job.path, limit=job.limit)
    settings = load_settings(**({"index_prefix": job.prefix} if job.prefix else {}))
    if job.corpus_from_context and job.index not in (None, settings.passages_alias):
        raise ConfigError(
            f"--corpus-from-context loads into the passages alias [{settings.passages_alias}], not "
            f"[{job.index}]: use --prefix to choose where"
        )
    async with await Runtime.open(settings) as runtime:
        if job.corpus_from_context:
            await _load_contexts(runtime, job, records, console)
        caller = await cli_caller(runtime.store, job.key, job.principals)
        ask = _asker(runtime, job, caller, records[0].dataset if records else "")
        index = job.index or settings.passages_alias
        await runtime.store.require_passages(index)
        items = await _items(runtime, index, records)
        rows = await _evaluate(job, console, ask, items)
    return summarize(rows)


async def _load_contexts(runtime: Runtime, job: EvalJob, records: list[QARecord], console: Console) -> None:
    """``--corpus-from-context``: the questions' own context passages, loaded where missing."""
    report = await ensure_qa_contexts(
        runtime.store, job.path, records, embedder=runtime.embedder, config=LoadConfig.of(runtime.settings)
    )
    present = int(report.extra["already_indexed"])
    console.print(
        f"corpus: indexed {report.indexed - present} context passages ({present} already present; "
        f"{report.rejected} rejected → {report.dead_letter})"
    )


def _asker(runtime: Runtime, job: EvalJob, caller: Caller, dataset: str) -> Ask:
    """One question → its answer, through the ask use case with the job's options."""

    async def ask(question: str) -> Answer:
        request = await usecases.ask_request(
            runtime,
            question,
            caller=caller,
            strategy=job.strategy,
            index=job.index,
            filters=job.filters,
            mode=cast(RetrievalPolicy, job.mode),
            max_depth=depth_for(dataset),
            demonstrations=demonstrations_for(question) if job.few_shot else "",
            retrieval_mode=cast(RetrievalMode | None, job.retrieval_mode),
            hops=job.hops,
            seed=job.seed,
            fields=CLI_ASK,
        )
        return await usecases.ask(runtime, request)

    return ask


async def _items(runtime: Runtime, index: str, records: list[QARecord]) -> list[EvalItem]:
    """Return the questions to evaluate; a docs set's supporting documents as evidence by their passages."""
    items = [EvalItem(r.id, r.question, r.answers, r.type, r.supporting) for r in records]
    if any(r.dataset == "docs" for r in records):  # supporting documents: evidence by their passages
        found = await file_passages(runtime.store, index, [n for r in records for n in r.supporting])
        items = [
            replace(item, gold_files=tuple(found[n] for n in r.supporting)) if r.dataset == "docs" else item
            for item, r in zip(items, records, strict=True)
        ]
    return items


async def _evaluate(job: EvalJob, console: Console, ask: Ask, items: list[EvalItem]) -> list[EvalRow]:
    """Every item through ``ask``, each row written to ``job.out`` as it comes, with a progress bar."""
    out = job.out
    out.parent.mkdir(parents=True, exist_ok=True)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with out.open("w", encoding="utf-8") as sink, Progress(*columns, console=console) as progress:
        task = progress.add_task(f"{job.strategy} on {job.path.name}", total=len(items))

        def on_row(row: EvalRow) -> None:
            sink.write(json.dumps(row.to_dict(), ensure_ascii=False) + "\n")
            sink.flush()
            progress.advance(task)

        return await run_eval(ask, items, concurrency=job.concurrency, on_row=on_row)


class DefaultGroup(click.Group):
    """A group whose first argument, when it names no subcommand, goes to ``answers`` (so the older
    ``hopsearch eval QUESTIONS`` keeps working)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["answers", *args]
        return super().parse_args(ctx, args)


@click.group("eval", cls=DefaultGroup)
def evaluate() -> None:
    """Score answers (`eval [answers] QUESTIONS`) or retrieval (`eval retrieval QUESTIONS`)."""


@evaluate.command("answers")
@click.argument("questions", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--limit", type=int, default=None, help="Only the first N questions.")
@click.option("--concurrency", type=int, default=4, show_default=True, help="Questions answered at once.")
@click.option("--corpus-from-context", is_flag=True, help="Index the questions' context paragraphs first.")
@click.option(
    "--few-shot", is_flag=True, help="DeepRAG: a worked example of its format, in each question's language, first."
)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Per-question JSONL.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@ask_options
@filter_options
@caller_options
def answers(
    questions: Path,
    strategy: str,
    limit: int | None,
    index: str | None,
    prefix: str | None,
    concurrency: int,
    corpus_from_context: bool,
    mode: str,
    few_shot: bool,
    out: Path | None,
    retrieval_mode: str | None,
    hops: int | None,
    seed: bool | None,
    as_json: bool,
    sources: tuple[str, ...],
    filters: tuple[str, ...],
    key: str | None,
    principals: tuple[str, ...],
) -> None:
    """Run STRATEGY over a HotpotQA / 2WikiMultihopQA / MuSiQue question file; print EM, F1, Acc,
    retrievals, LLM calls, tokens and wall time, overall and per question type."""
    console = Console(stderr=as_json)
    target = out or Path(f"eval-{strategy}-{questions.stem}.jsonl")
    try:
        job = EvalJob(
            questions,
            strategy,
            limit,
            index,
            prefix,
            concurrency,
            corpus_from_context,
            mode,
            few_shot,
            target,
            tuple(filter_clauses(sources, filters)),
            retrieval_mode,
            key,
            principals,
            hops,
            seed,
        )
        summary = asyncio.run(_run(job, console))
    except HopsearchError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        echo_json(summary)
    else:
        console.print(summary_table(f"{strategy} on {questions.name} ({mode})", summary))
        console.print(f"per-question rows: {target}")
    if summary.get("all", {}).get("errors", 0) == summary.get("all", {}).get("n", 0) > 0:
        raise SystemExit(1)


evaluate.add_command(retrieval)
