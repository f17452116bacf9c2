"""Stored keys at the gate, over the app with real Elasticsearch 8.19: ``/_keys`` for admins, each key's
actions and index patterns per route, its limits (429 with ``Retry-After``), expired and revoked keys,
end-user tokens without a verifier, credentials in a query string, an open service that stops being open
once a key is stored, ``/_metrics`` for admins only, and the audit counters."""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hopsearch.service.access import ADMIN, Caller
from hopsearch.service.api import create_app
from hopsearch.service.auth.keys import NewKey
from hopsearch.service.errors import AuthorizationError
from hopsearch.service.outlines.lineage import bound_namespace
from tests.api_fixtures import API_KEY, Api, serving, uvicorn_serving_async
from tests.conftest import EsNode
from tests.token_fixtures import pem


def error_of(response: httpx.Response) -> tuple[int, str, str]:
    body = response.json()
    return response.status_code, body["error"]["type"], body["error"]["reason"]


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"ApiKey {secret}"}


async def make_key(api: Api, name: str, **fields: Any) -> str:
    response = await api.client.post("/_keys", json={"name": name, **fields})
    assert response.status_code == 201, response.text
    secret: str = response.json()["key"]
    return secret


def audit_counts(metrics: str) -> dict[str, float]:
    found = re.findall(r'hopsearch_audit_events_total\{event="(\w+)"\} ([0-9.]+)', metrics)
    return {event: float(value) for event, value in found}


async def test_keys_route_creates_lists_and_revokes_for_admins_only(es8_node: EsNode) -> None:
    async with serving(es8_node.url, api_key_cache_s=0, acl_default="public") as api:
        secret = await make_key(api, "reader", principals=["public"], actions=["search"])
        admin_secret = await make_key(api, "ops", admin=True)
        listing = await api.client.get("/_keys")
        as_reader = [
            await api.client.get("/_keys", headers=auth(secret)),
            await api.client.post("/_keys", json={"name": "mine", "admin": True}, headers=auth(secret)),
            await api.client.delete("/_keys/ops", headers=auth(secret)),
            await api.client.get("/_metrics", headers=auth(secret)),
        ]
        as_ops = await api.client.get("/_keys", headers=auth(admin_secret))
        duplicate = await api.client.post("/_keys", json={"name": "reader", "principals": ["public"]})
        bad = await api.client.post("/_keys", json={"name": "x", "principals": ["public"], "actions": ["fly"]})
        before = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "Lethal"}, headers=auth(secret))
        revoked = await api.client.delete("/_keys/reader")
        after = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "Lethal"}, headers=auth(secret))
        missing = await api.client.delete("/_keys/nobody")
        metrics = (await api.client.get("/_metrics", headers=auth(admin_secret))).text
    assert listing.status_code == 200 and [k["name"] for k in listing.json()["keys"]] == ["ops", "reader"]
    assert secret not in listing.text and admin_secret not in listing.text and "hash" not in listing.text
    for refused in as_reader:
        assert error_of(refused)[:2] == (403, "security_exception") and "admin keys only" in error_of(refused)[2]
    assert as_ops.status_code == 200
    assert error_of(duplicate)[:2] == (400, "resource_already_exists_exception")
    assert bad.status_code == 400 and "actions" in bad.text
    assert before.status_code == 200 and before.json()["hits"]["hits"]
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    assert error_of(after)[0] == 403 and "[reader] is revoked" in error_of(after)[2]
    assert error_of(missing)[0] == 404
    counts = audit_counts(metrics)
    assert counts["key_created"] == 2 and counts["key_revoked"] == 1 and counts["action_refused"] == 4
    assert counts["auth_revoked_key"] == 1


