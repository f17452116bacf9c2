"""The official Python clients (``elasticsearch`` 8.x and ``elasticsearch7`` 7.17) pointed at hopsearch,
against both node versions: ping, info and search go through to the cluster, ``_retrieve`` and ``_ask``
are hopsearch's, a write outside the allow-list is refused in Elasticsearch's envelope, and the caller's
own credentials (never the service's, never a hopsearch key) are what reaches the node."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import elasticsearch
import elasticsearch7
import pytest

from hopsearch.service.api import create_app
from hopsearch.service.config.settings import Settings
from hopsearch.service.store import Store
from tests.api_fixtures import API_KEY, ES_SECRET, MODEL, QUESTION, api_settings, load_passages, uvicorn_serving_async
from tests.conftest import EsNode
from tests.counting_proxy import CountingProxy
from tests.llm_fixtures import server_for

CALLER = ("caller", "caller-password-1")
CALLER_BASIC = "Basic " + base64.b64encode(f"{CALLER[0]}:{CALLER[1]}".encode()).decode()


def official_client(major: int, url: str, **auth: Any) -> Any:
    """The client of that major version; ``auth``: ``basic`` (user, password), ``api_key``, ``headers``."""
    if major == 8:
        return elasticsearch.AsyncElasticsearch(
            url, basic_auth=auth.get("basic"), api_key=auth.get("api_key"), headers=auth.get("headers")
        )
    return elasticsearch7.AsyncElasticsearch(
        [url], http_auth=auth.get("basic"), api_key=auth.get("api_key"), headers=auth.get("headers")
    )


async def perform(client: Any, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    if isinstance(client, elasticsearch.AsyncElasticsearch):
        json = {"content-type": "application/json", "accept": "application/json"}
        response = await client.perform_request(method, path, body=body, headers=json)
        return dict(response.body)
    answer: dict[str, Any] = await client.transport.perform_request(method, path, body=body)
    return answer


async def search(client: Any, index: str, text: str) -> dict[str, Any]:
    query = {"match": {"text": text}}
    if isinstance(client, elasticsearch.AsyncElasticsearch):
        return dict((await client.search(index=index, query=query, size=3)).body)
    found: dict[str, Any] = await client.search(index=index, body={"query": query}, size=3)
    return found


def status_and_body(exc: Exception) -> tuple[int, dict[str, Any]]:
    if isinstance(exc, elasticsearch.ApiError):
        return exc.meta.status, dict(exc.body)
    assert isinstance(exc, elasticsearch7.TransportError)
    return int(exc.status_code), dict(exc.info)


@contextlib.asynccontextmanager
async def front(es_url: str, **overrides: Any) -> AsyncIterator[tuple[str, Settings]]:
    """hopsearch under a real uvicorn over ``es_url``, the sample passages loaded; yields its URL."""
    with server_for("vllm", MODEL) as llm:
        settings = api_settings(es_url, llm, **overrides)
        store = await Store.connect(settings)
        try:
            await load_passages(store)
            async with uvicorn_serving_async(create_app(settings)) as url:
                yield url, settings
        finally:
            with contextlib.suppress(Exception):
                await store.client.indices.delete(index=f"{settings.index_prefix}-*", ignore_unavailable=True)
            await store.close()


@pytest.mark.parametrize("major", [8, 7])
async def test_official_clients_through_hopsearch(es_node: EsNode, major: int) -> None:
    proxy = CountingProxy(es_node.url)
    try:
        async with front(await proxy.start()) as (url, settings):
            alias = settings.passages_alias
            client = official_client(major, url, basic=CALLER, headers={"X-Hopsearch-Key": API_KEY})
            keyed = official_client(major, url, api_key=API_KEY)
            try:
                assert await client.ping() is True
                info = dict(await client.info())
                found = await search(client, alias, "Donner")
                retrieve = await perform(client, "POST", f"/{alias}/_retrieve", {"query": "Lethal Weapon", "k": 2})
                answer = await perform(client, "POST", f"/{alias}/_ask", {"question": QUESTION})
                with pytest.raises((elasticsearch.ApiError, elasticsearch7.TransportError)) as refused:
                    await client.index(index=alias, id="p-new", body={"title": "x", "text": "y"})
                keyed_found = await search(keyed, alias, "Spielberg")
            finally:
                await client.close()
                await keyed.close()
    finally:
        await proxy.stop()
    assert info["version"]["number"].startswith(es_node.label) and info["tagline"] == "You Know, for Search"
    assert info["hopsearch"]["capabilities"]["passages_index"] == alias
    assert found["hits"]["hits"][0]["_id"] == "p-donner"  # Elasticsearch's own answer, proxied
    assert keyed_found["hits"]["hits"][0]["_id"] in {"p-spielberg", "p-jaws"}
    assert retrieve["hits"]["hits"][0]["_id"] in {"p-lethal", "p-lethal2"} and retrieve["mode"] == "bm25"
    assert answer["answer"] == "2021" and answer["trace_id"]
    status, body = status_and_body(refused.value)
    assert status == 403 and body["status"] == 403 and body["error"]["type"] == "security_exception"
    assert "proxy_allow" in body["error"]["reason"]
    # Proxied requests carry the caller's Authorization (or none: a hopsearch key is no ES credential);
    # the service's own requests (_retrieve's _msearch) carry the service's.
    proxied = [(m, p, a) for m, p, a in proxy.credentials if p.endswith(f"{alias}/_search")]
    assert {a for _, p, a in proxied if p.endswith("/_search")} == {CALLER_BASIC, None}
    assert {a for _, p, a in proxy.credentials if p == "/_msearch"} == {f"ApiKey {ES_SECRET}"}
    assert not any(a and API_KEY in a for _, _, a in proxy.credentials)
    assert not any(p.endswith("/_doc/p-new") for _, p, _ in proxy.credentials)  # refused before the node


async def test_hopsearch_key_gates_the_proxy_and_streams_bulk_when_allowed(es8_node: EsNode) -> None:
    async with front(es8_node.url, proxy_allow="GET /**,HEAD /**,PUT /_bulk,POST /*/_search") as (url, settings):
        alias = settings.passages_alias
        anonymous = official_client(8, url)
        client = official_client(8, url, api_key=API_KEY)
        try:
            with pytest.raises(elasticsearch.ApiError) as missing:
                await anonymous.search(index=alias, query={"match_all": {}})
            lines = [{"index": {"_index": alias, "_id": f"b{i}"}} for i in range(200)]
            body = [item for line in lines for item in (line, {"title": "bulk", "text": "x " * 200})]
            bulk = await client.bulk(operations=body, refresh=True)
            count = await client.search(index=alias, query={"term": {"title": "bulk"}}, size=0)
        finally:
            await anonymous.close()
            await client.close()
    assert missing.value.meta.status == 401 and missing.value.body["error"]["type"] == "security_exception"
    assert bulk.body["errors"] is False and len(bulk.body["items"]) == 200
    assert count.body["hits"]["total"]["value"] == 200
