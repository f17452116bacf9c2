"""``hopsearch mcp``: the MCP tools (``search``, ``ask``, ``outline``, ``trace``) over stdio, for agents
that start their tools as subprocesses. The process holds the cluster's credentials: it acts as an admin
(and says so on stderr; stdout is the protocol's) or as the stored key of ``HOPSEARCH_MCP_KEY``, checked on
every call. ``hopsearch serve`` offers the same tools as streamable HTTP at ``/_mcp``, behind its API keys:
an employee's agent goes there, with the employee's key."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import click

from hopsearch.service.config.settings import load_settings
from hopsearch.service.errors import ApiError, HopsearchError

if TYPE_CHECKING:
    from hopsearch.service.api.mcp.tools import StdioCaller


async def serve_stdio() -> None:
    from hopsearch.service.api.mcp.stdio import stdio_caller
    from hopsearch.service.api.mcp.tools import build_server
    from hopsearch.service.api.state import ApiState

    state = ApiState(load_settings())
    try:
        acting = stdio_caller(state)
        click.echo(await _note(acting), err=True)
        await build_server(state, acting).run_stdio_async()
    finally:
        await state.close()


async def _note(acting: StdioCaller | None) -> str:
    """Whom the tools act as, said once at start; a key refused now stops the command (exit 1)."""
    from hopsearch.service.api.mcp.stdio import ADMIN_NOTE, acting_note

    if acting is None:
        return ADMIN_NOTE
    try:
        return acting_note(await acting())
    except ApiError as exc:
        raise click.ClickException(f"HOPSEARCH_MCP_KEY: {exc}") from exc
    except HopsearchError as exc:  # Elasticsearch not up yet: every call checks the key anyway
        return f"hopsearch mcp acts as the API key of HOPSEARCH_MCP_KEY, checked on every call ({exc.error_type} now)"


@click.command("mcp")
def mcp() -> None:
    """Serve the MCP tools over stdio (stdout carries the protocol; notes and logs go to stderr).

    It acts as an admin, or as the stored API key in HOPSEARCH_MCP_KEY (never an argument), looked up on
    every call. Give an employee's agent `hopsearch serve`'s /_mcp/ with the employee's key instead."""
    asyncio.run(serve_stdio())
