"""``hopsearch ask QUESTION``: answer one question with a strategy, show the answer and its trace."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

import click
from rich.console import Console

from hopsearch.cli.filters import filter_clauses, filter_options
from hopsearch.cli.render import answer_text, ask_head, steps_table, totals_lines
from hopsearch.service.errors import HopsearchError
from hopsearch.service.runtime import STRATEGIES, Runtime
from hopsearch.service.settings import Settings, load_settings
from hopsearch.service.strategies import AskOptions
from hopsearch.service.strategies.base import Answer
from hopsearch.service.strategies.deeprag import DEMONSTRATIONS
from hopsearch.service.types import RetrievalMode


async def ask_question(
    settings: Settings,
    question: str,
    strategy_name: str,
    options: AskOptions,
    *,
    index: str | None = None,
    filters: Sequence[Mapping[str, Any]] = (),
    retrieval_mode: str | None = None,
) -> Answer:
    """Answer from the passages index or alias ``index`` (default: the settings' alias) with the
    configured LLM. A passages index that does not exist is an error; nothing is created for it (the
    outlines and traces indices under the prefix are, where missing). ``retrieval_mode`` None: the
    runtime's default (:meth:`Runtime.retrieval_mode`)."""
    async with await Runtime.open(settings, passages=index, filters=filters) as runtime:
        await runtime.store.require_passages(runtime.retriever.index)
        await runtime.store.ensure_side_indices()
        if retrieval_mode is None:
            options = replace(options, retrieval_mode=await runtime.retrieval_mode(strategy_name))
        return await runtime.strategy(strategy_name).answer(question, options)


@click.command("ask")
@click.argument("question")
@click.option("--strategy", type=click.Choice(sorted(STRATEGIES)), default="deeprag", show_default=True)
@click.option("--index", default=None, help="Passages index or alias to answer from (default: <prefix>-passages).")
@click.option("--prefix", default=None, help="Index prefix: passages alias, outlines and traces under it.")
@click.option("--mode", type=click.Choice(["model", "always", "never"]), default="model", show_default=True)
@click.option("--depth", type=int, default=10, show_default=True, help="DeepRAG depth (6 for HotpotQA).")
@click.option("-k", "k", type=int, default=None, help="Passages per retrieval (deeprag 3, single 5).")
@click.option("--few-shot", is_flag=True, help="Put worked DeepRAG examples before the question.")
@click.option(
    "--retrieval-mode",
    type=click.Choice(["bm25", "dense", "hybrid"]),
    default=None,
    help="Retrieval mode of the strategy (default: the retrieval_mode setting where set, else hybrid, bm25 "
    "for dualrag, where the index has vectors).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the trace document as JSON.")
@filter_options
def ask(
    question: str,
    strategy: str,
    index: str | None,
    prefix: str | None,
    mode: str,
    depth: int,
    k: int | None,
    few_shot: bool,
    retrieval_mode: str | None,
    as_json: bool,
    sources: tuple[str, ...],
    filters: tuple[str, ...],
) -> None:
    """Answer QUESTION and show the answer, its citations and the step trace."""
    settings = load_settings(**({"index_prefix": prefix} if prefix else {}))
    options = AskOptions(
        mode=mode,  # type: ignore[arg-type]
        max_depth=depth,
        k=k or (5 if strategy == "single" else 3),
        demonstrations=DEMONSTRATIONS if few_shot else "",
        retrieval_mode=cast(RetrievalMode, retrieval_mode or "bm25"),
    )
    try:
        answer = asyncio.run(
            ask_question(
                settings,
                question,
                strategy,
                options,
                index=index,
                filters=filter_clauses(sources, filters),
                retrieval_mode=retrieval_mode,
            )
        )
    except HopsearchError as exc:
        raise click.ClickException(str(exc)) from exc
    document = answer.trace.to_document()
    if as_json:
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        console = Console()
        cited = [(c.id, c.title, c.score) for c in answer.citations]
        for line in ask_head(question, answer_text(answer.text), cited, console.width):
            click.echo(line)
        console.print(steps_table(document, console.width))
        stored_in = settings.traces_index if answer.trace_not_stored is None else None
        for line in totals_lines(document, stored_in, console.width):
            click.echo(line)
    if answer.trace_not_stored is not None:
        click.echo(f"warning: {answer.trace_not_stored}", err=True)
    if answer.error is not None:
        raise click.ClickException(f"{type(answer.error).__name__}: {answer.error}")
