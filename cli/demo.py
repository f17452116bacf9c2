"""``hopsearch demo``: the main job on local defaults.

Brings up the local Elasticsearch node and the local LLM server (llama.cpp; vLLM with ``--engine
vllm``), indexes the bundled slice of 2WikiMultihopQA (its context paragraphs), asks one bundled
multi-hop question with the ``deeprag`` strategy and prints the answer, the retrieve/parametric
decisions and where to look next.
Re-running is fast and idempotent (running services are reused, indexed passages are skipped);
``--down`` stops what it started.
"""

from __future__ import annotations

import asyncio
import time
from importlib import resources
from pathlib import Path

import click
from rich.console import Console

from hopsearch.cli.es import node_spec
from hopsearch.cli.local import esnode, llm_server
from hopsearch.cli.render import print_answer
from hopsearch.loaders.api import ensure_qa_contexts
from hopsearch.loaders.config import LoadConfig
from hopsearch.loaders.questions import read_questions
from hopsearch.service.access import ADMIN
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.config.settings import Settings, load_settings, shown_url
from hopsearch.service.errors import HopsearchError
from hopsearch.service.requests import CLI_ASK
from hopsearch.service.strategies.deeprag import demonstrations_for

DEMO_DEPTH = 4
DEMO_QUESTION_ID = "1bac32280bdb11eba7f7acde48001122"  # the director of "Song Of The Gringo"


def sample_path() -> Path:
    return Path(str(resources.files("hopsearch.loaders").joinpath("data", "sample_2wiki.jsonl")))


def _local_es(settings: Settings) -> bool:
    return settings.es_url == [f"http://127.0.0.1:{settings.es_port}"]


def _local_llm(settings: Settings) -> bool:
    return settings.llm_base_url == [f"http://127.0.0.1:{settings.llm_port}/v1"]


ENGINE_NAMES = {"llamacpp": "llama.cpp", "vllm": "vLLM"}


def services_up(settings: Settings, console: Console, engine: llm_server.LocalEngine = "llamacpp") -> None:
    if _local_es(settings):
        spec = node_spec(settings)
        started = time.monotonic()
        console.print(f"[bold]1/4[/] Elasticsearch {spec.version} on {spec.url} ...", end=" ")
        info = esnode.start(spec)
        console.print(f"{info['status']} ({time.monotonic() - started:.1f} s)")
    else:
        console.print(f"[bold]1/4[/] Elasticsearch: using {', '.join(map(shown_url, settings.es_url))}")
    if _local_llm(settings):
        started = time.monotonic()
        console.print(f"[bold]2/4[/] {ENGINE_NAMES[engine]} server on port {settings.llm_port} ...")
        server = llm_server.start(settings, engine, echo=console.print)
        console.print(f"{server.model} ({time.monotonic() - started:.1f} s)")
    else:
        console.print(f"[bold]2/4[/] LLM: using {', '.join(map(shown_url, settings.llm_base_url))}")


async def ask_sample(settings: Settings, question_id: str, strategy: str, console: Console) -> dict[str, object]:
    records = read_questions(sample_path())
    chosen = next((r for r in records if r.id == question_id), records[0])
    async with await Runtime.open(settings, refresh_traces=True) as runtime:
        started = time.monotonic()
        report = await ensure_qa_contexts(
            runtime.store, sample_path(), embedder=runtime.embedder, config=LoadConfig.of(runtime.settings)
        )
        present = int(report.extra["already_indexed"])
        console.print(
            f"[bold]3/4[/] sample corpus: {report.indexed - present} passages indexed, {present} already there "
            f"({time.monotonic() - started:.1f} s) → {settings.passages_alias}"
        )
        console.print(f"[bold]4/4[/] asking with {strategy}: [italic]{chosen.question}[/]")
        # A base model this small needs a worked example of DeepRAG's format; a short depth keeps it quick.
        request = await usecases.ask_request(
            runtime,
            chosen.question,
            caller=ADMIN,
            strategy=strategy,
            demonstrations=demonstrations_for(chosen.question),
            max_depth=DEMO_DEPTH,
            fields=CLI_ASK,
        )
        answer = await usecases.ask(runtime, request)
        document = answer.trace.to_document()
    print_answer(console, document)
    console.print(f"gold answer (2WikiMultihopQA): {', '.join(chosen.answers)}")
    return document


@click.command("demo")
@click.option("--down", is_flag=True, help="Stop the local Elasticsearch and LLM server the demo started.")
@click.option("--strategy", default="deeprag", show_default=True, help="Strategy to answer with.")
@click.option("--question-id", default=DEMO_QUESTION_ID, show_default=True, help="Bundled question to ask.")
@click.option(
    "--engine",
    type=click.Choice(["llamacpp", "vllm"]),
    default="llamacpp",
    show_default=True,
    help="The local LLM server: llama.cpp, or vLLM (its environment and model made on first use, ~10 min once).",
)
def demo(down: bool, strategy: str, question_id: str, engine: str) -> None:
    """Local Elasticsearch + LLM server (llama.cpp, or ``--engine vllm``) up, bundled sample indexed, one
    multi-hop question answered."""
    console = Console()
    settings = load_settings()
    if down:
        llm_stopped = llm_server.stop(settings) if _local_llm(settings) else False
        es_stopped = esnode.stop(node_spec(settings)) if _local_es(settings) else False
        console.print(f"LLM server: {'stopped' if llm_stopped else 'was not running'}")
        console.print(f"Elasticsearch: {'stopped' if es_stopped else 'was not running'}")
        return
    try:
        services_up(settings, console, "vllm" if engine == "vllm" else "llamacpp")
        document = asyncio.run(ask_sample(settings, question_id, strategy, console))
    except HopsearchError as exc:
        raise click.ClickException(str(exc)) from exc
    console.print()
    console.print("[bold]Next[/]")
    console.print(f"  trace:        hopsearch traces show {document['trace_id']}   (or GET /_traces/<id>)")
    console.print('  ask:          hopsearch ask "Who directed The Seventh Victim?" --strategy deeprag')
    console.print("  your files:   hopsearch index docs ./my-docs")
    console.print("  serve:        hopsearch serve   (POST /hopsearch-passages/_ask)")
    console.print(f"  Kibana:       docker/ (compose + dashboards over {settings.traces_index})")
    console.print("  stop:         hopsearch demo --down")
    if document.get("error"):
        raise SystemExit(1)
