"""A request that sends its headers and then stalls its body is answered 408 within
``api_body_timeout_s`` over real HTTP (uvicorn, a raw socket as the slow client, a real 8.19 node behind
the service) — it never holds its connection without end; a body that arrives in time is served."""

from __future__ import annotations

import asyncio
import json
import time

from hopsearch.service.api import create_app
from tests.api_fixtures import API_KEY, api_settings, uvicorn_serving_async
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.test_permissions_ask import EchoModel


async def _exchange(url: str, head: bytes, body: bytes, wait_s: float) -> tuple[bytes, float]:
    """``head`` and ``body`` sent on one connection; what came back before ``wait_s`` (b"": nothing)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    started = time.monotonic()
    writer.write(head + body)
    await writer.drain()
    try:
        answer = await asyncio.wait_for(reader.read(65536), wait_s)
    except TimeoutError:
        answer = b""
    writer.close()
    return answer, time.monotonic() - started


def _head(path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ApiKey {API_KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


async def test_a_stalled_body_is_answered_408_and_a_whole_one_is_served(es8_node: EsNode) -> None:
    body = json.dumps({"query": "anything", "k": 1}).encode()
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(es8_node.url, llm, api_body_timeout_s=1.0)
        async with uvicorn_serving_async(create_app(settings)) as url:
            path = f"/{settings.passages_alias}/_retrieve"
            stalled, took = await _exchange(url, _head(path, len(body)), body[:5], wait_s=15)
            whole, _ = await _exchange(url, _head(path, len(body)), body, wait_s=15)
    assert stalled.startswith(b"HTTP/1.1 408"), stalled[:300]
    assert b"HOPSEARCH_API_BODY_TIMEOUT_S" in stalled and took < 10, (stalled[-300:], took)
    assert whole.split(b"\r\n", 1)[0] in (b"HTTP/1.1 200 OK", b"HTTP/1.1 404 Not Found"), whole[:300]
