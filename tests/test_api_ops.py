"""Operating the HTTP service: a client that disconnects frees its slot, 429s say when to retry, limits
name their real bound, refused filters name the filter, metrics label refused requests with their
route, and long silent streams carry a heartbeat. Real Elasticsearch, real uvicorn where it matters."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from hopsearch.service.api import create_app
from hopsearch.service.api.state import ApiState
from hopsearch.service.store import Store
from tests.api_fixtures import API_KEY, MODEL, QUESTION, api_settings, load_passages, serving, uvicorn_serving
from tests.conftest import EsNode
from tests.llm_fixtures import server_for

HEADERS = {"Authorization": f"ApiKey {API_KEY}"}


async def _until(check: Any, seconds: float = 20.0) -> bool:
    for _ in range(int(seconds / 0.05)):
        if check():
            return True
        await asyncio.sleep(0.05)
    return bool(check())


async def test_a_client_that_disconnects_frees_its_slot_and_429_says_when_to_retry(es8_node: EsNode) -> None:
    with server_for("vllm", MODEL, hang=True) as llm:
        # The model never answers and the LLM timeout is long: only the disconnect can free the slot.
        limits = {"api_max_concurrent_asks": 1, "api_retry_after_s": 2, "llm_timeout": 600.0, "llm_retries": 0}
        settings = api_settings(es8_node.url, llm, **limits)
        store = await Store.connect(settings)
        try:
            await load_passages(store)
            app = create_app(settings)
            state: ApiState = app.state.api
            with uvicorn_serving(app) as base:
                url = f"/{settings.passages_alias}/_ask"
                async with httpx.AsyncClient(base_url=base, headers=HEADERS, timeout=30) as client:
                    gone = asyncio.create_task(client.post(url, json={"question": QUESTION}, timeout=60))
                    assert await _until(lambda: llm.in_flight == 1), "the question never reached the model"
                    refused = await client.post(url, json={"question": QUESTION})
                    gone.cancel()  # the client goes away while the model is still "generating"
                    with pytest.raises(asyncio.CancelledError):
                        await gone
                    freed = await _until(lambda: state.asks_in_flight == 0, seconds=15.0)
                    metrics = (await client.get("/_metrics")).text
        finally:
            await store.client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True)
            await store.close()
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "2"
    assert freed, f"asks_in_flight stayed {state.asks_in_flight} after the client left"
    assert "hopsearch_asks_in_flight 0.0" in metrics


async def test_k_over_the_limit_names_the_configured_limit(es8_node: EsNode) -> None:
    async with serving(es8_node.url, load=False) as api:
        huge = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "x", "k": 100000})
        over = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "x", "k": 101})
        ask = await api.client.post(f"/{api.alias}/_ask", json={"question": "x", "options": {"k": 100000}})
    for response, field in ((huge, "body.k"), (over, "body.k"), (ask, "body.options.k")):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["field"] == field
        assert "at most 100 (HOPSEARCH_API_MAX_K)" in error["reason"] and "10000" not in error["reason"]


async def test_a_refused_range_filter_names_the_filter(es_node: EsNode) -> None:
    async with serving(es_node.url) as api:
        filters = [{"term": {"source": "jsonl"}}, {"range": {"chunk": {"gte": "abc"}}}]
        response = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "Donner", "filters": filters})
        good = await api.client.post(
            f"/{api.alias}/_retrieve", json={"query": "Donner", "filters": [{"range": {"chunk": {"gte": 0}}}]}
        )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "request_invalid_exception" or error["type"].endswith("exception")
    # Checked before Elasticsearch sees it: the error names the filter down to the bad bound.
    assert error["field"] == "body.filters.1.range.chunk.gte", error
    assert "chunk" in error["reason"] and "abc" in error["reason"], error
    assert good.status_code == 200 and good.json()["hits"]["hits"]


async def test_metrics_label_refused_requests_and_the_openapi_document_with_their_route(es8_node: EsNode) -> None:
    async with serving(es8_node.url, load=False, headers={}) as api:
        assert (await api.client.post(f"/{api.alias}/_retrieve", json={"query": "x"})).status_code == 401
        assert (await api.client.get("/_metrics")).status_code == 401
        assert (await api.client.get("/_openapi.json", headers=HEADERS)).status_code == 200
        metrics = (await api.client.get("/_metrics", headers=HEADERS)).text
    assert 'hopsearch_http_requests_total{method="POST",route="/{index}/_retrieve",status="401"} 1.0' in metrics
    assert 'hopsearch_http_requests_total{method="GET",route="/_metrics",status="401"} 1.0' in metrics
    assert 'hopsearch_http_requests_total{method="GET",route="/_openapi.json",status="200"} 1.0' in metrics
    assert 'route="unmatched"' not in metrics


async def test_a_silent_stream_sends_keep_alive_comments(es8_node: EsNode) -> None:
    script = server_for("vllm", MODEL, delay_first=100, delay_s=0.4)
    with script as llm:
        settings = api_settings(es8_node.url, llm, api_sse_heartbeat_s=0.1)
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            state: ApiState = app.state.api
            runtime = await state.runtime()
            try:
                await load_passages(runtime.store)
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://h", headers=HEADERS) as client:
                    url = f"/{settings.passages_alias}/_ask?stream=true"
                    text = (await client.post(url, json={"question": QUESTION}, timeout=60)).text
            finally:
                await runtime.store.client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True)
    blocks = text.strip().split("\n\n")
    comments = [block for block in blocks if block.startswith(":")]
    events = [block for block in blocks if not block.startswith(":")]
    assert comments and set(comments) == {": keep-alive"}
    assert events[-1].startswith("event: answer")
