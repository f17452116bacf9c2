"""A key's index patterns as an attacker probes them, over real HTTP (uvicorn) on a real node: every route
that takes an index — ``_retrieve``, ``_ask`` (one body and streamed), ``POST /retrieve``, the MCP ``search``
and ``ask`` tools, ``/v1/models/{model}`` and ``/v1/chat/completions`` (one body and streamed), the proxy —
is asked for an attached index outside the key's patterns (its document readable by ``public``, carrying a
marker), a plain index outside them, and a name outside them that exists nowhere. The three answers are
the same (status and body, the name aside: existence leaks nothing), a 403 naming the key's patterns, and
the marker never appears. Inside the patterns an attached index answers and a missing name is a 404."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hopsearch.service.attached.fieldmap import Attachment, field_map
from hopsearch.service.store import Store
from tests.api_fixtures import any_strategy_model
from tests.conftest import EsNode
from tests.openai_fixtures import Served, openai_serving

MAPPINGS = {
    "properties": {
        "title": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
        "body": {"type": "text"},
        "acl": {"type": "keyword"},
    }
}
QUERY = "salary handbook minutes"
#: A route's answer as compared: (status, body) — MCP tools: (error or not, text).
Answer = tuple[int, str]


async def _make(store: Store, name: str, marker: str, *, attach: bool) -> None:
    await store.client.indices.create(index=name, body={"mappings": MAPPINGS})
    doc = {"title": f"Record {marker}", "body": f"The salary handbook minutes say {marker}.", "acl": ["public"]}
    await store.client.index(index=name, id=f"doc-{marker}", body=doc, refresh=True)
    if attach:
        await store.attach(Attachment(name, field_map(None, title="title", text="body", acl="acl")))


async def _mcp(url: str, secret: str, tool: str, arguments: dict[str, Any]) -> Answer:
    keyed = httpx2.AsyncClient(headers={"Authorization": f"ApiKey {secret}"}, timeout=60)
    async with keyed, Client(streamable_http_client(f"{url}/_mcp/", http_client=keyed)) as client:
        found = await client.call_tool(tool, arguments)
    text = "".join(str(getattr(part, "text", part)) for part in found.content)
    return (1 if found.is_error else 0), text


def _routes(served: Served, secret: str) -> dict[str, Callable[[str], Awaitable[Answer]]]:
    """Each route that takes an index, as a function of the index name."""
    head = {"Authorization": f"ApiKey {secret}"}
    http = served.http

    async def call(method: str, path: str, body: Any = None) -> Answer:
        got = await http.request(method, path, json=body, headers=head)
        return got.status_code, got.text

    def chat(stream: bool) -> Callable[[str], Awaitable[Answer]]:
        def send(index: str) -> Awaitable[Answer]:
            messages = [{"role": "user", "content": "What do the salary handbook minutes say?"}]
            body = {"model": f"hopsearch-single@{index}", "messages": messages, "stream": stream}
            return call("POST", "/v1/chat/completions", body)

        return send

    question = {"question": "What do the salary handbook minutes say?", "strategy": "single"}
    return {
        "_retrieve": lambda i: call("POST", f"/{i}/_retrieve", {"query": QUERY}),
        "_ask": lambda i: call("POST", f"/{i}/_ask", question),
        "_ask stream": lambda i: call("POST", f"/{i}/_ask?stream=true", question),
        "/retrieve": lambda i: call("POST", "/retrieve", {"queries": [QUERY], "index": i}),
        "mcp search": lambda i: _mcp(served.url, secret, "search", {"query": QUERY, "index": i}),
        "mcp ask": lambda i: _mcp(served.url, secret, "ask", {**question, "index": i}),
        "/v1/models/{model}": lambda i: call("GET", f"/v1/models/hopsearch-single@{i}"),
        "/v1/chat/completions": chat(False),
        "/v1/chat/completions stream": chat(True),
        "proxy _search": lambda i: call("POST", f"/{i}/_search", {"query": {"match": {"body": QUERY}}}),
        "proxy _doc": lambda i: call("GET", f"/{i}/_doc/doc-x"),
    }


OUTSIDE_MARKERS = {"outside attached": "OUTSIDE-MARKER-4", "outside plain": "PLAIN-MARKER-6"}
INSIDE_MARKER = "IN-MARKER-2"


def _problems(route: str, got: dict[str, Answer], names: dict[str, str], patterns: str) -> list[str]:
    """What is wrong with one route's answers for each case (see the module docstring)."""
    problems: list[str] = []
    mcp = route.startswith("mcp")
    outside = {case: (status, text.replace(names[case], "<index>")) for case, (status, text) in got.items()}
    shapes = {outside[case] for case in names if case.startswith("outside")}
    if len(shapes) != 1:
        problems.append(f"{route}: the outside answers differ: {sorted(shapes)}")
    status, text = outside["outside missing"]
    if status != (1 if mcp else 403) or patterns not in text:
        problems.append(f"{route} outside: {status} {text[:300]} (no 403 naming the key's patterns)")
    if route.startswith("/v1") and '"param":"model"' not in text.replace(" ", ""):
        problems.append(f"{route} outside: OpenAI's error does not name the model {text[:200]}")
    for case, (_, text) in got.items():
        if any(marker in text for marker in OUTSIDE_MARKERS.values()):
            problems.append(f"{route} {case}: an outside index's marker came back")
    status, text = got["inside missing"]
    missing = "index_not_found_exception" if mcp or not route.startswith("/v1") else "model_not_found"
    if status != (1 if mcp else 404) or missing not in text:
        problems.append(f"{route} inside, missing: {status} {text[:300]} (no 404)")
    status, text = got["inside attached"]
    if not route.startswith("proxy") and status != (0 if mcp else 200):  # the proxy: attached indices are admins'
        problems.append(f"{route} inside, attached: {status} {text[:300]}")
    return problems


async def test_an_index_outside_the_patterns_is_403_whether_or_not_it_exists(es8_node: EsNode) -> None:
    tag = f"ixp{uuid.uuid4().hex[:8]}"
    names = {
        "outside attached": f"{tag}-out-docs",
        "outside plain": f"{tag}-out-plain",
        "outside missing": f"{tag}-out-none",
        "inside attached": f"{tag}-in-docs",
        "inside missing": f"{tag}-in-none",
    }

    async def load(store: Store) -> None:
        await _make(store, names["outside attached"], OUTSIDE_MARKERS["outside attached"], attach=True)
        await _make(store, names["outside plain"], OUTSIDE_MARKERS["outside plain"], attach=False)
        await _make(store, names["inside attached"], INSIDE_MARKER, attach=True)

    answers: dict[str, dict[str, Answer]] = {}
    try:
        async with openai_serving(es8_node.url, script=any_strategy_model, load=load) as served:
            secret = await served.new_key(name="scoped", principals=["public"], indices=[f"{tag}-in-*"])
            for route, send in _routes(served, secret).items():
                answers[route] = {case: await send(name) for case, name in names.items()}
    finally:
        async with httpx.AsyncClient(base_url=es8_node.url) as es:
            await es.delete(f"/{tag}-*")
    problems = [p for route, got in answers.items() for p in _problems(route, got, names, f"{tag}-in-*")]
    assert problems == [], "\n".join(problems)
    assert INSIDE_MARKER in answers["_retrieve"]["inside attached"][1]  # the check can see a marker
