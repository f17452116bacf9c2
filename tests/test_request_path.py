"""One request path: every front end builds its request with one function and calls one use case, and what
a request reads travels explicitly down to every Elasticsearch body.

- No context variable, global statement or mutable module/class state in ``service/`` (a scan of the code).
- Every passages body of every strategy and retrieval mode carries the request's filters (the bodies as
  they reached a real node, through a recording proxy).
- HTTP ``_ask``, the MCP ``ask`` tool and ``hopsearch ask`` record the same options, retrieval mode and
  scope for the same question over the same index.
"""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from click.testing import CliRunner
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hopsearch.cli.main import main
from hopsearch.service.access import ADMIN
from hopsearch.service.api import create_app
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.requests import Query
from hopsearch.service.store import Store
from tests.api_fixtures import API_KEY, any_strategy_model, api_settings, load_passages, serving, uvicorn_serving_async
from tests.conftest import EsNode
from tests.counting_proxy import CountingProxy
from tests.dual_fixtures import deep_and_dual_model
from tests.llm_fixtures import server_for
from tests.test_mcp import payload

SERVICE = Path(__file__).resolve().parents[1] / "service"
MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "deque", "Counter", "OrderedDict", "bytearray"}
MUTATORS = {"append", "add", "update", "setdefault", "pop", "popitem", "clear", "extend", "insert", "remove"}
STRATEGIES = ("single", "deeprag", "dualrag", "iterative", "hyde")
FILTER = {"terms": {"doc_id": ["p-lethal", "p-lethal2", "p-donner"]}}


def _mutable(value: ast.expr) -> bool:
    literal = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
    call = isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in MUTABLE_CALLS
    return isinstance(value, literal) or call


def _assigned(body: list[ast.stmt]) -> list[tuple[str, ast.expr]]:
    out = []
    for node in body:
        if isinstance(node, ast.Assign):
            out += [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
            out.append((node.target.id, node.value))
    return out


def test_no_context_variable_or_shared_mutable_state_carries_request_data() -> None:
    problems: list[str] = []
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(SERVICE.rglob("*.py"))}
    constants: set[str] = set()
    for path, tree in trees.items():
        where = path.relative_to(SERVICE.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any("contextvars" in n or n == "ContextVar" for n in names):
                    problems.append(f"{where}:{node.lineno}: imports contextvars")
            if isinstance(node, ast.Global):
                problems.append(f"{where}:{node.lineno}: global {', '.join(node.names)}")
            if isinstance(node, ast.ClassDef):
                for name, value in _assigned(node.body):
                    if _mutable(value):
                        problems.append(f"{where}: class {node.name} shares a mutable {name}")
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for decorator in node.decorator_list:
                    if "cache" in ast.unparse(decorator):
                        problems.append(f"{where}:{node.lineno}: {node.name} is cached across calls")
        for name, value in _assigned(tree.body):
            if _mutable(value) and name != "__all__":
                constants.add(name)
    for path, tree in trees.items():  # module-level containers are constants: nothing changes them
        where = path.relative_to(SERVICE.parent)
        for node in ast.walk(tree):
            target = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
                target = node.func.value
            elif isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
                targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
                target = next((t.value for t in targets if isinstance(t, ast.Subscript)), None)
            if isinstance(target, ast.Name) and target.id in constants:
                problems.append(f"{where}:{node.lineno}: changes the module-level {target.id}")
    assert problems == [], "\n".join(problems)


def _searches(proxy: CountingProxy, index: str) -> list[dict[str, Any]]:
    """Every search body sent to ``index`` (in ``_msearch`` and ``_search`` requests), as parsed JSON."""
    found: list[dict[str, Any]] = []
    for method, path, body in proxy.bodies:
        if path.endswith("/_msearch"):
            lines = [orjson.loads(line) for line in body.splitlines() if line.strip()]
            for header, search in zip(lines[::2], lines[1::2], strict=True):
                if header.get("index") == index:
                    found.append(search)
        elif path == f"/{index}/_search" and method == "POST" and body:
            found.append(orjson.loads(body))
    return found


def _reads_passages(search: dict[str, Any]) -> bool:
    """A body that returns passages (the count of documents without vectors returns none: it carries the
    access filter only)."""
    return search.get("size", 10) > 0


async def test_every_passages_body_of_every_strategy_and_mode_carries_the_request_filters(
    es_node: EsNode, minilm: MiniLMEmbedder
) -> None:
    proxy = CountingProxy(es_node.url)
    url = await proxy.start()
    try:
        with server_for("vllm", deep_and_dual_model(any_strategy_model)) as llm:
            settings = api_settings(url, llm, embedder="minilm")
            async with await Runtime.open(settings, refresh_traces=True) as runtime:
                await load_passages(runtime.store, minilm)
                index = settings.passages_alias
                proxy.reset()
                for strategy in STRATEGIES:
                    for mode in ("bm25", "dense", "hybrid"):
                        request = await usecases.ask_request(
                            runtime,
                            "When did the director of Lethal Weapon die?",
                            caller=ADMIN,
                            strategy=strategy,
                            filters=[FILTER],
                            retrieval_mode=mode,
                        )
                        (await usecases.ask(runtime, request)).raise_for_error()
                queries = [
                    Query("Lethal Weapon director", k=3, mode=mode, fusion=fusion)  # type: ignore[arg-type]
                    for mode in ("bm25", "dense", "hybrid")
                    for fusion in ("rrf", "bool")
                ]
                search = await usecases.search_request(runtime, queries, caller=ADMIN, filters=[FILTER])
                results = await usecases.search(runtime, search)
                searches = _searches(proxy, index)
        reading = [s for s in searches if _reads_passages(s)]
        assert len(reading) >= len(STRATEGIES) * 3 + len(queries), len(reading)
        clause = json.dumps(FILTER, sort_keys=True)
        missing = [s for s in reading if clause not in json.dumps(s, sort_keys=True)]
        assert missing == [], missing[:2]
        if es_node.knn:  # inside knn: k counts after the filter
            dense = [s for s in reading if "knn" in s]
            assert dense and all(s["knn"]["filter"] for s in dense)
        hits = {h.id for result in results for h in result.hits}
        assert hits and hits <= {"p-lethal", "p-lethal2", "p-donner"}
    finally:
        await proxy.stop()


async def _cli_trace(settings: Any, question: str, strategy: str, tmp_path: Path) -> dict[str, Any]:
    env = {
        "HOPSEARCH_ES_URL": settings.es_url[0],
        "HOPSEARCH_ES_API_KEY": settings.es_api_key.get_secret_value() if settings.es_api_key else "",
        "HOPSEARCH_INDEX_PREFIX": settings.index_prefix,
        "HOPSEARCH_EMBEDDER": settings.embedder,
        "HOPSEARCH_LLM_BASE_URL": ",".join(settings.llm_base_url),
        "HOPSEARCH_LLM_MODEL": settings.llm_model,
        "HOPSEARCH_LLM_ENGINE": settings.llm_engine,
        "HOPSEARCH_STATE_DIR": str(tmp_path),
    }
    if settings.seed is not None:  # the service's own seed setting, as the other front ends have it
        env["HOPSEARCH_SEED"] = str(settings.seed).lower()
    args = ["ask", question, "--strategy", strategy, "--json"]
    result = await asyncio.to_thread(CliRunner().invoke, main, args, env=env)
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.output)
    return doc


