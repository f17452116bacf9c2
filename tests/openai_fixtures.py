"""The service over real HTTP (uvicorn) for the tests of OpenAI's face: the sample passages (or the
permissions corpus) on a real node, the scripted LLM, the official ``openai`` SDK as the client."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai

from hopsearch.service.api import create_app
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.config.settings import Settings
from tests.api_fixtures import API_KEY, MODEL, api_settings, load_passages, uvicorn_serving_async
from tests.llm_fixtures import server_for
from tests.scripted_llm import ScriptedLLM


@dataclass
class Served:
    url: str
    settings: Settings
    llm: ScriptedLLM
    runtime: Runtime
    http: httpx.AsyncClient

    def sdk(self, key: str = API_KEY, **options: Any) -> openai.AsyncOpenAI:
        """The official SDK pointed at the service, as its README says."""
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, **options)

    async def new_key(self, **fields: Any) -> str:
        made = await self.http.post("/_keys", json=fields)
        assert made.status_code == 201, made.text
        return str(made.json()["key"])

    async def trace(self, trace_id: str) -> dict[str, Any]:
        found = await self.http.get(f"/_traces/{trace_id}")
        assert found.status_code == 200, found.text
        source: dict[str, Any] = found.json()["_source"]
        return source

    async def traces_written(self) -> int:
        store = self.runtime.store
        await store.refresh(self.settings.traces_index)
        counted = await store.client.count(index=self.settings.traces_index)
        return int(counted["count"])


@contextlib.asynccontextmanager
async def openai_serving(
    es_url: str, *, script: Any = MODEL, llm_options: dict[str, Any] | None = None, load: Any = None, **overrides: Any
) -> AsyncIterator[Served]:
    """The app under uvicorn over a fresh prefix; ``load(store)`` loads a corpus (default: the samples)."""
    with server_for("vllm", script, **(llm_options or {})) as llm:
        settings = api_settings(es_url, llm, **overrides)
        async with await Runtime.open(settings) as runtime:
            try:
                if load is None:
                    await load_passages(runtime.store)
                else:
                    await load(runtime.store)
                await runtime.store.ensure_side_indices()
                async with uvicorn_serving_async(create_app(settings)) as url:
                    admin = {"Authorization": f"ApiKey {API_KEY}"}
                    async with httpx.AsyncClient(base_url=url, headers=admin, timeout=60) as http:
                        yield Served(url, settings, llm, runtime, http)
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )
