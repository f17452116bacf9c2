"""Request bodies nested 1,000 deep (filters and plain JSON) through the real service under uvicorn:
each a 400 in Elasticsearch's envelope naming the field and the limit — never a dropped connection
(RecursionError) or a 500 — on every route that takes a body, the MCP tools included."""

from __future__ import annotations

import httpx

from hopsearch.service.api import create_app
from hopsearch.service.api.json_depth import MAX_JSON_DEPTH, too_deep
from tests.api_fixtures import API_KEY, serving, uvicorn_serving_async
from tests.conftest import EsNode

DEPTH = 1000
LEAF = '{"term":{"source":"x"}}'


def nested_filter(kind: str, depth: int = DEPTH) -> str:
    if kind == "not":
        return '{"not":' * depth + LEAF + "}" * depth
    return f'{{"{kind}":[' * depth + LEAF + "]}" * depth


def deep_object(depth: int = DEPTH) -> str:
    return '{"a":' * depth + "{}" + "}" * depth


def deep_array(depth: int = DEPTH) -> str:
    return "[" * depth + "]" * depth


def cases(alias: str) -> list[tuple[str, str, str]]:
    """(path, body, the field the 400 must name first)."""
    found: list[tuple[str, str, str]] = []
    for kind in ("and", "or", "not"):
        deep = nested_filter(kind)
        found.append((f"/{alias}/_retrieve", f'{{"query":"x","filters":[{deep}]}}', f"body.filters.0.{kind}"))
        found.append((f"/{alias}/_ask", f'{{"question":"x","options":{{"filters":[{deep}]}}}}', "body.options.filters"))
    for deep in (deep_object(), deep_array()):
        found.append((f"/{alias}/_retrieve", f'{{"query":"x","mode":{deep}}}', "body.mode"))
        found.append((f"/{alias}/_retrieve", f'{{"query":"x","filters":[{deep}]}}', "body.filters.0"))
        found.append((f"/{alias}/_ask", f'{{"question":"x","options":{deep}}}', "body.options"))
        found.append((f"/{alias}/_ask", f'{{"question":{deep}}}', "body.question"))
        found.append(("/retrieve", f'{{"queries":{deep}}}', "body.queries"))
        found.append(("/_outlines/_search", f'{{"query":{deep}}}', "body.query"))
        found.append(("/_outlines/_search", f'{{"query":"x","other":{deep}}}', "body.other"))
    for kind in ("and", "or", "not"):
        call = (
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":'
            f'{{"query":"x","filters":[{nested_filter(kind)}]}}}}}}'
        )
        found.append(("/_mcp/", call, "body.params.arguments.filters.0"))
    return found


async def test_bodies_nested_1000_deep_are_400s_naming_the_field_and_limit(es8_node: EsNode) -> None:
    headers = {
        "Authorization": f"ApiKey {API_KEY}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    async with (
        serving(es8_node.url) as api,
        uvicorn_serving_async(create_app(api.settings)) as url,
        httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client,
    ):
        answers = [(path, field, await client.post(path, content=body)) for path, body, field in cases(api.alias)]
        # Still serving: a plain search and a filter 9 deep (the filters' own limit, named as before).
        fine = await client.post(f"/{api.alias}/_retrieve", json={"query": "Lethal Weapon"})
        nine = await client.post(
            f"/{api.alias}/_retrieve", content=f'{{"query":"x","filters":[{nested_filter("and", 9)}]}}'
        )
    for path, field, response in answers:
        assert response.status_code == 400, (path, field, response.text[:300])
        error = response.json()
        assert error["status"] == 400 and error["error"]["type"] == "illegal_argument_exception", (path, field)
        reason = error["error"]["reason"]
        assert reason.startswith(f"[{field}"), (path, reason[:200])
        assert f"deeper than {MAX_JSON_DEPTH} arrays and objects" in reason, (path, reason[:200])
        assert error["error"]["root_cause"][0]["reason"] == reason
    assert fine.status_code == 200 and fine.json()["hits"]["hits"]
    assert nine.status_code == 400 and "filters nest deeper than 8" in nine.json()["error"]["reason"]


def test_depth_scan_names_the_value_and_ignores_brackets_in_text() -> None:
    refused = too_deep(b'{"a":[1,{"b":[[[]]]}]}', limit=4)
    assert refused is not None and refused.field == "body.a.1.b.0"
    assert too_deep(b'{"a":[1,{"b":[]}]}', limit=4) is None
    assert too_deep(b'{"q":"' + b"[{" * 5000 + b'\\"[["}') is None  # brackets inside a string are text
    assert too_deep(b"[" * (MAX_JSON_DEPTH + 1)) is not None and too_deep(b"[" * MAX_JSON_DEPTH) is None


def test_depth_is_exact_at_the_limit_for_mixed_arrays_and_objects() -> None:
    for depth in range(1, 12):
        body = (
            "".join("[{"[n % 2] for n in range(depth)) + "".join("]}"[n % 2] for n in reversed(range(depth)))
        ).encode()
        padded = body + b"," + b"[]" * 40  # enough brackets to pass the count, not the depth
        for limit in range(1, 12):
            assert (too_deep(b"[" + padded + b"]", limit=limit) is None) == (depth + 1 <= limit), (depth, limit)
