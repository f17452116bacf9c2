"""``hopsearch ask QUESTION``: answer one question with a strategy, show the answer and its trace."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import click
from rich.console import Console

from hopsearch.cli.filters import filter_clauses, filter_options
from hopsearch.cli.options import ask_options, caller_options, cli_caller
from hopsearch.cli.render import answer_text, ask_head, echo_json, steps_table, totals_lines
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.config.settings import Settings, load_settings
from hopsearch.service.errors import HopsearchError, RequestInvalid
from hopsearch.service.requests import CLI_ASK, DEFAULT_DEPTH
from hopsearch.service.strategies import Answer
from hopsearch.service.strategies.deeprag import demonstrations_for


async def ask_question(
    settings: Settings,
    question: str,
    strategy_name: str,
    *,
    index: str | None = None,
    filters: Sequence[Mapping[str, Any]] = (),
    key: str | None = None,
    principals: Sequence[str] = (),
    **given: Any,
) -> Answer:
    """Answer from the passages index or alias ``index`` (default: the settings' alias) with the
    configured LLM, as an admin (or as the stored key ``key``, or a non-admin of ``principals``). A passages
    index that does not exist is an error; nothing is created for it (the outlines and traces indices under
    the prefix are, where missing). ``given``: the request's other parts as
    :func:`~hopsearch.service.app.usecases.ask_request` takes them (None: its default)."""
    async with await Runtime.open(settings) as runtime:
        request = await usecases.ask_request(
            runtime,
            question,
            caller=await cli_caller(runtime.store, key, principals),
            strategy=strategy_name,
            index=index,
            filters=filters,
            fields=CLI_ASK,
            **given,
        )
        return await usecases.ask(runtime, request)


@click.command("ask")
@click.argument("question")
@click.option("--depth", type=int, default=DEFAULT_DEPTH, show_default=True, help="DeepRAG depth (6 for HotpotQA).")
@click.option("-k", "k", type=int, default=None, help="Passages per retrieval (deeprag 3, single 5).")
@click.option(
    "--few-shot", is_flag=True, help="DeepRAG: a worked example of its format, in the question's language, first."
)
@click.option("--json", "as_json", is_flag=True, help="Print the trace document as JSON.")
@ask_options
@filter_options
@caller_options
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
    hops: int | None,
    seed: bool | None,
    as_json: bool,
    sources: tuple[str, ...],
    filters: tuple[str, ...],
    key: str | None,
    principals: tuple[str, ...],
) -> None:
    """Answer QUESTION and show the answer, its citations and the step trace."""
    settings = load_settings(**({"index_prefix": prefix} if prefix else {}))
    try:
        answer = asyncio.run(
            ask_question(
                settings,
                question,
                strategy,
                index=index,
                filters=filter_clauses(sources, filters),
                mode=mode,
                max_depth=depth,
                k=k,
                demonstrations=demonstrations_for(question) if few_shot else "",
                retrieval_mode=retrieval_mode,
                hops=hops,
                seed=seed,
                key=key,
                principals=principals,
            )
        )
    except RequestInvalid as exc:  # a blank question…: the caller's mistake, exit 2
        raise click.UsageError(str(exc)) from exc
    except HopsearchError as exc:
        raise click.ClickException(str(exc)) from exc
    document = answer.trace.to_document()
    if as_json:
        echo_json(document)
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
