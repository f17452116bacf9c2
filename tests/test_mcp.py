"""The MCP tools through the official SDK's client: over stdio (``hopsearch mcp`` as a subprocess) and
as streamable HTTP at ``/_mcp`` inside the service (behind its API keys), against the real Elasticsearch
and the scripted LLM."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from hopsearch.service.api import create_app
from hopsearch.service.config.settings import Settings
from tests.api_fixtures import API_KEY, any_strategy_model, serving, uvicorn_serving_async
from tests.conftest import EsNode
from tests.dual_fixtures import deep_and_dual_model

TOOLS = {"search", "ask", "outline", "trace"}


def env_of(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "HOPSEARCH_ES_URL": settings.es_url[0],
        "HOPSEARCH_ES_API_KEY": settings.es_api_key.get_secret_value() if settings.es_api_key else "",
        "HOPSEARCH_INDEX_PREFIX": settings.index_prefix,
        "HOPSEARCH_EMBEDDER": "none",
        "HOPSEARCH_LLM_BASE_URL": ",".join(settings.llm_base_url),
        "HOPSEARCH_LLM_MODEL": settings.llm_model,
        "HOPSEARCH_LLM_RETRIES": "1",
        "HOPSEARCH_API_MAX_K": "20",
        "HOPSEARCH_STATE_DIR": "/nonexistent-state",
    }


def payload(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        found: dict[str, Any] = result.structured_content
        return found.get("result", found) if set(found) == {"result"} else found
    data: dict[str, Any] = json.loads(result.content[0].text)
    return data


def error_text(result: Any) -> str:
    assert result.is_error
    return str(result.content[0].text)


async def exercise(client: Client) -> dict[str, Any]:
    """Every tool once (and the refusals); returns what the test checks."""
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    found = payload(await client.call_tool("search", {"query": "Lethal Weapon director", "k": 2}))
    filtered = payload(
        await client.call_tool("search", {"query": "film", "k": 5, "filters": [{"term": {"doc_id": "p-jaws"}}]})
    )
    deep = payload(await client.call_tool("ask", {"question": "When did the director of Lethal Weapon die?"}))
    dual = payload(await client.call_tool("ask", {"question": "Who directed Lethal Weapon?", "strategy": "dualrag"}))
    trace = payload(await client.call_tool("trace", {"id": dual["trace_id"]}))
    entities = [s["details"]["entity"] for s in trace["steps"] if (s.get("details") or {}).get("entity")]
    outline = payload(await client.call_tool("outline", {"entity": entities[0]})) if entities else {}
    return {
        "tools": tools,
        "found": found,
        "filtered": filtered,
        "deep": deep,
        "dual": dual,
        "trace": trace,
        "outline": outline,
        "too_many": error_text(await client.call_tool("search", {"query": "x", "k": 21})),
        "bad_filter": error_text(await client.call_tool("search", {"query": "x", "filters": [{"query_string": {}}]})),
        "no_trace": error_text(await client.call_tool("trace", {"id": "nope"})),
        "bad_strategy": error_text(await client.call_tool("ask", {"question": "q", "strategy": "magic"})),
    }


def check(seen: dict[str, Any]) -> None:
    assert set(seen["tools"]) >= TOOLS
    assert {"mode", "k", "filters"} <= set(seen["tools"]["search"].input_schema["properties"])
    assert "strategy" in seen["tools"]["ask"].input_schema["properties"]
    assert seen["found"]["mode"] == "bm25" and len(seen["found"]["hits"]) == 2
    assert seen["found"]["hits"][0]["id"] in {"p-lethal", "p-lethal2"} and seen["found"]["hits"][0]["title"]
    assert [h["id"] for h in seen["filtered"]["hits"]] == ["p-jaws"]
    assert seen["deep"]["answer"] == "2021" and seen["deep"]["trace_id"] and seen["deep"]["citations"]
    assert seen["dual"]["strategy"] == "dualrag" and seen["dual"]["trace_id"]
    assert seen["trace"]["trace_id"] == seen["dual"]["trace_id"] and seen["trace"]["steps"]
    assert seen["outline"]["entity"] in {"Lethal Weapon", "Richard Donner"} and seen["outline"]["facts"]
    assert seen["dual"]["citations"]
    assert "illegal_argument_exception" in seen["too_many"] and "api_max_k" in seen["too_many"]
    assert "filters" in seen["bad_filter"]
    assert "not found" in seen["no_trace"]
    assert "unknown strategy" in seen["bad_strategy"]


async def test_mcp_over_stdio(es8_node: EsNode) -> None:
    async with serving(es8_node.url, script=deep_and_dual_model(any_strategy_model)) as api:
        command = [sys.executable, "-c", "from hopsearch.cli.main import main; main()", "mcp"]
        params = StdioServerParameters(command=command[0], args=command[1:], env=env_of(api.settings))
        async with Client(params, read_timeout_seconds=60) as client:
            seen = await exercise(client)
    check(seen)


async def test_mcp_over_http_beside_the_service(es8_node: EsNode) -> None:
    async with serving(es8_node.url, script=deep_and_dual_model(any_strategy_model), api_max_k=20) as api:
        app = create_app(api.settings)
        async with uvicorn_serving_async(app) as url:
            keyed = httpx2.AsyncClient(headers={"Authorization": f"ApiKey {API_KEY}"}, timeout=60)
            async with keyed, Client(streamable_http_client(f"{url}/_mcp/", http_client=keyed)) as client:
                seen = await exercise(client)
            anonymous = await httpx2.AsyncClient().post(f"{url}/_mcp/", json={})
    check(seen)
    assert anonymous.status_code == 401 and anonymous.json()["error"]["type"] == "security_exception"


async def test_mcp_at_the_bare_mount_is_answered_without_a_redirect(es8_node: EsNode) -> None:
    """``/_mcp`` (no slash) is served as ``/_mcp/``: some MCP clients do not follow a 307 on POST."""
    async with serving(es8_node.url, script=deep_and_dual_model(any_strategy_model), api_max_k=20) as api:
        app = create_app(api.settings)
        async with uvicorn_serving_async(app) as url:
            head = {"Authorization": f"ApiKey {API_KEY}"}
            keyed = httpx2.AsyncClient(headers=head, timeout=60, follow_redirects=False)
            async with keyed, Client(streamable_http_client(f"{url}/_mcp", http_client=keyed)) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                found = payload(await client.call_tool("search", {"query": "Lethal Weapon director", "k": 2}))
            async with httpx2.AsyncClient(follow_redirects=False) as plain:
                anonymous = await plain.post(f"{url}/_mcp", json={})
                keyed_post = await plain.post(f"{url}/_mcp", json={}, headers=head)
    assert names >= TOOLS and len(found["hits"]) == 2
    assert anonymous.status_code == 401 and anonymous.json()["error"]["type"] == "security_exception"
    assert keyed_post.status_code not in (307, 308) and "location" not in keyed_post.headers


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
