"""``hopsearch serve`` stops on SIGTERM within its graceful timeout while streams are open (issue 51, item 6),
and ``GET /_mcp`` opens no stream. A real ``serve`` process on a real node, a model that never answers:
``_ask`` streaming (SSE), ``/v1/chat/completions`` streaming, ``_ask`` waiting for its answer and the MCP
``ask`` tool are all in flight when SIGTERM comes; the process is gone within a few seconds (not the
graceful timeout, not the model's hour), and each stream ends cleanly with a ``service_stopping_exception``
(a complete HTTP response, no cut chunk)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hopsearch.cli.local import process
from hopsearch.service.app.runtime import Runtime
from tests.api_fixtures import API_KEY, any_strategy_model, api_settings, load_passages
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.service_processes import hopsearch_serve, scripted_service

ADMIN = {"Authorization": f"ApiKey {API_KEY}"}
GRACEFUL_S = 20


async def _stream(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> tuple[int, str]:
    async with http.stream("POST", path, json=body) as response:
        text = "".join([chunk async for chunk in response.aiter_text()])
    return response.status_code, text


async def _until_waiting(llm: Any, count: int) -> None:
    """Until ``count`` generation requests wait on the model (a minute at most)."""
    for _ in range(600):
        if llm.generation_requests >= count:
            return
        await asyncio.sleep(0.1)


async def _mcp_ask(url: str) -> str:
    keyed = httpx2.AsyncClient(headers=ADMIN, timeout=60)
    async with keyed, Client(streamable_http_client(f"{url}/_mcp/", http_client=keyed)) as client:
        result = await client.call_tool("ask", {"question": "Who directed Lethal Weapon?", "strategy": "single"})
    return str(result.content)


async def test_serve_stops_on_sigterm_with_open_streams_each_ending_cleanly(es_node: EsNode, tmp_path: Path) -> None:
    with server_for("vllm", any_strategy_model, hang=True) as llm:
        settings = api_settings(es_node.url, llm)
        async with await Runtime.open(settings) as runtime:
            try:
                await load_passages(runtime.store)
                env = scripted_service(
                    es_node.url, settings.index_prefix, llm.base_url, HOPSEARCH_API_GRACEFUL_TIMEOUT_S=str(GRACEFUL_S)
                )
                with hopsearch_serve(env, tmp_path / "serve.log") as served:
                    async with httpx.AsyncClient(base_url=served.url, timeout=60, headers=ADMIN) as http:
                        started = time.monotonic()
                        mcp_get = await http.get("/_mcp", headers={"Accept": "text/event-stream"})
                        mcp_get_s = time.monotonic() - started
                        alias = settings.passages_alias
                        question = {"question": "Who directed Lethal Weapon?", "strategy": "single"}
                        chat = {
                            "model": "hopsearch-single",
                            "stream": True,
                            "messages": [{"role": "user", "content": "Who?"}],
                        }
                        tasks = {
                            "sse": asyncio.create_task(_stream(http, f"/{alias}/_ask", {**question, "stream": True})),
                            "v1": asyncio.create_task(_stream(http, "/v1/chat/completions", chat)),
                            "ask": asyncio.create_task(http.post(f"/{alias}/_ask", json=question)),
                            "mcp": asyncio.create_task(_mcp_ask(served.url)),
                        }
                        await _until_waiting(llm, len(tasks))
                        waiting = llm.generation_requests
                        sent = time.monotonic()
                        os.killpg(served.pid, signal.SIGTERM)
                        gone = await asyncio.to_thread(process._wait_gone, served.pid, GRACEFUL_S + 10)
                        stop_s = time.monotonic() - sent
                        done = await asyncio.wait_for(asyncio.gather(*tasks.values(), return_exceptions=True), 30)
                        ended = dict(zip(tasks, done, strict=True))
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )
    print(f"GET /_mcp answered in {mcp_get_s:.2f} s; serve stopped {stop_s:.2f} s after SIGTERM")
    assert mcp_get.status_code == 405 and mcp_get.headers["allow"] == "POST" and mcp_get_s < 5
    assert waiting == len(tasks)  # every request was waiting on the model when the signal came
    assert gone and stop_s < 5, f"serve took {stop_s:.1f} s to stop"
    for what in ("sse", "v1"):
        result = ended[what]
        assert not isinstance(result, BaseException), (what, result)
        status, text = result
        assert status == 200 and "service_stopping_exception" in text, (what, text[-500:])
    asked = ended["ask"]
    assert isinstance(asked, httpx.Response) and asked.status_code == 503, asked
    assert asked.json()["error"]["type"] == "service_stopping_exception"
    assert not isinstance(ended["mcp"], BaseException) and "stopping" in str(ended["mcp"]), ended["mcp"]
