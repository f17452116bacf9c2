"""An open service (no keys) answers loopback requests only, its ``Host`` read strictly (RFC 9110): over
real HTTP (uvicorn, raw sockets so that any header can be sent) on 8.19. ``localhost:80@evil.com``,
``[::1]evil.com``, two ``Host`` headers (either order) and an ``Origin`` with userinfo are refused; the
loopback names, with and without a port, are served."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

from hopsearch.service.api import create_app
from tests.api_fixtures import api_settings, uvicorn_serving_async
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.test_permissions_ask import EchoModel

SERVED = [
    [("Host", "localhost:9280")],
    [("Host", "127.0.0.1")],
    [("Host", "[::1]:9280")],
    [("Host", "LOCALHOST")],
    [("Host", "localhost"), ("Origin", "http://[::1]:5173")],
]
REFUSED = [
    [("Host", "localhost:80@evil.com")],
    [("Host", "[::1]evil.com")],
    [("Host", "localhost:9280/evil")],
    [("Host", "localhost:99999")],
    [("Host", "evil.com"), ("Host", "localhost")],
    [("Host", "localhost"), ("Host", "evil.com")],
    [("Host", "localhost"), ("Origin", "http://localhost:80@evil.com")],
    [("Host", "localhost"), ("Origin", "http://[::1]evil.com")],
    [("Host", "localhost"), ("Origin", "http://localhost"), ("Origin", "http://evil.com")],
    [],
]


async def raw_get(url: str, headers: list[tuple[str, str]]) -> tuple[int, str]:
    """``GET /`` with exactly ``headers`` (none added), over a plain socket; the status and the body."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    lines = ["GET /_ui/traces HTTP/1.1", *(f"{k}: {v}" for k, v in headers), "Accept: application/json"]
    lines.append("Connection: close")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), timeout=30)
    writer.close()
    head, _, body = data.decode("latin-1").partition("\r\n\r\n")
    return int(head.split(" ", 2)[1]), body


@pytest.fixture
async def open_url(es8_node: EsNode) -> object:
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(es8_node.url, llm, api_keys=[])
        async with uvicorn_serving_async(create_app(settings)) as url:
            yield url


async def test_an_open_service_reads_host_strictly(open_url: str) -> None:
    problems = []
    for headers in SERVED:
        status, body = await raw_get(open_url, headers)
        if status != 200:
            problems.append(f"served? {headers}: {status} {body[:200]}")
    for headers in REFUSED:
        status, body = await raw_get(open_url, headers)
        if status not in (400, 403):
            problems.append(f"refused? {headers}: {status} {body[:200]}")
    assert problems == [], "\n".join(problems)
