"""The CLI during an Elasticsearch outage: one clear line, no library tracebacks (they are DEBUG).

A real node answers the start-up probe through a proxy that then drops every other connection, the way
a node that dies after the client connected looks to the client library (which retries and logs each
failure with its traceback). The CLI runs as its own process, so its own logging set-up is what prints.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import EsNode


@pytest.fixture
def dying_node(es8_node: EsNode) -> Iterator[str]:
    """A URL whose node answers ``GET /_nodes/...`` (the probe) and then drops every connection."""
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    url: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        if request.path.startswith("/_nodes"):
            async with aiohttp.ClientSession() as session, session.get(es8_node.url + request.path_qs) as upstream:
                body = await upstream.read()
                return web.Response(status=upstream.status, body=body, content_type="application/json")
        assert request.transport is not None
        request.transport.abort()
        return web.Response(status=500)

    async def serve() -> web.AppRunner:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        url.append(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")  # type: ignore[union-attr]
        return runner

    def run() -> None:
        asyncio.set_event_loop(loop)
        runner = loop.run_until_complete(serve())
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield url[0]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOPSEARCH_ES_URL=url, HOPSEARCH_EMBEDDER="none", HOPSEARCH_INDEX_PREFIX="outage")
    command = [sys.executable, "-c", "from hopsearch.cli.main import main; main()", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_outage_prints_one_clear_line(dying_node: str) -> None:
    done = _cli(dying_node, "search", "glacier")
    assert done.returncode == 1
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    assert "WARNING" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Elasticsearch is unreachable" in lines[0], output


def test_outage_tracebacks_stay_available_at_debug(dying_node: str) -> None:
    done = _cli(dying_node, "-vv", "search", "glacier")
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "DEBUG elastic_transport" in done.stderr
