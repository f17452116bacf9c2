"""Whom the MCP tools act as, checked as an attacker would, on a real node with the permissions corpus and a
scripted LLM that echoes its whole prompt into its answers: the README's agent configuration, parsed out of
the README and run as written (HOST and the key filled in) against a real ``hopsearch serve`` with an
employee's key; ``hopsearch mcp`` over stdio with ``HOPSEARCH_MCP_KEY`` (it acts as that key, and stops
answering once the key is revoked); ``hopsearch mcp`` without it (it says on stderr that it acts as an
admin). Every tool result is searched whole for the markers of the documents the caller may not read: an
admin's DualRAG question first put every restricted marker into an outline and a trace."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from hopsearch.service.app.runtime import Runtime
from hopsearch.service.auth.keys import KeyStore, NewKey
from hopsearch.service.config.settings import Settings
from tests.api_fixtures import API_KEY, api_settings, dead_url
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.permissions_corpus import QUERY, QUESTION, found_markers, leaks, load_corpus
from tests.service_processes import hopsearch_serve, scripted_service, serve_env
from tests.test_mcp import env_of
from tests.test_permissions_ask import EchoModel

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(Path(sys.executable).parent / "hopsearch")


def readme_agent_config() -> str:
    """The JSON of the README's agent configuration: the block of its MCP section that holds a ``url``."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### MCP tools for agents", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"```json\n(.*?)```", section, re.S)
    found = [block for block in blocks if '"url"' in block]
    assert len(found) == 1, "the README's MCP section has no agent configuration with a url"
    return found[0]


async def _tool_texts(client: Client, admins_trace: str) -> dict[str, str]:
    """Every tool's whole result, the admin's trace and the admin's outline asked for too."""
    texts: dict[str, str] = {}

    async def call(label: str, tool: str, arguments: dict[str, Any]) -> Any:
        found = await client.call_tool(tool, arguments)
        texts[label] = json.dumps(
            {"error": found.is_error, "content": [str(c) for c in found.content], "data": found.structured_content}
        )
        return found

    texts["tools"] = json.dumps([tool.name for tool in (await client.list_tools()).tools])
    await call("search", "search", {"query": QUERY, "k": 10})
    for strategy in ("single", "dualrag"):
        asked = await call(f"ask {strategy}", "ask", {"question": QUESTION, "strategy": strategy, "k": 10})
        await call(f"own trace {strategy}", "trace", {"id": str((asked.structured_content or {}).get("trace_id"))})
    await call("admin's trace", "trace", {"id": admins_trace})
    await call("outline", "outline", {"entity": "Company records"})
    return texts


def _problems(texts: dict[str, str], reads_as: str) -> list[str]:
    return [
        f"{label}: leaked {sorted(found)}"
        for label, text in texts.items()
        if (found := leaks(text, reads_as, "private"))
    ]


async def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``hopsearch ARGS`` with nothing on stdin."""
    return await asyncio.to_thread(
        subprocess.run, [SCRIPT, *args], input="", env=env, capture_output=True, text=True, timeout=60, check=False
    )


async def _admin_dualrag_trace(url: str, alias: str) -> str:
    """An admin's DualRAG question over the corpus: its outline and trace hold every restricted marker."""
    admin = {"Authorization": f"ApiKey {API_KEY}"}
    async with httpx.AsyncClient(base_url=url, headers=admin, timeout=60) as http:
        asked = await http.post(
            f"/{alias}/_ask", json={"question": QUESTION, "strategy": "dualrag", "options": {"k": 10}}
        )
        assert asked.status_code == 200, asked.text
        trace_id = str(asked.json()["trace_id"])
        trace = await http.get(f"/_traces/{trace_id}")
        assert "SALARY-MARKER-9" in trace.text  # so a leak of it could be seen
    return trace_id


@dataclass(frozen=True)
class _Employee:
    settings: Settings
    secret: str  # the employee's key, reading as ``public``
    url: str  # a ``hopsearch serve`` over the corpus
    admins_trace: str


