"""The proxy against an attacker's request lines (issue 27, items 1, 2 and 10), through a real uvicorn
over a real node: paths are sent with ``http.client`` and a hand-written request line (httpx and
requests would normalise ``..`` away before hopsearch saw it), and what reached the cluster is read
back from the cluster itself (and from a :class:`~tests.counting_proxy.CountingProxy` in between)."""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import uuid
from typing import Any
from urllib.parse import urlsplit

import elasticsearch
import httpx
import pytest

from hopsearch.service.api.proxy.espath import parse_request
from hopsearch.service.api.proxy.forwarder import AllowList
from hopsearch.service.errors import ConfigError
from tests.api_fixtures import API_KEY
from tests.conftest import EsNode
from tests.counting_proxy import CountingProxy
from tests.test_api_clients import front, official_client

KEY = {"X-Hopsearch-Key": API_KEY}


def raw_request(
    url: str, method: str, target: str, headers: dict[str, str] | None = None, body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request with ``target`` as the request line's path, byte for byte (``http.client`` neither
    normalises nor re-encodes it) and no ``Accept-Encoding`` unless ``headers`` has one."""
    where = urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=60)
    try:
        connection.putrequest(method, target, skip_accept_encoding=True)
        for name, value in {**KEY, **(headers or {})}.items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Type", "application/json")
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


async def send(url: str, method: str, target: str, **more: Any) -> tuple[int, dict[str, str], bytes]:
    return await asyncio.to_thread(raw_request, url, method, target, **more)


def error_type(body: bytes) -> str:
    envelope = json.loads(body)
    assert envelope["status"] >= 400 and envelope["error"]["root_cause"][0]["type"] == envelope["error"]["type"]
    return str(envelope["error"]["type"])


async def put_doc(es_url: str, index: str, doc_id: str, text: str) -> None:
    async with httpx.AsyncClient(base_url=es_url, timeout=60) as es:
        answer = await es.put(f"/{index}/_doc/{doc_id}", params={"refresh": "true"}, json={"text": text})
        assert answer.status_code in (200, 201), answer.text


async def test_dot_segments_and_encoded_separators_never_reach_another_index(es_node: EsNode) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    public, secret = f"{prefix}-public", f"{prefix}-secret"
    await put_doc(es_node.url, public, "pub-1", "open words")
    await put_doc(es_node.url, secret, "s-1", "salary of everyone")
    escapes = [
        f"/{public}/../{secret}/_search",
        f"/{public}/%2E%2E/{secret}/_search",
        f"/{public}/%2e./{secret}/_search",
        f"/{public}/..%2F{secret}/_search",
        f"/{public}%2F..%2F{secret}/_search",
        f"/{public}/..%5C{secret}/_search",
        f"/{public}/%252E%252E/{secret}/_search",
        f"/{public}/./../{secret}/_search",
        f"/{public}//../{secret}/_search",
        f"/{public}/x/../../{secret}/_search",
    ]
    proxy = CountingProxy(es_node.url)
    allow = f"GET /{public}/**,POST /{public}/**"
    try:
        async with front(await proxy.start(), index_prefix=prefix, proxy_allow=allow) as (url, _):
            proxy.reset()
            write = await send(url, "POST", f"/{public}/../{secret}/_doc/evil5", body=b'{"text": "evil"}')
            reads = [await send(url, "GET", target) for target in escapes]
            direct = await send(url, "GET", f"/{secret}/_search")
            plain = await send(url, "GET", f"/{public}/_search")
            decoded = await send(url, "GET", f"/{public}/%5Fsearch")  # decoded as the cluster decodes it
            seen = list(proxy.credentials)
            async with httpx.AsyncClient(base_url=es_node.url, timeout=60) as es:  # before the indices go
                await es.post(f"/{secret}/_refresh")
                evil = await es.get(f"/{secret}/_doc/evil5")
                count = (await es.get(f"/{secret}/_count")).json()["count"]
    finally:
        await proxy.stop()
    assert write[0] == 400 and error_type(write[2]) == "illegal_argument_exception"
    assert "dot segment" in json.loads(write[2])["error"]["reason"]
    assert evil.status_code == 404 and count == 1  # nothing was written to the other index
    for target, (status, _, body) in zip(escapes, reads, strict=True):
        assert status == 400 and error_type(body) == "illegal_argument_exception", target
        assert b"salary" not in body and b"s-1" not in body, target
    assert direct[0] == 403 and error_type(direct[2]) == "security_exception"  # the allow-list still decides
    for status, _, body in (plain, decoded):
        assert status == 200 and [h["_id"] for h in json.loads(body)["hits"]["hits"]] == ["pub-1"]
    assert not [path for _, path, _ in seen if secret in path]  # none of it reached the cluster
    assert [path for _, path, _ in seen if public in path] == [f"/{public}/_search"] * 2


async def test_hopsearch_prefixes_never_fall_through_to_the_cluster(es8_node: EsNode) -> None:
    proxy = CountingProxy(es8_node.url)
    try:
        async with front(await proxy.start()) as (url, settings):
            alias = settings.passages_alias
            targets = [
                f"/_ui/traces/abc%2F..%2F..%2F{alias}%2F_search",
                "/_ui/traces/a%2Fb",
                "/_traces/..%2F..",
                f"/_traces/..%2F..%2F{alias}%2F_search",
                "/_outlines/a%2Fb/c",
                "/_health/x",
                "/_metrics/x",
                "/retrieve/x",
                "/_openapi.json/x",
                f"/{alias}/_retrieve/x",
                f"/{alias}/_ask/x",
                "/_keys/k1",  # GET /_keys is the route listing keys; /_keys/{name} only revokes
                "/_keys/k1/x",
                "/_groups/g1",
                "//_ui/traces/a%2Fb",
            ]
            proxy.reset()
            answers = [await send(url, "GET", target) for target in targets]
            seen = list(proxy.credentials)
    finally:
        await proxy.stop()
    assert seen == []  # not one of them reached the cluster
    for target, (status, _, body) in zip(targets, answers, strict=True):
        assert status in (400, 404, 405), (target, status, body[:200])
        assert error_type(body) in ("resource_not_found_exception", "method_not_allowed_exception"), target


@pytest.mark.parametrize("major", [8, 7])
async def test_the_default_passes_reads_on_indices_and_nothing_cluster_wide(es_node: EsNode, major: int) -> None:
    refused = [
        ("GET", "/_flush"),
        ("GET", "/_refresh"),
        ("GET", "/_cluster/settings"),
        ("GET", "/_nodes/hot_threads"),
        ("GET", "/_tasks?detailed"),
        ("GET", "/_cat/indices"),
        ("GET", "/_nodes/_search"),
        ("HEAD", "/_flush"),
        ("GET", "/{alias}/_settings"),
        ("POST", "/{alias}/_refresh"),
        ("GET", "/{alias}/_flush"),
        ("POST", "/{alias}/_doc/x"),
    ]
    async with front(es_node.url) as (url, settings):
        alias = settings.passages_alias
        answers = [await send(url, method, path.format(alias=alias)) for method, path in refused]
        root = json.loads((await send(url, "GET", "/"))[2])
        client = official_client(major, url, headers=KEY)
        try:
            reads = await client_reads(client, alias)
        finally:
            await client.close()
    for (method, path), (status, _, body) in zip(refused, answers, strict=True):
        assert status == 403, (method, path, status, body[:200])
        if method != "HEAD":
            assert error_type(body) == "security_exception" and b"proxy_allow" in body, path
    assert "proxy_allow" not in root["hopsearch"]["capabilities"]
    assert "_search" not in json.dumps(root)  # nothing of the allow-list is shown
    assert reads == {
        "exists": True,
        "doc_exists": True,
        "found": "p-donner",
        "count": 3,
        "get": "Richard Donner",
        "mget": ["p-donner", "p-jaws"],
        "msearch": [1, 1],
        "mapping": True,
        "field_caps": True,
        "scrolled": 2,
        "pit": True,
    }


async def client_reads(client: Any, alias: str) -> dict[str, Any]:
    """The read calls a back end makes, with the official client of either major version."""

    def body(value: Any) -> dict[str, Any]:
        return dict(getattr(value, "body", value))

    v8 = isinstance(client, elasticsearch.AsyncElasticsearch)
    query = {"match": {"text": "Donner"}}
    found = await (client.search(index=alias, query=query) if v8 else client.search(index=alias, body={"query": query}))
    count = await (client.count(index=alias, query=query) if v8 else client.count(index=alias, body={"query": query}))
    docs = {"ids": ["p-donner", "p-jaws"]}
    mget = await (client.mget(index=alias, ids=docs["ids"]) if v8 else client.mget(index=alias, body=docs))
    searches = [{}, {"query": query}, {}, {"query": {"match": {"text": "Jaws"}}}]
    msearch = await (
        client.msearch(index=alias, searches=searches) if v8 else client.msearch(index=alias, body=searches)
    )
    scroll = await (
        client.search(index=alias, scroll="1m", size=2, query={"match_all": {}})
        if v8
        else client.search(index=alias, scroll="1m", size=2, body={"query": {"match_all": {}}})
    )
    page = await client.scroll(scroll_id=body(scroll)["_scroll_id"], scroll="1m")
    await client.clear_scroll(scroll_id=body(page)["_scroll_id"])
    pit = await client.open_point_in_time(index=alias, keep_alive="1m")
    pit_id = body(pit)["id"]
    closed = await (client.close_point_in_time(id=pit_id) if v8 else client.close_point_in_time(body={"id": pit_id}))
    mapping = body(await client.indices.get_mapping(index=alias))
    if v8:  # the 8.x client sends `fields` in a body, which a 7.17 node does not read
        json_type = {"accept": "application/json"}
        caps = body(await client.perform_request("GET", f"/{alias}/_field_caps?fields=text", headers=json_type))
    else:
        caps = body(await client.field_caps(index=alias, fields="text"))
    get = body(await client.get(index=alias, id="p-donner"))
    return {
        "exists": bool(await client.indices.exists(index=alias)),
        "doc_exists": bool(await client.exists(index=alias, id="p-donner")),
        "found": body(found)["hits"]["hits"][0]["_id"],
        "count": body(count)["count"],
        "get": get["_source"]["title"],
        "mget": [d["_id"] for d in body(mget)["docs"] if d["found"]],
        "msearch": [len(r["hits"]["hits"][:1]) for r in body(msearch)["responses"]],
        "mapping": any("text" in m["mappings"].get("properties", {}) for m in mapping.values()),
        "field_caps": "text" in caps["fields"],
        "scrolled": len(body(page)["hits"]["hits"]),
        "pit": body(closed)["succeeded"] is True,
    }


async def test_a_caller_that_asked_for_no_encoding_gets_plain_json(es_node: EsNode) -> None:
    async with front(es_node.url) as (url, settings):
        target = f"/{settings.passages_alias}/_search?q=Donner"
        plain = await send(url, "GET", target)
        identity = await send(url, "GET", target, headers={"Accept-Encoding": "identity"})
        gzipped = await send(url, "GET", target, headers={"Accept-Encoding": "gzip"})
    for status, headers, body in (plain, identity):
        assert status == 200 and "content-encoding" not in headers
        assert json.loads(body)["hits"]["hits"][0]["_id"] == "p-donner"
    status, headers, body = gzipped
    assert status == 200 and headers["content-encoding"] == "gzip"  # the cluster's gzip, streamed on
    assert json.loads(gzip.decompress(body))["hits"]["hits"][0]["_id"] == "p-donner"


async def test_an_answer_compressed_on_the_way_is_decoded_for_a_caller_that_did_not_ask(es8_node: EsNode) -> None:
    """The counting proxy stands in for a hop that asks the node for gzip on its own (aiohttp's client
    adds ``Accept-Encoding: gzip, deflate`` to a request that has none), as a load balancer may."""
    proxy = CountingProxy(es8_node.url)
    try:
        async with front(await proxy.start()) as (url, settings):
            target = f"/{settings.passages_alias}/_search?q=Donner"
            plain = await send(url, "GET", target)
            gzipped = await send(url, "GET", target, headers={"Accept-Encoding": "gzip"})
            refused_gzip = await send(url, "GET", target, headers={"Accept-Encoding": "gzip;q=0, identity"})
    finally:
        await proxy.stop()
    for status, headers, body in (plain, refused_gzip):
        assert status == 200 and "content-encoding" not in headers
        assert int(headers.get("content-length", len(body))) == len(body)
        assert json.loads(body)["hits"]["hits"][0]["_id"] == "p-donner"
    assert gzipped[1]["content-encoding"] == "gzip"
    assert json.loads(gzip.decompress(gzipped[2]))["hits"]["hits"][0]["_id"] == "p-donner"


def test_a_path_is_parsed_into_its_index_expression_and_endpoint() -> None:
    """What a policy on indices reads (issue 27: hopsearch's own indices for admins only)."""
    search = parse_request("POST", b"/a,logs-%2A,-x/_search")
    assert (search.index, search.indices, search.endpoint) == ("a,logs-*,-x", ("a", "logs-*", "-x"), ("_search",))
    assert search.target == "/a,logs-*,-x/_search"
    assert parse_request("GET", b"/_all/_doc/1").indices == ("_all",)
    nodes = parse_request("GET", b"/_nodes/_search")
    assert (nodes.index, nodes.endpoint) == (None, ("_nodes", "_search"))
    assert parse_request("GET", b"/a,_nodes/_search").index is None  # an endpoint hidden in a list is no index
    assert parse_request("GET", b"/%3Cx%3E/_doc/a%20b?q=1").target == "/%3Cx%3E/_doc/a%20b"


def test_a_pattern_that_is_not_method_and_path_is_a_settings_error() -> None:
    for bad in ("GET", "/_search", "GET _search", "G-T /x"):
        with pytest.raises(ConfigError, match="proxy_allow"):
            AllowList.of([bad])
    allow = AllowList.of(["GET|HEAD /{index}/_doc/*"])
    assert allow.allows(parse_request("HEAD", b"/a,b/_doc/1"))
    assert not allow.allows(parse_request("GET", b"/_cluster/_doc/1"))
    assert not allow.allows(parse_request("PUT", b"/a/_doc/1"))