async def test_public_keys_are_added_and_removed_by_admins_over_the_routes(es8_node: EsNode) -> None:
    """``POST /_keys`` names its public key; ``/_keys/{name}/public_keys`` adds another and removes one
    (issue 42 item 4): each answer is the key as listed; a duplicate id, an unknown one, a bad id and a
    caller that is no admin are refused saying why."""
    first, second = (pem(ed25519.Ed25519PrivateKey.generate().public_key()) for _ in range(2))
    async with serving(es8_node.url, api_key_cache_s=0, acl_default="public") as api:
        body = {"principals": ["public"], "token_alg": "EdDSA", "token_public_key": first, "token_key_id": "ed1"}
        await make_key(api, "intranet", **body)
        reader = await make_key(api, "reader", principals=["public"])
        route = "/_keys/intranet/public_keys"
        second_key = {"token_key_id": "ed2", "token_alg": "EdDSA", "token_public_key": second}
        added = await api.client.post(route, json=second_key)
        again = await api.client.post(route, json=second_key)
        bad_id = await api.client.post(route, json={**second_key, "token_key_id": "a/b"})
        no_key = await api.client.post("/_keys/nobody/public_keys", json=second_key)
        as_reader = await api.client.post(route, json={**second_key, "token_key_id": "ed3"}, headers=auth(reader))
        removed = await api.client.delete(f"{route}/ed1")
        unknown = await api.client.delete(f"{route}/ed1")
        listing = await api.client.get("/_keys")
        metrics = (await api.client.get("/_metrics")).text
    assert added.status_code == 200, added.text
    assert added.json()["token_keys"] == [{"kid": "ed1", "algorithm": "EdDSA"}, {"kid": "ed2", "algorithm": "EdDSA"}]
    assert error_of(again)[:2] == (400, "resource_already_exists_exception") and "[ed2]" in error_of(again)[2]
    assert error_of(bad_id)[0] == 400 and "bad public key id 'a/b'" in error_of(bad_id)[2]
    assert error_of(no_key)[0] == 404 and "no key named [nobody]" in error_of(no_key)[2]
    assert error_of(as_reader)[0] == 403
    assert removed.status_code == 200 and removed.json()["token_keys"] == [{"kid": "ed2", "algorithm": "EdDSA"}]
    assert error_of(unknown)[0] == 404 and "has no public key [ed1] (it has: ed2)" in error_of(unknown)[2]
    [intranet] = [k for k in listing.json()["keys"] if k["name"] == "intranet"]
    assert intranet["token_keys"] == [{"kid": "ed2", "algorithm": "EdDSA"}]
    counts = audit_counts(metrics)
    assert counts["token_key_added"] == 1 and counts["token_key_removed"] == 1


async def test_actions_and_index_patterns_per_route(es8_node: EsNode) -> None:
    async with serving(es8_node.url, api_key_cache_s=0, acl_default="public") as api:
        searcher = await make_key(api, "searcher", principals=["public"], actions=["search"])
        elsewhere = await make_key(api, "elsewhere", principals=["public"], indices=["company-*"])
        asker = await make_key(api, "asker", principals=["public"], actions=["ask", "traces"])
        retrieve = {"query": "Lethal Weapon"}
        ask = {"question": "Who directed Lethal Weapon?", "strategy": "single"}
        got = {
            "search retrieve": await api.client.post(f"/{api.alias}/_retrieve", json=retrieve, headers=auth(searcher)),
            "search batch": await api.client.post("/retrieve", json={"queries": ["Lethal"]}, headers=auth(searcher)),
            "search ask": await api.client.post(f"/{api.alias}/_ask", json=ask, headers=auth(searcher)),
            "search traces": await api.client.get("/_traces/x", headers=auth(searcher)),
            "search viewer": await api.client.get("/_ui/traces", headers=auth(searcher)),
            "search outlines": await api.client.get("/_outlines/x", headers=auth(searcher)),
            "search root": await api.client.get("/", headers=auth(searcher)),
            "elsewhere retrieve": await api.client.post(
                f"/{api.alias}/_retrieve", json=retrieve, headers=auth(elsewhere)
            ),
            "elsewhere batch": await api.client.post(
                "/retrieve", json={"queries": ["Lethal"]}, headers=auth(elsewhere)
            ),
            "elsewhere proxy": await api.client.get("/other-index/_search", headers=auth(elsewhere)),
            "asker retrieve": await api.client.post(f"/{api.alias}/_retrieve", json=retrieve, headers=auth(asker)),
            "asker ask": await api.client.post(f"/{api.alias}/_ask", json=ask, headers=auth(asker)),
            "asker proxy": await api.client.get("/other-index/_search", headers=auth(asker)),
        }
    status = {name: response.status_code for name, response in got.items()}
    assert status == {
        "search retrieve": 200,
        "search batch": 200,
        "search ask": 403,
        "search traces": 403,
        "search viewer": 403,
        "search outlines": 403,
        "search root": 200,
        "elsewhere retrieve": 403,
        "elsewhere batch": 403,
        "elsewhere proxy": 403,
        "asker retrieve": 403,
        "asker ask": 200,
        "asker proxy": 403,
    }, {name: response.text[:200] for name, response in got.items()}
    assert "needs the [ask] action" in error_of(got["search ask"])[2]
    assert f"may not read index [{api.alias}]" in error_of(got["elsewhere retrieve"])[2]
    assert "company-*" in error_of(got["elsewhere retrieve"])[2]
    assert "[other-index], which the API key [elsewhere] may not use" in error_of(got["elsewhere proxy"])[2]


