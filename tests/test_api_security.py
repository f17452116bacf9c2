"""API keys (401/403), limits (413/400/429) and credentials that never leave the service."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import orjson
import pytest

from hopsearch.service.api import create_app
from tests.api_fixtures import (
    API_KEY,
    ES_PASSWORD,
    ES_SECRET,
    LLM_SECRET,
    OTHER_KEY,
    QUESTION,
    api_settings,
    dead_url,
    serving,
)
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.test_api_routes import error_of

ROUTES = [
    ("GET", "/", None),
    ("GET", "/_metrics", None),
    ("POST", "/{alias}/_retrieve", {"query": "x"}),
    ("POST", "/{alias}/_ask", {"question": "q"}),
    ("GET", "/_traces/abc", None),
    ("GET", "/_outlines/abc", None),
    ("POST", "/_outlines/_search", {"query": "x"}),
    ("GET", "/_openapi.json", None),
    ("GET", "/no/such/route", None),
]


async def test_every_route_but_health_needs_a_key(es8_node: EsNode) -> None:
    async with serving(es8_node.url, load=False, headers={}) as api:
        for method, path, body in ROUTES:
            url = path.format(alias=api.alias)
            missing = await api.client.request(method, url, json=body)
            wrong = await api.client.request(method, url, json=body, headers={"Authorization": "ApiKey nope"})
            scheme = await api.client.request(method, url, json=body, headers={"Authorization": f"Basic {API_KEY}"})
            assert error_of(missing)[:2] == (401, "security_exception"), url
            assert "ApiKey" in missing.headers["www-authenticate"]
            assert error_of(wrong)[:2] == (403, "security_exception"), url
            assert error_of(scheme)[0] == 401, url
        health = await api.client.get("/_health")
        root_bearer = await api.client.get("/", headers={"Authorization": f"Bearer {OTHER_KEY}"})
        root_apikey = await api.client.get("/", headers={"Authorization": f"apikey {API_KEY}"})
        metrics = (await api.client.get("/_metrics", headers={"Authorization": f"Bearer {API_KEY}"})).text
    assert health.status_code == 200
    assert root_bearer.status_code == 200 and root_apikey.status_code == 200
    # Refused before routing, still counted under the route they were for.
    assert 'route="/{index}/_retrieve",status="401"' in metrics
    assert 'route="/{index}/_retrieve",status="403"' in metrics
    assert 'route="unmatched"' not in metrics


async def test_no_configured_keys_means_no_authentication_on_loopback_names_only(es8_node: EsNode) -> None:
    async with serving(es8_node.url, load=False, headers={}, api_keys=[]) as api:
        loopback = [
            await api.client.get("/", headers={"Host": host}) for host in ("localhost:9280", "127.0.0.1", "[::1]:80")
        ]
        with_origin = await api.client.get("/", headers={"Host": "localhost", "Origin": "http://127.0.0.1:5173"})
        rebound = await api.client.get("/", headers={"Host": "attacker.example:9280"})
        foreign_origin = await api.client.get("/", headers={"Host": "localhost", "Origin": "http://attacker.example"})
        health = await api.client.get("/_health/live", headers={"Host": "attacker.example"})
    assert [r.status_code for r in loopback] == [200, 200, 200] and with_origin.status_code == 200
    assert (
        error_of(rebound)[:2] == (403, "security_exception") and "Host [attacker.example:9280]" in error_of(rebound)[2]
    )
    assert error_of(foreign_origin)[0] == 403 and "Origin [http://attacker.example]" in error_of(foreign_origin)[2]
    assert health.status_code == 200


async def test_body_size_limit(es8_node: EsNode) -> None:
    async with serving(es8_node.url, api_max_body_bytes=2048) as api:
        url = f"/{api.alias}/_retrieve"
        big = orjson.dumps({"query": "Lethal " * 400})
        declared = await api.client.post(url, content=big, headers={"Content-Type": "application/json"})

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(big), 512):
                yield big[start : start + 512]

        chunked = await api.client.post(url, content=chunks(), headers={"Content-Type": "application/json"})
        small = await api.client.post(url, json={"query": "Lethal " * 100})
    assert error_of(declared)[:2] == (413, "content_too_long_exception")
    assert error_of(chunked)[:2] == (413, "content_too_long_exception")
    assert small.status_code == 200


async def test_question_length_and_k_limits(es8_node: EsNode) -> None:
    async with serving(es8_node.url, api_max_question_chars=50, api_max_k=20) as api:
        long_question = await api.client.post(f"/{api.alias}/_ask", json={"question": "why " * 20})
        long_query = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "q" * 51})
        big_k = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "x", "k": 21})
        big_ask_k = await api.client.post(f"/{api.alias}/_ask", json={"question": "q", "options": {"k": 21}})
        big_size = await api.client.post("/_outlines/_search", json={"size": 21})
        at_limit = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "q" * 50, "k": 20})
        schema = (await api.client.get("/_openapi.json")).json()["components"]["schemas"]
    assert error_of(long_question)[:2] == (400, "illegal_argument_exception")
    assert error_of(long_question)[2].startswith("[body.question]")
    assert error_of(long_query)[2].startswith("[body.query]")
    assert error_of(big_k)[2].startswith("[body.k] must be at most 20")
    assert error_of(big_ask_k)[2].startswith("[body.options.k]")
    assert error_of(big_size)[2].startswith("[body.size]")
    assert at_limit.status_code == 200
    assert schema["RetrieveRequest"]["properties"]["k"]["maximum"] == 20  # the document states the limits
    assert schema["AskRequest"]["properties"]["question"]["maxLength"] == 50
    assert api.llm.generation_requests == 0


async def test_concurrent_questions_over_the_limit_get_429(es8_node: EsNode) -> None:
    async with serving(es8_node.url, api_max_concurrent_asks=1) as api:
        api.llm.delay_first, api.llm.delay_s = 1, 1.0
        first = asyncio.create_task(api.client.post(f"/{api.alias}/_ask", json={"question": QUESTION}))
        for _ in range(200):
            if api.state.asks_in_flight:
                break
            await asyncio.sleep(0.01)
        refused = await api.client.post(f"/{api.alias}/_ask", json={"question": QUESTION})
        streamed = await api.client.post(f"/{api.alias}/_ask", params={"stream": "true"}, json={"question": QUESTION})
        done = await first
        after = await api.client.post(f"/{api.alias}/_ask", json={"question": QUESTION})
        in_flight = api.state.asks_in_flight
    assert error_of(refused)[:2] == (429, "es_rejected_execution_exception")
    assert error_of(streamed)[0] == 429
    assert done.status_code == 200 and after.status_code == 200
    assert in_flight == 0


@pytest.mark.parametrize("es_auth", ["api_key", "password_in_url"])
async def test_credentials_never_appear_in_responses_logs_or_traces(
    es_node: EsNode, es_auth: str, caplog: pytest.LogCaptureFixture
) -> None:
    node = es_node
    caplog.set_level(logging.DEBUG)
    secrets = [ES_SECRET, ES_PASSWORD, LLM_SECRET, API_KEY, OTHER_KEY]
    seen: list[str] = []
    # Elasticsearch URL with user-info and a password; the test nodes have security off and ignore both.
    es_url, es_creds = node.url, {}
    if es_auth == "password_in_url":
        es_url = node.url.replace("http://", f"http://elastic:{ES_PASSWORD}@")
        es_creds = {"es_api_key": None, "es_username": "elastic", "es_password": ES_PASSWORD}
    async with serving(es_url, **es_creds) as api:
        ok = await api.client.post(f"/{api.alias}/_ask", json={"question": QUESTION})
        stream = await api.client.post(f"/{api.alias}/_ask?stream=true", json={"question": QUESTION})
        api.llm.fail_first = 1000
        failed = await api.client.post(f"/{api.alias}/_ask", json={"question": QUESTION})
        failed_stream = await api.client.post(f"/{api.alias}/_ask?stream=true", json={"question": QUESTION})
        for response in (ok, failed):
            trace_id = response.json().get("trace_id") or response.json()["error"]["trace_id"]
            seen.append((await api.client.get(f"/_traces/{trace_id}")).text)
        seen += [ok.text, stream.text, failed.text, failed_stream.text]
        seen.append((await api.client.get("/_metrics")).text)
        seen.append((await api.client.get("/")).text)
        seen.append((await api.client.post("/nope/_retrieve", json={"query": "x"})).text)
        store = await api.store()
        raw = await store.search(api.settings.traces_index, {"size": 100, "query": {"match_all": {}}})
        seen.append(orjson.dumps(raw).decode())
    assert ok.status_code == 200 and failed.status_code == 503
    # Elasticsearch down, reached through a URL with a password in it.
    with server_for("vllm", lambda request: "x") as llm:
        dead_es = dead_url().removesuffix("/v1").replace("http://", f"http://elastic:{ES_PASSWORD}@")
        settings = api_settings(dead_es, llm, **es_creds)
        app = create_app(settings)
        import httpx

        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://h") as client:
                down = await client.get("/", headers={"Authorization": f"ApiKey {API_KEY}"})
                health = await client.get("/_health")
    assert error_of(down)[:2] == (503, "connect_exception") and health.status_code == 503
    assert "127.0.0.1" in error_of(down)[2]  # the reason still says where
    seen += [down.text, health.text]
    seen += [record.getMessage() for record in caplog.records]
    seen += [str(record.args) for record in caplog.records]
    text = "\n".join(seen)
    assert len(caplog.records) > 0
    for secret in secrets:
        assert secret not in text, secret
