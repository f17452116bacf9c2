"""Liveness and readiness: ``/_health/live`` asks nothing; ``/_health`` (readiness) reports a model
that is busy generating as busy (200, ``yellow``), never as down — llama.cpp answers ``/v1/models``
only between generations. Against the real Elasticsearch and a one-slot scripted server."""

from __future__ import annotations

import asyncio

import httpx

from tests.api_fixtures import dead_url, serving
from tests.conftest import EsNode
from tests.one_slot_llm import OneSlotLLM


async def _until(event_is_set: object, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if event_is_set():  # type: ignore[operator]
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the generation did not start")


async def test_health_stays_ready_while_our_own_generation_runs(es8_node: EsNode) -> None:
    with OneSlotLLM() as slot:
        async with serving(es8_node.url, load=False, headers={}, llm_base_url=[slot.base_url]) as api:
            runtime = await api.state.runtime()
            generation = asyncio.create_task(runtime.llm.complete("Write a long story.", max_tokens=512))
            await _until(slot.generating.is_set)
            during = await api.client.get("/_health")
            live = await api.client.get("/_health/live")
            slot.finish()
            completion = await generation
            after = await api.client.get("/_health")
    assert during.status_code == 200, during.text
    body = during.json()
    assert body["status"] == "yellow" and body["ready"] is True
    assert body["llm"]["reachable"] is True and body["llm"]["state"] == "busy"
    assert body["llm"]["servers"][0]["in_flight"] == 1
    assert live.status_code == 200 and live.json() == {"status": "alive"}
    assert completion.text == " done"
    assert after.status_code == 200 and after.json()["status"] == "green"
    assert after.json()["llm"]["state"] == "ready"


async def test_a_slow_open_connection_is_busy_not_down(es8_node: EsNode) -> None:
    """A generation this process did not send (another client of the same server) keeps the server
    silent too: an open connection without an answer is busy."""
    with OneSlotLLM() as slot:
        overrides = {"llm_base_url": [slot.base_url], "health_timeout": 0.5}
        async with serving(es8_node.url, load=False, headers={}, **overrides) as api, httpx.AsyncClient() as other:
            body = {"model": "scripted", "prompt": "Write a long story.", "max_tokens": 512}
            generation = asyncio.create_task(other.post(f"{slot.base_url}/completions", json=body, timeout=30))
            await _until(slot.generating.is_set)
            during = await api.client.get("/_health")
            slot.finish()
            await generation
    assert during.status_code == 200, during.text
    assert during.json()["llm"]["state"] == "busy" and during.json()["llm"]["servers"][0]["in_flight"] == 0


async def test_a_refused_connection_is_not_ready_but_alive(es8_node: EsNode) -> None:
    async with serving(es8_node.url, load=False, headers={}, llm_base_url=[dead_url()]) as api:
        ready = await api.client.get("/_health")
        live = await api.client.get("/_health/live")
    assert ready.status_code == 503 and ready.json()["status"] == "red"
    assert ready.json()["llm"]["state"] == "unreachable" and "connect" in ready.json()["llm"]["servers"][0]["error"]
    assert live.status_code == 200
