"""End to end: the official ``openai`` SDK asks hopsearch (``/v1/chat/completions`` over real HTTP) and
hopsearch answers with the real local llama.cpp model (started by the code behind ``hopsearch llm up``)
over a real Elasticsearch node, one body and streamed. Under ``CI=true`` a missing model fails."""

from __future__ import annotations

import uuid
from typing import Any

import openai
import pytest

from hopsearch.service.api import create_app
from hopsearch.service.config.settings import Settings, load_settings
from hopsearch.service.store import Store
from tests.api_fixtures import API_KEY, load_passages, uvicorn_serving_async
from tests.conftest import EsNode
from tests.test_e2e_llama import llama  # noqa: F401  (the fixture: the local model's server)

pytestmark = pytest.mark.e2e
QUESTION = "Who directed Lethal Weapon?"


async def test_the_sdk_asks_hopsearch_answering_with_the_local_model(
    llama: Settings,  # noqa: F811
    es8_node: EsNode,
) -> None:
    overrides: dict[str, Any] = {
        "es_url": [es8_node.url],
        "index_prefix": f"t{uuid.uuid4().hex[:10]}",
        "embedder": "none",
        "api_keys": [API_KEY],
        "llm_timeout": 300.0,
    }
    settings = load_settings(**{**llama.model_dump(), **overrides})
    store = await Store.connect(settings)
    try:
        await load_passages(store)
        async with uvicorn_serving_async(create_app(settings)) as url:
            client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=API_KEY, timeout=600, max_retries=0)
            messages: Any = [{"role": "user", "content": QUESTION}]
            chat = await client.chat.completions.create(model="hopsearch-single", messages=messages, max_tokens=16)
            stream = await client.chat.completions.create(
                model="hopsearch-single", messages=messages, max_tokens=16, stream=True
            )
            chunks = [chunk async for chunk in stream]
            extension = (chat.model_extra or {})["hopsearch"]
            trace = await store.get_document(settings.traces_index, extension["trace_id"])
    finally:
        await store.client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True)
        await store.close()
    content = chat.choices[0].message.content or ""
    assert content.split("\n\nReferences:")[0].strip(), content  # the model wrote an answer
    assert "[1] Lethal Weapon" in content and extension["citations"][0]["_id"] == "p-lethal"
    assert trace is not None and trace["status"] == "ok" and trace["model"] == llama.llm_model
    assert trace["options"]["max_tokens"] == 16 and chat.usage is not None and chat.usage.completion_tokens > 0
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "[1] Lethal Weapon" in streamed
    assert any((c.choices[0].delta.model_extra or {}).get("reasoning_content") for c in chunks if c.choices)
