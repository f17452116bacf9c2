"""A blank question (empty or only white space) is refused on every front end before anything runs (issue 51):
400 over HTTP (``_ask``, ``_retrieve``, Search-R1's ``/retrieve``, ``/v1/chat/completions``), an error on the
MCP ``ask`` and ``search`` tools, exit 2 on the command line's ``ask`` and ``search``; the scripted model
is never called and no trace is written. And ``/v1/models/{id}`` answers 200 for each model id chat takes
(``@passages``, ``@<the alias>``, ``@<one of its versions>``), 404 for the rest."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
from click.testing import CliRunner
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hopsearch.cli.main import main
from hopsearch.service.api import create_app
from tests.api_fixtures import API_KEY, Api, any_strategy_model, serving, uvicorn_serving_async
from tests.conftest import EsNode
from tests.dual_fixtures import deep_and_dual_model

BLANKS = ["", "   ", " \t\n "]
#: How each refusal says it: the check every front end goes through (``blank``), or a front end's own schema
#: for the empty string (pydantic's ``min_length``, the chat conversation's last message)
SAID = ("blank", "at least 1 character", "string_too_short", "has no text")


def says_blank(text: str) -> bool:
    return any(why in text for why in SAID)


async def _traces(api: Api) -> int:
    store = await api.store()
    if not await store.exists(api.settings.traces_index):
        return 0
    await store.refresh(api.settings.traces_index)
    found = await store.client.count(index=api.settings.traces_index)
    return int(found["count"])


async def _http(api: Api, blank: str) -> dict[str, Any]:
    alias = api.alias
    chat = {"model": "hopsearch-single", "messages": [{"role": "user", "content": blank}]}
    return {
        "_ask": await api.client.post(f"/{alias}/_ask", json={"question": blank, "strategy": "single"}),
        "_ask stream": await api.client.post(f"/{alias}/_ask", json={"question": blank, "stream": True}),
        "_retrieve": await api.client.post(f"/{alias}/_retrieve", json={"query": blank}),
        "/retrieve": await api.client.post("/retrieve", json={"queries": ["Lethal Weapon", blank]}),
        "/v1/chat": await api.client.post("/v1/chat/completions", json=chat),
    }


async def test_a_blank_question_is_refused_everywhere_with_no_retrieval_and_no_model_call(es_node: EsNode) -> None:
    async with serving(es_node.url, script=deep_and_dual_model(any_strategy_model)) as api:
        answers = {f"{route} {blank!r}": r for blank in BLANKS for route, r in (await _http(api, blank)).items()}
        async with uvicorn_serving_async(create_app(api.settings)) as url:
            keyed = httpx2.AsyncClient(headers={"Authorization": f"ApiKey {API_KEY}"}, timeout=60)
            async with keyed, Client(streamable_http_client(f"{url}/_mcp/", http_client=keyed)) as client:
                tools = {
                    f"mcp {tool} {blank!r}": await client.call_tool(tool, {key: blank})
                    for blank in BLANKS
                    for tool, key in (("ask", "question"), ("search", "query"))
                }
        env = {
            "HOPSEARCH_ES_URL": es_node.url,
            "HOPSEARCH_INDEX_PREFIX": api.settings.index_prefix,
            "HOPSEARCH_EMBEDDER": "none",
            "HOPSEARCH_LLM_BASE_URL": api.llm.base_url,
            "HOPSEARCH_LLM_MODEL": "scripted",
        }
        runner = CliRunner()
        cli = {
            f"cli {command} {blank!r}": await asyncio.to_thread(runner.invoke, main, [command, blank], env=env)
            for blank in BLANKS
            for command in ("ask", "search")
        }
        traces = await _traces(api)
        calls = len(api.llm.requests)
    for what, response in answers.items():
        assert response.status_code == 400, (what, response.text)
        assert says_blank(response.text), (what, response.text)
    for what, result in tools.items():
        assert result.is_error and says_blank(str(result.content)), (what, result)
    for what, result in cli.items():
        assert result.exit_code == 2 and says_blank(result.output), (what, result.output)
    assert calls == 0 and traces == 0


async def test_v1_models_answers_every_model_chat_takes(es_node: EsNode) -> None:
    async with serving(es_node.url, script=deep_and_dual_model(any_strategy_model)) as api:
        store = await api.store()
        version = await store.passages_index()
        names = ["hopsearch", "hopsearch-single", "hopsearch-single@passages", f"hopsearch-single@{api.alias}"]
        names += [f"hopsearch-deeprag@{version}"]
        missing = ["hopsearch-single@nothing-here", f"hopsearch-single@{api.alias}-v999", "hopsearch-nope@passages"]
        found = {name: await api.client.get(f"/v1/models/{name}") for name in names}
        absent = {name: await api.client.get(f"/v1/models/{name}") for name in missing}
        chats = {
            name: await api.client.post(
                "/v1/chat/completions",
                json={"model": name, "messages": [{"role": "user", "content": "When did the director die?"}]},
            )
            for name in [*names, *missing]
        }
    for name, response in found.items():
        assert response.status_code == 200 and response.json()["id"] == name, (name, response.text)
        assert chats[name].status_code == 200, (name, chats[name].text)
    for name, response in absent.items():
        assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found", name
        assert chats[name].status_code == 404, (name, chats[name].text)
