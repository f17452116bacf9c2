"""Helpers of the HTTP service tests: the app over a real Elasticsearch node and a scripted LLM,
driven in-process through ``httpx.ASGITransport`` (lifespan included)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp

from hopsearch.service.api import create_app
from hopsearch.service.api.state import ApiState
from hopsearch.service.config.settings import Settings
from hopsearch.service.store import Store
from tests.llm_fixtures import PASSAGES, DeepRAGModel, PlanStep, server_for, settings_for
from tests.scripted_llm import ScriptedLLM, ScriptRequest

API_KEY = "test-api-key-1"
OTHER_KEY = "test-api-key-2"
#: Credentials the service is configured with; they must never come back out of it.
ES_SECRET = "es-secret-key-Zq81"
ES_PASSWORD = "es-password-Wp20"
LLM_SECRET = "llm-secret-key-Xk73"
QUESTION = "When did the director of Lethal Weapon die?"
MODEL = DeepRAGModel(
    [
        PlanStep("Who directed Lethal Weapon?", "search", "Richard Donner"),
        PlanStep("When did Richard Donner die?", "intermediate", "2021"),
    ],
    final="2021",
)


def instance_of(schema: dict[str, Any]) -> Any:
    """A small value that satisfies a JSON schema (objects with their required properties)."""
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return instance_of(schema[key][0])
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        props = schema.get("properties", {})
        return {name: instance_of(props.get(name, {})) for name in schema.get("required", list(props))}
    if kind == "array":
        return [instance_of(schema.get("items", {})) for _ in range(max(1, int(schema.get("minItems", 1))))]
    if kind in ("number", "integer"):
        value = max(float(schema.get("minimum", 0.9)), min(float(schema.get("maximum", 0.9)), 0.9))
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return "Richard Donner"[: int(schema.get("maxLength", 64))]


def any_strategy_model(request: ScriptRequest) -> str:
    """A scripted model for every strategy: the DeepRAG format for completions and continued turns,
    a valid instance of the requested JSON schema for the JSON roles, a short answer otherwise."""
    body = request.body
    if request.prompt.endswith("\nAnswer:"):  # retrieve-then-read
        return " 2021\nQuestion: next"
    if request.endpoint == "completions" or body.get("continue_final_message"):
        return MODEL(request)
    json_schema = (body.get("response_format") or {}).get("json_schema") or {}
    if json_schema.get("schema"):
        return json.dumps(instance_of(json_schema["schema"]))
    fmt = body.get("response_format") or {}
    if fmt.get("schema"):
        return json.dumps(instance_of(fmt["schema"]))
    return "2021"


EXTRA_PASSAGES = [
    ("p-syntax", "Query syntax", 'Text with title:foo AND (bar OR and "unbalanced quotes and a ~ tilde.'),
]


def dead_url() -> str:
    """A loopback base URL where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@dataclass
class Api:
    client: httpx.AsyncClient
    app: FastAPI
    settings: Settings
    llm: ScriptedLLM

    @property
    def state(self) -> ApiState:
        state: ApiState = self.app.state.api
        return state

    @property
    def alias(self) -> str:
        return self.settings.passages_alias

    async def store(self) -> Store:
        return (await self.state.runtime()).store


def api_settings(es_url: str, llm: ScriptedLLM, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "es_url": [es_url],
        "index_prefix": f"t{uuid.uuid4().hex[:10]}",
        "embedder": "none",
        "api_keys": [API_KEY, OTHER_KEY],
        "es_api_key": ES_SECRET,
        "llm_api_key": LLM_SECRET,
        "llm_retries": 1,
        "vector_cache_mb": 0,  # no vectors from earlier runs
    }
    values.update(overrides)
    return settings_for(llm, "vllm", **values)


async def load_passages(store: Store, embedder: Any = None) -> str:
    target = await store.ensure_indices(embedder)
    rows = [*PASSAGES, *EXTRA_PASSAGES]
    vectors = await embedder.embed([f"{t} {x}" for _, t, x in rows]) if embedder else [None] * len(rows)
    actions = []
    for (doc_id, title, text), vector in zip(rows, vectors, strict=True):
        source: dict[str, Any] = {"title": title, "text": text, "source": "jsonl", "doc_id": doc_id, "chunk": 0}
        if vector is not None:
            source["embedding"] = vector
        actions.append({"_index": target, "_id": doc_id, "_source": source})
    ok, errors = await store.bulk(actions)
    assert (ok, errors) == (len(rows), [])
    await store.refresh(target)
    return target


@contextlib.asynccontextmanager
async def serving(
    es_url: str, *, script: Any = MODEL, load: bool = True, headers: dict[str, str] | None = None, **overrides: Any
) -> AsyncIterator[Api]:
    """The app (lifespan run) over a fresh index prefix with the sample passages loaded."""
    with server_for("vllm", script) as llm:
        settings = api_settings(es_url, llm, **overrides)
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            state: ApiState = app.state.api
            runtime = await state.runtime()
            try:
                if load:
                    await load_passages(runtime.store, runtime.embedder)
                transport = httpx.ASGITransport(app=app)
                auth = {"Authorization": f"ApiKey {API_KEY}"} if headers is None else headers
                async with httpx.AsyncClient(transport=transport, base_url="http://hopsearch", headers=auth) as client:
                    yield Api(client, app, settings, llm)
            finally:
                with contextlib.suppress(Exception):
                    await runtime.store.client.indices.delete(
                        index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                    )


def _uvicorn_thread(app: ASGIApp) -> tuple[uvicorn.Server, threading.Thread, int]:
    """``app`` under a real uvicorn on a free loopback port, started in a daemon thread."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    return server, thread, port


def _check_starting(thread: threading.Thread, deadline: float) -> None:
    """Raise once uvicorn's thread died or the deadline passed before it started."""
    if time.monotonic() > deadline or not thread.is_alive():
        raise RuntimeError("uvicorn did not start")


@contextlib.contextmanager
def uvicorn_serving(app: FastAPI) -> Iterator[str]:
    """``app`` under a real uvicorn on a free loopback port, in a thread; yields the base URL."""
    server, thread, port = _uvicorn_thread(app)
    deadline = time.monotonic() + 30
    while not server.started:
        _check_starting(thread, deadline)
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


@contextlib.asynccontextmanager
async def uvicorn_serving_async(app: ASGIApp) -> AsyncIterator[str]:
    """Like :func:`uvicorn_serving`, waiting without blocking the caller's event loop (which may run
    servers the app talks to, such as a :class:`~tests.counting_proxy.CountingProxy`)."""
    server, thread, port = _uvicorn_thread(app)
    deadline = time.monotonic() + 60
    while not server.started:
        _check_starting(thread, deadline)
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 15)
