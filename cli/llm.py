"""``hopsearch llm up|down|status``: the local OpenAI-compatible LLM server."""

from __future__ import annotations

import click

from hopsearch.cli.local import llm_server
from hopsearch.service.config.settings import load_settings
from hopsearch.service.errors import HopsearchError


@click.group("llm")
def llm() -> None:
    """Start, stop and inspect the local LLM server (llama.cpp by default, vLLM on request)."""


@llm.command("up")
@click.option(
    "--engine",
    type=click.Choice(["llamacpp", "vllm"]),
    default="llamacpp",
    show_default=True,
    help="llama-cpp-python's server, or vLLM (its own environment and the converted Gemma made on first use: "
    "6.3 GB on disk, ~10 min, once).",
)
@click.option(
    "--model", default=None, help="GGUF file (llamacpp) or model folder/id (vllm); default the packaged Gemma 3 270M."
)
@click.option("--port", type=int, default=None, help="Port (default: HOPSEARCH_LLM_PORT).")
def up(engine: str, model: str | None, port: int | None) -> None:
    """Start the server in the background and wait until /v1/models answers."""
    settings = load_settings(**({"llm_port": port} if port else {}))
    try:
        server = llm_server.start(settings, "vllm" if engine == "vllm" else "llamacpp", model, echo=click.echo)
    except HopsearchError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{server.engine} server up: {server.base_url} (pid {server.pid}, model {server.model})")
    click.echo(f"log: {server.log_path}")
    click.echo(f"use it with HOPSEARCH_LLM_BASE_URL={server.base_url} HOPSEARCH_LLM_MODEL={server.served_as}")


@llm.command("down")
def down() -> None:
    """Stop the server started by `llm up`."""
    settings = load_settings()
    if llm_server.stop(settings):
        click.echo("LLM server stopped")
    else:
        click.echo("no LLM server was running")


@llm.command("status")
def status() -> None:
    """Report the server started by `llm up`; exit status 1 when none is running."""
    server = llm_server.status(load_settings())
    if server is None:
        click.echo("LLM server: not running")
        raise SystemExit(1)
    state = "answering" if llm_server.answers(server.port) else "starting or not answering"
    click.echo(f"LLM server: {server.engine} pid {server.pid} at {server.base_url}, {state}")
    click.echo(f"model: {server.model} (served as {server.served_as}); log: {server.log_path}")
