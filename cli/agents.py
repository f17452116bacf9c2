"""``hopsearch mcp``: the MCP tools (``search``, ``ask``, ``outline``, ``trace``) over stdio, for agents
that start their tools as subprocesses. ``hopsearch serve`` offers the same tools as streamable HTTP at
``/_mcp``, behind its API keys."""

from __future__ import annotations

import asyncio

import click

from hopsearch.service.config.settings import load_settings


async def serve_stdio() -> None:
    from hopsearch.service.api.mcp_tools import build_server
    from hopsearch.service.api.state import ApiState

    state = ApiState(load_settings())
    try:
        await build_server(state).run_stdio_async()
    finally:
        await state.close()


@click.command("mcp")
def mcp() -> None:
    """Serve the MCP tools over stdio (stdout carries the protocol; logs go to stderr)."""
    asyncio.run(serve_stdio())