async def test_limits_answer_429_with_retry_after(es8_node: EsNode) -> None:
    async with serving(es8_node.url, acl_default="public") as api:
        limited = await make_key(api, "limited", principals=["public"], per_minute=3)
        one_ask = await make_key(api, "one-ask", principals=["public"], concurrent_asks=1)
        url = f"/{api.alias}/_retrieve"
        answers = [await api.client.post(url, json={"query": "Lethal"}, headers=auth(limited)) for _ in range(4)]
        others = await api.client.post(url, json={"query": "Lethal"}, headers=auth(one_ask))
        # one question of the key in flight (its slot held), then another of the same key
        record = await (await api.state.key_store()).by_name("one-ask")
        assert record is not None
        slot = api.state.admit_question(record.caller())
        ask = {"question": "Who directed Lethal Weapon?", "strategy": "single"}
        second = await api.client.post(f"/{api.alias}/_ask", json=ask, headers=auth(one_ask))
        slot.release()
        third = await api.client.post(f"/{api.alias}/_ask", json=ask, headers=auth(one_ask))
        metrics = (await api.client.get("/_metrics")).text
    assert [r.status_code for r in answers] == [200, 200, 200, 429]
    _, kind, reason = error_of(answers[3])
    assert kind == "es_rejected_execution_exception" and "[limited] made 3 requests in the last minute" in reason
    assert 1 <= int(answers[3].headers["Retry-After"]) <= 60
    assert others.status_code == 200  # another key's window
    assert error_of(second)[0] == 429 and "[one-ask] has 1 questions in flight" in error_of(second)[2]
    assert second.headers["Retry-After"] == "1"
    assert third.status_code == 200
    assert audit_counts(metrics)["rate_limited"] == 2


async def test_expired_keys_tokens_and_query_string_credentials_are_refused(es8_node: EsNode) -> None:
    async with serving(es8_node.url, acl_default="public") as api:
        store = await api.state.key_store()
        past = datetime.now(UTC) - timedelta(days=2)
        expired, _ = await store.create(NewKey("expired", principals=["public"], expires="1d"), now=past)
        url = f"/{api.alias}/_retrieve"
        body = {"query": "Lethal"}
        jwt = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"
        got = {
            "expired": await api.client.post(url, json=body, headers=auth(expired)),
            "unknown": await api.client.post(url, json=body, headers=auth("hs_not-a-key")),
            "jwt": await api.client.post(url, json=body, headers={"Authorization": f"Bearer {jwt}"}),
            "none": await api.client.post(url, json=body, headers={"Authorization": ""}),
            "query key": await api.client.post(f"{url}?api_key={API_KEY}", json=body),
            "query token": await api.client.get(f"/_ui/traces?access_token={jwt}"),
            "proxied query key": await api.client.get(f"/other/_search?api_key={API_KEY}"),
        }
        metrics = (await api.client.get("/_metrics")).text
    assert error_of(got["expired"])[0] == 401 and "[expired] expired at" in error_of(got["expired"])[2]
    assert got["expired"].headers["WWW-Authenticate"].startswith("ApiKey")
    assert error_of(got["unknown"]) == (403, "security_exception", "the API key is not accepted")
    status, kind, reason = error_of(got["jwt"])  # a token of no stored key: the verifier says why
    assert (status, kind) == (401, "security_exception") and "kid" in reason
    assert error_of(got["none"])[0] == 401
    for name in ("query key", "query token", "proxied query key"):
        status, _, reason = error_of(got[name])
        assert status == 400 and "never accepted in a query string" in reason, name
        assert API_KEY not in got[name].text and jwt not in got[name].text
    counts = audit_counts(metrics)
    assert counts["auth_expired_key"] == 1 and counts["auth_unknown_key"] == 1 and counts["token_refused"] == 1
    assert counts["auth_missing"] == 1 and counts["query_credentials"] == 3


async def test_an_open_service_closes_once_a_key_is_stored(es8_node: EsNode) -> None:
    async with serving(es8_node.url, headers={"Host": "localhost"}, api_keys=[], api_key_cache_s=0) as api:
        open_root = await api.client.get("/")
        metrics_open = await api.client.get("/_metrics")
        secret, _ = await (await api.state.key_store()).create(NewKey("first", principals=["public"]))
        await asyncio.sleep(0.05)
        closed = await api.client.get("/")
        keyed = await api.client.get("/", headers=auth(secret))
        rebound = await api.client.get("/", headers={"Host": "attacker.example", **auth(secret)})
    assert open_root.status_code == 200 and metrics_open.status_code == 200  # an open service's caller: an admin
    assert error_of(closed)[0] == 401
    assert keyed.status_code == 200
    assert rebound.status_code == 200  # with keys, a key (not the Host) decides


