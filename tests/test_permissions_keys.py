"""Document permissions for stored API keys, as an attacker checks them, over real HTTP (uvicorn) on 7.17,
8.19 and 9.2: keys of ``group:hr`` and of ``public`` only (made with ``POST /_keys``) and a flat admin key
ask ``_retrieve``, ``_ask`` (one JSON body and SSE; single and DeepRAG, with a scripted LLM that echoes
its whole prompt into its answers), ``POST /retrieve``, the MCP tools, ``/_traces/{id}`` and the viewer's
list and pages — and so do end users through tokens: a back end's key (``group:hr`` and ``public``,
with a registered Ed25519 public key) minting tokens for an HR employee and for one who names no group,
and the company IdP's RS256 token (checked against a JWKS file) of a user in ``HR``. Every response is
searched whole for the markers of the passages the caller may not read, and the caller that may read them
must get them. Then a revoked key is refused by each of two
``hopsearch serve`` processes within one second."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hopsearch.service.api import create_app
from hopsearch.service.app.runtime import Runtime
from tests.api_fixtures import API_KEY, api_settings, uvicorn_serving_async
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.permissions_corpus import QUERY, QUESTION, found_markers, leaks, load_corpus, readable
from tests.service_processes import hopsearch_serve, scripted_service
from tests.test_permissions_ask import EchoModel
from tests.token_fixtures import AUDIENCE, ISSUER, claims, idp_claims, jwk, pem, sign

#: caller name (as permissions_corpus names them) → what its key is made with (None: the flat admin key)
KEYS: dict[str, dict[str, Any] | None] = {
    "admin": None,
    "hr": {"name": "hr-backend", "principals": ["group:hr", "public"]},
    "public": {"name": "public-backend", "principals": ["public"]},
}
STRATEGIES = ("single", "deeprag")
#: end users through tokens: label → (whom the corpus says they read as, the token's subject)
TOKEN_CALLERS = {"hr-token": ("hr", "carol"), "public-token": ("public", "dave"), "hr-idp": ("hr", "erin")}


def reads_as(label: str) -> str:
    return TOKEN_CALLERS[label][0] if label in TOKEN_CALLERS else label


def text_of(response: httpx.Response | httpx2.Response) -> str:
    return response.text


async def _mcp(url: str, secret: str) -> dict[str, Any]:
    keyed = httpx2.AsyncClient(headers={"Authorization": secret}, timeout=60)
    async with keyed, Client(streamable_http_client(f"{url}/_mcp/", http_client=keyed)) as client:
        found = await client.call_tool("search", {"query": QUERY, "k": 10})
        asked = await client.call_tool("ask", {"question": QUESTION, "strategy": "single"})
        trace_id = (asked.structured_content or {}).get("trace_id")
        trace = await client.call_tool("trace", {"id": str(trace_id)})
    return {"search": found.content, "ask": asked.content, "trace": trace.content, "trace_id": trace_id}


async def test_stored_keys_never_get_what_they_may_not_read(es_node: EsNode, tmp_path: Path) -> None:
    problems: list[str] = []
    seen: dict[str, set[str]] = {}
    checks = {"responses": 0, "trace reads": 0}
    backend_key = ed25519.Ed25519PrivateKey.generate()
    idp_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk(idp_key.public_key(), "idp-1")]}))
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(
            es_node.url, llm, outline_max_age_s=0, idp_issuer=ISSUER, idp_audience=[AUDIENCE], idp_jwks=str(jwks)
        )
        async with await Runtime.open(settings) as runtime:
            try:
                await load_corpus(runtime.store, tmp_path)
                async with uvicorn_serving_async(create_app(settings)) as url:
                    admin = {"Authorization": f"ApiKey {API_KEY}"}
                    async with httpx.AsyncClient(base_url=url, timeout=60, headers=admin) as http:
                        secrets = {"admin": f"ApiKey {API_KEY}"}
                        for name, fields in KEYS.items():
                            if fields is not None:
                                made = await http.post("/_keys", json=fields)
                                assert made.status_code == 201, made.text
                                secrets[name] = f"ApiKey {made.json()['key']}"
                        made = await http.post(
                            "/_keys",
                            json={
                                "name": "intranet",
                                "principals": ["group:hr", "public"],
                                "token_public_key": pem(backend_key.public_key()),
                                "token_alg": "EdDSA",
                            },
                        )
                        assert made.status_code == 201, made.text
                        for label, principals in (("hr-token", ["group:hr"]), ("public-token", [])):
                            body = claims(sub=TOKEN_CALLERS[label][1], principals=principals)
                            secrets[label] = f"Bearer {sign(backend_key, 'EdDSA', 'intranet', body)}"
                        idp_token = sign(idp_key, "RS256", "idp-1", idp_claims(sub="erin", groups=["HR"]))
                        secrets["hr-idp"] = f"Bearer {idp_token}"
                        traces: dict[str, list[str]] = {}
                        for name, secret in secrets.items():
                            head = {"Authorization": secret}
                            alias = settings.passages_alias
                            got: dict[str, str] = {}
                            got["_retrieve"] = text_of(
                                await http.post(f"/{alias}/_retrieve", json={"query": QUERY, "k": 10}, headers=head)
                            )
                            got["retrieve batch"] = text_of(
                                await http.post("/retrieve", json={"queries": [QUERY], "topk": 10}, headers=head)
                            )
                            for strategy in STRATEGIES:
                                ask = {"question": QUESTION, "strategy": strategy, "options": {"k": 10}}
                                answered = await http.post(f"/{alias}/_ask", json=ask, headers=head)
                                assert answered.status_code == 200, answered.text
                                got[f"_ask {strategy}"] = answered.text
                                traces.setdefault(name, []).append(answered.json()["trace_id"])
                                streamed = await http.post(f"/{alias}/_ask?stream=true", json=ask, headers=head)
                                assert "event: answer" in streamed.text, streamed.text[-300:]
                                got[f"_ask {strategy} SSE"] = streamed.text
                            mcp = await _mcp(url, secret)
                            traces[name].append(str(mcp.pop("trace_id")))
                            got["mcp"] = str(mcp)
                            await runtime.store.refresh(settings.traces_index)
                            got["viewer list"] = text_of(await http.get("/_ui/traces?size=100", headers=head))
                            for label, text in got.items():
                                if leaked := leaks(text, reads_as(name), settings.acl_default):
                                    problems.append(f"{name} {label}: leaked {sorted(leaked)}")
                                seen.setdefault(name, set()).update(found_markers(text))
                                checks["responses"] += 1
                        # every trace, read by every key: its asker's and admins' only, never leaking
                        for owner, ids in traces.items():
                            for reader, secret in secrets.items():
                                head = {"Authorization": secret}
                                for trace_id in ids:
                                    raw = await http.get(f"/_traces/{trace_id}", headers=head)
                                    page = await http.get(f"/_ui/traces/{trace_id}", headers=head)
                                    may = reader in ("admin", owner)
                                    for what, response in (("trace", raw), ("viewer page", page)):
                                        if (response.status_code == 200) != may:
                                            problems.append(f"{reader} {what} of {owner}: {response.status_code}")
                                        if leaks(response.text, reads_as(reader), settings.acl_default):
                                            problems.append(f"{reader} {what} of {owner}: leaked")
                                        checks["trace reads"] += 1
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )
    assert problems == [], "\n".join(problems)
    assert seen["admin"] >= {"SALARY-MARKER-9", "BOARD-MARKER-7", "PRIVATE-MARKER-5"}  # a leak could not hide
    assert seen["hr"] == readable("hr", "private") and seen["public"] == readable("public", "private")
    for label, (corpus_name, _) in TOKEN_CALLERS.items():  # end users read exactly what their principals may
        assert seen[label] == readable(corpus_name, "private"), label
    print(f"leak checks: {checks['responses']} responses, {checks['trace reads']} trace reads, 0 leaks")


async def test_a_revoked_key_is_refused_by_every_process_within_a_second(es8_node: EsNode, tmp_path: Path) -> None:
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(es8_node.url, llm, acl_default="public")
        async with await Runtime.open(settings) as runtime:
            try:
                await load_corpus(runtime.store, tmp_path)
                env = scripted_service(
                    es8_node.url, settings.index_prefix, llm.base_url, HOPSEARCH_ACL_DEFAULT="public"
                )
                with (
                    hopsearch_serve(env, tmp_path / "one.log") as one,
                    hopsearch_serve(env, tmp_path / "two.log") as two,
                ):
                    admin = {"Authorization": f"ApiKey {API_KEY}"}
                    async with httpx.AsyncClient(timeout=30) as http:
                        made = await http.post(
                            f"{one.url}/_keys", json={"name": "soon-gone", "principals": ["public"]}, headers=admin
                        )
                        secret = made.json()["key"]
                        head = {"Authorization": f"ApiKey {secret}"}
                        body = {"query": QUERY}
                        url = f"/{settings.passages_alias}/_retrieve"
                        before = [await http.post(f"{s.url}{url}", json=body, headers=head) for s in (one, two)]
                        revoked = await http.delete(f"{two.url}/_keys/soon-gone", headers=admin)
                        at = time.monotonic()
                        refused_after: dict[str, float] = {}
                        while len(refused_after) < 2 and time.monotonic() - at < 5:
                            for served in (one, two):
                                if served.url in refused_after:
                                    continue
                                answer = await http.post(f"{served.url}{url}", json=body, headers=head)
                                if answer.status_code == 403 and "revoked" in answer.text:
                                    refused_after[served.url] = time.monotonic() - at
                            await asyncio.sleep(0.02)
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )
    assert [r.status_code for r in before] == [200, 200] and revoked.status_code == 200
    print(f"revocation seen after: {', '.join(f'{seconds:.3f} s' for seconds in refused_after.values())}")
    assert len(refused_after) == 2, refused_after
    assert max(refused_after.values()) < 1.0, refused_after