@pytest.mark.parametrize("strategy", ["single", "dualrag"])
async def test_http_mcp_and_cli_ask_with_the_same_settings(
    es8_node: EsNode, minilm: MiniLMEmbedder, strategy: str, tmp_path: Path
) -> None:
    question = "When did the director of Lethal Weapon die?"
    async with serving(es8_node.url, script=deep_and_dual_model(any_strategy_model), embedder="minilm") as api:
        store: Store = await api.store()
        http = await api.client.post(f"/{api.alias}/_ask", json={"question": question, "strategy": strategy})
        assert http.status_code == 200, http.text
        async with uvicorn_serving_async(create_app(api.settings)) as url:
            keyed = httpx2.AsyncClient(headers={"Authorization": f"ApiKey {API_KEY}"}, timeout=60)
            async with keyed, Client(streamable_http_client(f"{url}/_mcp/", http_client=keyed)) as client:
                mcp = payload(await client.call_tool("ask", {"question": question, "strategy": strategy}))
        cli = await _cli_trace(api.settings, question, strategy, tmp_path)
        await store.refresh(api.settings.traces_index)
        traces = [
            await store.get_document(api.settings.traces_index, t) for t in (http.json()["trace_id"], mcp["trace_id"])
        ]
    docs = [*traces, cli]
    assert all(doc is not None for doc in docs)
    settings = [(doc["strategy"], doc["options"], doc["scope"]) for doc in docs if doc is not None]
    assert settings[0] == settings[1] == settings[2], settings
    expected_mode = "bm25" if strategy == "dualrag" else "hybrid"  # the index holds MiniLM vectors
    assert settings[0][1]["retrieval_mode"] == expected_mode == mcp["retrieval_mode"]
    assert settings[0][1]["k"] == (5 if strategy == "single" else 3)
    assert settings[0][2] == {"index": api.alias, "namespace": api.settings.outline_namespace}