async def test_mcp_tools_keep_a_keys_actions(es8_node: EsNode) -> None:
    async with serving(es8_node.url, acl_default="public") as api:
        secret = await make_key(api, "mcp-search", principals=["public"], actions=["search"])
        async with uvicorn_serving_async(create_app(api.settings)) as url:
            keyed = httpx2.AsyncClient(headers=auth(secret), timeout=60)
            async with keyed, Client(streamable_http_client(f"{url}/_mcp/", http_client=keyed)) as client:
                found = await client.call_tool("search", {"query": "Lethal Weapon", "k": 2})
                asked = await client.call_tool("ask", {"question": "Who directed Lethal Weapon?"})
                outline = await client.call_tool("outline", {"entity": "Lethal Weapon"})
                trace = await client.call_tool("trace", {"id": "t-1"})
    assert not found.is_error and "Lethal" in str(found.content)
    for refused, action in ((asked, "ask"), (outline, "outlines"), (trace, "traces")):
        assert refused.is_error and "security_exception" in str(refused.content), refused.content
        assert f"may not {action}" in str(refused.content) or f"may not use {action}" in str(refused.content)


def test_a_key_bound_to_a_namespace_reads_and_writes_only_there() -> None:
    bound = Caller.of(["public"], key="team-a-backend", namespace="team-a")
    assert bound_namespace(bound, None, "hopsearch") == "team-a"
    assert bound_namespace(bound, "team-a", "hopsearch") == "team-a"
    with pytest.raises(AuthorizationError):  # another key's namespace is not a non-admin's to name
        bound_namespace(bound, "team-b", "hopsearch")
    assert bound_namespace(Caller.of(["public"]), None, "hopsearch") == "hopsearch"
    assert bound_namespace(ADMIN, "team-b", "hopsearch") == "team-b"


async def test_audit_events_are_log_records_without_secrets(es8_node: EsNode, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hopsearch.audit")
    async with serving(es8_node.url, acl_default="public") as api:
        secret = await make_key(api, "audited", principals=["public"], actions=["search"])
        await api.client.post(f"/{api.alias}/_ask", json={"question": "q"}, headers=auth(secret))
        await api.client.get("/_keys", headers=auth(secret + "x"))
        await api.client.delete("/_keys/audited")
    events = [(r.event, r.getMessage()) for r in caplog.records if r.name == "hopsearch.audit"]  # type: ignore[attr-defined]
    kinds = [event for event, _ in events]
    assert kinds == ["key_created", "action_refused", "auth_unknown_key", "key_revoked"], events
    assert "needs the [ask] action" in events[1][1] and "audited" in events[0][1]
    assert not [message for _, message in events if secret in message or "hs_" in message]


async def test_a_stored_key_in_each_place_a_key_goes(es8_node: EsNode) -> None:
    async with serving(es8_node.url, acl_default="public") as api:
        secret = await make_key(api, "anywhere", principals=["public"])
        url = f"/{api.alias}/_retrieve"
        body = {"query": "Lethal"}
        answers = [
            await api.client.post(url, json=body, headers={"Authorization": f"ApiKey {secret}"}),
            await api.client.post(url, json=body, headers={"Authorization": f"Bearer {secret}"}),
            await api.client.post(url, json=body, headers={"Authorization": f"apikey   {secret}"}),
            await api.client.post(url, json=body, headers={"X-Hopsearch-Key": secret, "Authorization": "Basic eDp5"}),
        ]
        # proxied: the stored key opens the door, and the cluster answers for an index hopsearch does not manage
        await (await api.store()).put_document("kp-other-docs", "1", {"text": "x"}, refresh=True)
        try:
            proxied = await api.client.get("/kp-other-docs/_search", headers={"X-Hopsearch-Key": secret})
            managed = await api.client.get(f"/{api.alias}/_search", headers={"X-Hopsearch-Key": secret})
        finally:
            await (await api.store()).client.indices.delete(index="kp-other-docs", ignore_unavailable=True)
    assert [a.status_code for a in answers] == [200] * 4, [a.text[:200] for a in answers]
    assert proxied.status_code == 200 and proxied.json()["hits"]["total"]["value"] == 1
    assert error_of(managed)[0] == 403 and "managed by hopsearch" in error_of(managed)[2]
