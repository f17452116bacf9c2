"""``POST /{index}/_ask`` with ``stream=true``: Server-Sent Events, one per step, then the answer."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson

from hopsearch.service.api import create_app
from hopsearch.service.store import Store
from tests.api_fixtures import API_KEY, MODEL, QUESTION, api_settings, load_passages, serving, uvicorn_serving
from tests.conftest import EsNode
from tests.llm_fixtures import server_for


def events_of(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], orjson.loads(lines["data"])))
    return events


async def test_steps_stream_as_they_happen_then_the_answer(es_node: EsNode) -> None:
    async with serving(es_node.url) as api:
        url = f"/{api.alias}/_ask"
        async with api.client.stream("POST", url, params={"stream": "true"}, json={"question": QUESTION}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            chunks = [chunk async for chunk in response.aiter_text()]
        by_body = await api.client.post(url, json={"question": QUESTION, "stream": True})
        off = await api.client.post(url, params={"stream": "false"}, json={"question": QUESTION, "stream": True})
        events = events_of("".join(chunks))
        *steps, (last, answer) = events
        trace = (await api.client.get(f"/_traces/{answer['trace_id']}")).json()["_source"]
    assert last == "answer" and answer["answer"] == "2021" and answer["citations"][0]["_id"] == "p-lethal"
    assert {name for name, _ in steps} == {"step"}
    assert [s["index"] for _, s in steps] == list(range(len(steps)))
    # Exactly the trace's steps, in order: generate → retrieve → answer → generate → answer → generate → answer.
    assert [s["kind"] for _, s in steps] == [s["kind"] for s in trace["steps"]]
    assert [s["kind"] for _, s in steps][:3] == ["generate", "retrieve", "answer"]
    assert steps[0][1]["decision"] == "retrieve" and steps[1][1]["hit_ids"][0] == "p-lethal"
    assert answer["totals"]["steps"] == len(steps)
    assert events_of(by_body.text)[-1][0] == "answer"
    assert off.headers["content-type"].startswith("application/json") and off.json()["answer"] == "2021"


async def test_a_failure_mid_stream_ends_with_an_error_event(es8_node: EsNode) -> None:
    async with serving(es8_node.url, llm_retries=0) as api:
        api.llm.fail_first = 1000
        response = await api.client.post(f"/{api.alias}/_ask?stream=true", json={"question": QUESTION})
        in_flight = api.state.asks_in_flight
    events = events_of(response.text)
    name, error = events[-1]
    assert response.status_code == 200  # the stream had started; the error is its last event
    assert name == "error" and error["status"] == 503 and error["error"]["type"] == "llm_unavailable_exception"
    assert error["error"]["trace_id"]
    assert all(name == "step" for name, _ in events[:-1])
    assert in_flight == 0


async def test_over_real_http_each_step_arrives_before_the_answer_is_ready(es8_node: EsNode) -> None:
    with server_for("vllm", MODEL, delay_first=100, delay_s=0.15) as llm:
        settings = api_settings(es8_node.url, llm)
        store = await Store.connect(settings)
        try:
            await load_passages(store)
            with uvicorn_serving(create_app(settings)) as base:
                arrivals: list[tuple[float, str]] = []
                started = time.monotonic()
                headers = {"Authorization": f"ApiKey {API_KEY}"}
                async with (
                    httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client,
                    client.stream(
                        "POST", f"/{settings.passages_alias}/_ask?stream=true", json={"question": QUESTION}
                    ) as r,
                ):
                    async for line in r.aiter_lines():
                        if line.startswith("event: "):
                            arrivals.append((time.monotonic() - started, line[7:]))
        finally:
            await store.client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True)
            await store.close()
    names = [name for _, name in arrivals]
    assert names[-1] == "answer" and set(names[:-1]) == {"step"} and len(names) == 8
    # Six generations of 0.15 s each: the first step is out well before the answer exists.
    assert arrivals[-1][0] - arrivals[0][0] > 0.5
