"""Dify's External Knowledge API (issue 53): ``POST /retrieval`` on a real node over the permissions corpus,
with the specification's own example request, each of its error codes (1001 a malformed header, 1002 a
refused key, 2001 an unknown knowledge id — and an index outside the key's patterns, answered the same),
filters from ``metadata_condition``, scores in 0–1 and the restricted record never returned."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from tests.api_fixtures import Api, serving
from tests.conftest import EsNode
from tests.permissions_corpus import QUERY, found_markers, has_acl_key, load_corpus
from tests.test_keys_api import make_key

#: The example request of Dify's specification (docs.dify.ai, External Knowledge API), as it is.
SPEC_EXAMPLE: dict[str, Any] = {
    "knowledge_id": "AAA-BBB-CCC",
    "query": "What is Dify?",
    "retrieval_setting": {"top_k": 5, "score_threshold": 0.5},
}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def ask_for(index: str, query: str = QUERY, **more: Any) -> dict[str, Any]:
    return {"knowledge_id": index, "query": query, "retrieval_setting": {"top_k": 10, "score_threshold": 0.0}, **more}


@contextlib.asynccontextmanager
async def company(es_node: EsNode, tmp_path: Path) -> AsyncIterator[tuple[Api, dict[str, str]]]:
    """The service over the permissions corpus, and keys of group:hr, of public, of other indices and
    without ``search``."""
    async with serving(es_node.url, load=False) as api:
        await load_corpus(await api.store(), tmp_path)
        keys = {
            "hr": await make_key(api, "dify-hr", principals=["group:hr", "public"]),
            "public": await make_key(api, "dify-public", principals=["public"]),
            "narrow": await make_key(api, "dify-narrow", principals=["public"], indices=["elsewhere-*"]),
            "no-search": await make_key(api, "dify-asker", principals=["public"], actions=["ask"]),
        }
        yield api, keys


async def _post(api: Api, body: Any, headers: dict[str, str]) -> httpx.Response:
    return await api.client.post("/retrieval", json=body, headers=headers)


async def test_records_in_dify_shape_without_what_the_key_may_not_read(es_node: EsNode, tmp_path: Path) -> None:
    async with company(es_node, tmp_path) as (api, keys):
        await _test_records_in_dify_shape_without_what_the_key_may_not_read(api, keys)


async def _test_records_in_dify_shape_without_what_the_key_may_not_read(api: Api, keys: dict[str, str]) -> None:
    hr = (await _post(api, ask_for(api.alias), bearer(keys["hr"]))).json()
    public = (await _post(api, ask_for(api.alias), bearer(keys["public"]))).json()
    example = await _post(api, {**SPEC_EXAMPLE, "knowledge_id": api.alias}, bearer(keys["public"]))
    assert found_markers(hr) == {"SALARY-MARKER-9", "PUBLIC-MARKER-1"}, hr
    assert found_markers(public) == {"PUBLIC-MARKER-1"}, public  # the restricted record never returned
    assert not has_acl_key(hr) and not has_acl_key(public)
    for record in hr["records"]:
        assert set(record) == {"content", "score", "title", "metadata"} and isinstance(record["metadata"], dict)
        assert 0.0 <= record["score"] <= 1.0 and record["metadata"]["_index"].startswith(api.alias)
    assert hr["records"][0]["score"] == 1.0  # BM25 over the first record's score
    assert hr["records"][0]["title"].startswith("Company record") and "salary handbook" in hr["records"][0]["content"]
    assert example.status_code == 200, example.text
    assert all(r["score"] >= 0.5 for r in example.json()["records"]), example.text  # its score_threshold
    assert found_markers(example.json()) <= {"PUBLIC-MARKER-1"}, example.text
    strict = await _post(
        api, ask_for(api.alias) | {"retrieval_setting": {"top_k": 10, "score_threshold": 1.0}}, bearer(keys["hr"])
    )
    assert [r["score"] for r in strict.json()["records"]] == [1.0] * len(strict.json()["records"]), strict.text


async def test_each_error_code_of_the_specification(es_node: EsNode, tmp_path: Path) -> None:
    async with company(es_node, tmp_path) as (api, keys):
        await _test_each_error_code_of_the_specification(api, keys)


async def _test_each_error_code_of_the_specification(api: Api, keys: dict[str, str]) -> None:
    example = await _post(api, SPEC_EXAMPLE, bearer(keys["public"]))
    missing = await _post(api, SPEC_EXAMPLE, {"Authorization": ""})
    basic = await _post(api, SPEC_EXAMPLE, {"Authorization": "Basic dXNlcjpwYXNz"})
    refused = await _post(api, SPEC_EXAMPLE, bearer("hs_not-a-key"))
    no_search = await _post(api, {**SPEC_EXAMPLE, "knowledge_id": api.alias}, bearer(keys["no-search"]))
    outside = await _post(api, {**SPEC_EXAMPLE, "knowledge_id": api.alias}, bearer(keys["narrow"]))
    inside_missing = await _post(api, {**SPEC_EXAMPLE, "knowledge_id": "elsewhere-x"}, bearer(keys["narrow"]))
    answers = {
        "example": example,
        "missing": missing,
        "basic": basic,
        "refused": refused,
        "no-search": no_search,
        "outside": outside,
        "inside_missing": inside_missing,
    }
    codes = {name: (r.status_code, r.json()["error_code"]) for name, r in answers.items()}
    assert codes == {
        "example": (404, 2001),
        "missing": (403, 1001),
        "basic": (403, 1001),
        "refused": (403, 1002),
        "no-search": (403, 1002),
        "outside": (404, 2001),
        "inside_missing": (404, 2001),
    }, {name: r.text for name, r in answers.items()}
    for response in answers.values():
        assert set(response.json()) == {"error_code", "error_msg"}, response.text
    # an index outside the key's patterns reads as one that does not exist: the same words, its name aside
    same = outside.json()["error_msg"].replace(api.alias, "X") == inside_missing.json()["error_msg"].replace(
        "elsewhere-x", "X"
    )
    assert same, (outside.text, inside_missing.text)


async def test_metadata_condition_becomes_filters(es_node: EsNode, tmp_path: Path) -> None:
    async with company(es_node, tmp_path) as (api, keys):
        await _test_metadata_condition_becomes_filters(api, keys)


async def _test_metadata_condition_becomes_filters(api: Api, keys: dict[str, str]) -> None:

    def condition(*conditions: dict[str, Any], logical: str = "and") -> dict[str, Any]:
        return ask_for(api.alias, metadata_condition={"logical_operator": logical, "conditions": list(conditions)})

    async def ids(body: dict[str, Any]) -> list[str]:
        response = await _post(api, body, bearer(keys["hr"]))
        assert response.status_code == 200, response.text
        return sorted(r["metadata"]["_id"] for r in response.json()["records"])

    handbook = {"name": "doc_id", "comparison_operator": "is", "value": "handbook"}
    salary = {"name": "doc_id", "comparison_operator": "is", "value": "hr-salary"}
    either = {"name": "doc_id", "comparison_operator": "in", "value": ["handbook", "board-minutes"]}
    assert await ids(condition(handbook)) == ["handbook"]
    assert await ids(condition(handbook, salary, logical="or")) == ["handbook", "hr-salary"]
    assert await ids(condition(handbook, salary)) == []
    assert await ids(condition(either)) == ["handbook"]  # board-minutes is not hr's
    assert "hr-salary" not in await ids(condition({**salary, "comparison_operator": "is not"}))
    refused = await _post(
        api, condition({"name": "title", "comparison_operator": "contains", "value": "x"}), bearer(keys["hr"])
    )
    assert refused.status_code == 400 and refused.json()["error_code"] == 400, refused.text
    assert "contains" in refused.json()["error_msg"], refused.text
    bad_field = await _post(
        api, condition({"name": "metadata.a b", "comparison_operator": "is", "value": "x"}), bearer(keys["hr"])
    )
    assert bad_field.status_code == 400 and "metadata_condition" in json.dumps(bad_field.json()), bad_field.text


async def test_retrieval_is_never_proxied_and_keeps_dify_shape_for_bad_bodies(es_node: EsNode, tmp_path: Path) -> None:
    async with company(es_node, tmp_path) as (api, keys):
        await _test_retrieval_is_never_proxied_and_keeps_dify_shape_for_bad_bodies(api, keys)


async def _test_retrieval_is_never_proxied_and_keeps_dify_shape_for_bad_bodies(api: Api, keys: dict[str, str]) -> None:
    not_json = await api.client.post("/retrieval", content=b"{", headers=bearer(keys["hr"]))
    no_setting = await _post(api, {"knowledge_id": api.alias, "query": "x"}, bearer(keys["hr"]))
    got = await api.client.get("/retrieval", headers=bearer(keys["hr"]))
    for response in (not_json, no_setting):
        assert response.status_code == 400 and response.json()["error_code"] == 400, response.text
    assert got.status_code == 405 and got.json()["error_code"] == 405, got.text  # hopsearch's own, not the cluster's