@asynccontextmanager
async def _employee(node_url: str, tmp_path: Path, key: str) -> AsyncIterator[_Employee]:
    """The permissions corpus under a fresh prefix, a key named ``key`` that reads as ``public``, a ``hopsearch serve``
    (up while the caller runs) and an admin's DualRAG trace asked through it; the prefix's indices deleted after."""
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(node_url, llm)
        async with await Runtime.open(settings) as runtime:
            try:
                await load_corpus(runtime.store, tmp_path)
                secret, _ = await KeyStore.of(runtime.store).create(NewKey(key, ["public"]))
                env = scripted_service(node_url, settings.index_prefix, llm.base_url)
                with hopsearch_serve(env, tmp_path / "serve.log") as served:
                    trace = await _admin_dualrag_trace(served.url, settings.passages_alias)
                    yield _Employee(settings, secret, served.url, trace)
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )


async def test_the_readme_agent_configuration_reads_as_the_employee(es8_node: EsNode, tmp_path: Path) -> None:
    async with _employee(es8_node.url, tmp_path, "employee-agent") as employee:
        written = readme_agent_config().replace("http://HOST:9280", employee.url)
        server = json.loads(written.replace("EMPLOYEE_KEY", employee.secret))["mcpServers"]["hopsearch"]
        assert server["type"] == "http" and "command" not in server
        keyed = httpx2.AsyncClient(headers=server["headers"], timeout=60)
        async with keyed, Client(streamable_http_client(server["url"], http_client=keyed)) as client:
            texts = await _tool_texts(client, employee.admins_trace)
    assert _problems(texts, "public") == []
    assert "PUBLIC-MARKER-1" in found_markers(texts["search"])  # the employee reads what it may
    assert '"error": true' in texts["admin's trace"] and "not found" in texts["admin's trace"]


async def test_stdio_with_a_key_acts_as_it_and_stops_once_it_is_revoked(es8_node: EsNode, tmp_path: Path) -> None:
    async with _employee(es8_node.url, tmp_path, "laptop-agent") as employee:
        env = {**env_of(employee.settings), "HOPSEARCH_MCP_KEY": employee.secret}
        params = StdioServerParameters(command=SCRIPT, args=["mcp"], env=env)
        with (tmp_path / "stderr.log").open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=60) as client:
                texts = await _tool_texts(client, employee.admins_trace)
                revoked = await _run(["keys", "revoke", "laptop-agent"], env)
                await asyncio.sleep(1.0)  # the key's lookup is reused at most 0.9 s
                after = await client.call_tool("search", {"query": QUERY, "k": 10})
        refused = await _run(["mcp"], env)  # a revoked key at start: no server
    assert _problems(texts, "public") == []
    assert "PUBLIC-MARKER-1" in found_markers(texts["search"])
    assert '"error": true' in texts["admin's trace"] and '"error": false' in texts["own trace single"]
    stderr = (tmp_path / "stderr.log").read_text()
    assert "acts as the API key [laptop-agent]" in stderr and "index patterns *" in stderr, stderr
    assert revoked.returncode == 0, revoked.stderr
    assert after.is_error and "the API key [laptop-agent] is revoked" in str(after.content[0])
    assert "PUBLIC-MARKER-1" not in str(after.content)
    assert refused.returncode == 1 and "HOPSEARCH_MCP_KEY: the API key [laptop-agent] is revoked" in refused.stderr
    assert refused.stdout == ""  # stdout is the protocol's


def test_stdio_without_a_key_says_it_acts_as_an_admin() -> None:
    env = serve_env({"HOPSEARCH_ES_URL": dead_url().removesuffix("/v1"), "HOPSEARCH_EMBEDDER": "none"})
    done = subprocess.run([SCRIPT, "mcp"], input="", env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "hopsearch mcp acts as an admin" in done.stderr and "/_mcp/" in done.stderr
    assert done.stdout == ""  # the note is never on stdout, which carries the protocol
