"""Trace ownership as an attacker tries it, over real HTTP (uvicorn) on 8.19: whom a trace belongs to is
namespaced by who vouches for its subject. Owners: a stored key used directly (``hr-backend``), an end
user of one back end (``intranet`` signs ``sub=carol``) and an IdP user (``sub=ceo``). The attacker is a
second back end (``eng``, reading ``group:eng`` and ``public`` only) that mints every colliding ``sub`` —
the HR key's name, ``carol`` and ``ceo`` — and an IdP user named ``carol``. Each owner's question carries
its own marker; every route that shows a trace (``GET /_traces/{id}``, the viewer's page and list, MCP
``trace``) is searched whole for markers the reader may not see."""

from __future__ import annotations

import json
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
from tests.permissions_corpus import QUESTION, leaks, load_corpus
from tests.test_permissions_ask import EchoModel
from tests.token_fixtures import AUDIENCE, ISSUER, claims, idp_claims, jwk, pem, sign

#: who asks (each owns its traces) and who only reads: label → (what it reads as in the corpus, asks?)
CALLERS = {
    "hr-backend": ("hr", True),
    "intranet-carol": ("hr", True),
    "idp-ceo": ("hr", True),
    "eng-as-hr-backend": ("public", False),
    "eng-as-carol": ("public", False),
    "eng-as-ceo": ("public", False),
    "idp-carol": ("public", False),
    # the IdP's subject as issued owns the traces, never its folded principal (user:ceo for all three)
    "idp-Ceo": ("public", False),
    "idp-fullwidth-ceo": ("public", False),
}
#: The IdP users: label → (sub, groups)
IDP_USERS = {
    "idp-ceo": ("ceo", ["HR"]),
    "idp-carol": ("carol", []),
    "idp-Ceo": ("Ceo", []),
    "idp-fullwidth-ceo": ("ＣＥＯ", []),
}


def mark(label: str) -> str:
    return f"OWNERMARK{label.replace('-', '')}"


async def _mcp_trace(url: str, secret: str, trace_id: str) -> str:
    keyed = httpx2.AsyncClient(headers={"Authorization": secret}, timeout=60)
    async with keyed, Client(streamable_http_client(f"{url}/_mcp/", http_client=keyed)) as client:
        found = await client.call_tool("trace", {"id": trace_id})
    return str(found.content) + json.dumps(found.structured_content or {})


async def _secrets(http: httpx.AsyncClient) -> dict[str, str]:
    """Every caller's Authorization header: keys made over HTTP, tokens signed by two back ends and an IdP."""
    made = await http.post("/_keys", json={"name": "hr-backend", "principals": ["group:hr", "public"]})
    assert made.status_code == 201, made.text
    secrets = {"hr-backend": f"ApiKey {made.json()['key']}"}
    signers: dict[str, ed25519.Ed25519PrivateKey] = {}
    for name, principals in (("intranet", ["group:hr", "public"]), ("eng", ["group:eng", "public"])):
        signers[name] = ed25519.Ed25519PrivateKey.generate()
        body = {"name": name, "principals": principals, "token_alg": "EdDSA"}
        made = await http.post("/_keys", json={**body, "token_public_key": pem(signers[name].public_key())})
        assert made.status_code == 201, made.text
    minted = {"intranet-carol": ("intranet", "carol", ["group:hr"])}
    minted |= {f"eng-as-{sub}": ("eng", sub, []) for sub in ("hr-backend", "carol", "ceo")}
    for label, (key, sub, principals) in minted.items():
        secrets[label] = f"Bearer {sign(signers[key], 'EdDSA', key, claims(sub=sub, principals=principals))}"
    return secrets


async def test_a_back_end_minting_a_colliding_sub_reads_no_one_elses_trace(es8_node: EsNode, tmp_path: Path) -> None:
    idp_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk(idp_key.public_key(), "idp-1")]}))
    problems: list[str] = []
    reads = 0
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(
            es8_node.url, llm, outline_max_age_s=0, idp_issuer=ISSUER, idp_audience=[AUDIENCE], idp_jwks=str(jwks)
        )
        async with await Runtime.open(settings) as runtime:
            try:
                await load_corpus(runtime.store, tmp_path)
                async with uvicorn_serving_async(create_app(settings)) as url:
                    admin = {"Authorization": f"ApiKey {API_KEY}"}
                    async with httpx.AsyncClient(base_url=url, timeout=60, headers=admin) as http:
                        secrets = await _secrets(http)
                        for label, (sub, groups) in IDP_USERS.items():
                            token = sign(idp_key, "RS256", "idp-1", idp_claims(sub=sub, groups=groups))
                            secrets[label] = f"Bearer {token}"
                        traces: dict[str, str] = {}
                        for label, (_, asks) in CALLERS.items():
                            if asks:
                                ask = {"question": f"{QUESTION} {mark(label)}", "strategy": "single"}
                                head = {"Authorization": secrets[label]}
                                answered = await http.post(f"/{settings.passages_alias}/_ask", json=ask, headers=head)
                                assert answered.status_code == 200, answered.text
                                traces[label] = answered.json()["trace_id"]
                        await runtime.store.refresh(settings.traces_index)
                        for reader, (reads_as, _) in CALLERS.items():
                            head = {"Authorization": secrets[reader]}
                            listed = await http.get("/_ui/traces?size=100", headers=head)
                            texts = {"viewer list": listed.text}
                            for owner, trace_id in traces.items():
                                raw = await http.get(f"/_traces/{trace_id}", headers=head)
                                page = await http.get(f"/_ui/traces/{trace_id}", headers=head)
                                if (raw.status_code == 200) != (reader == owner):
                                    problems.append(f"{reader} GET /_traces of {owner}: {raw.status_code}")
                                if (page.status_code == 200) != (reader == owner):
                                    problems.append(f"{reader} viewer page of {owner}: {page.status_code}")
                                texts[f"trace of {owner}"] = raw.text
                                texts[f"page of {owner}"] = page.text
                                texts[f"mcp trace of {owner}"] = await _mcp_trace(url, secrets[reader], trace_id)
                            for what, text in texts.items():
                                reads += 1
                                others = {mark(o) for o in traces if o != reader}
                                if found := sorted(m for m in others if m in text):
                                    problems.append(f"{reader} {what}: another owner's marker {found}")
                                if leaked := leaks(text, reads_as, settings.acl_default):
                                    problems.append(f"{reader} {what}: restricted {sorted(leaked)}")
                            if reader in traces and mark(reader) not in texts[f"trace of {reader}"]:
                                problems.append(f"{reader} cannot read its own trace")  # the check can see
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )
    assert problems == [], "\n".join(problems)
    print(f"owner checks: {reads} responses, 0 leaks")


def _trace_doc(owner: Any) -> dict[str, Any]:
    return {"user": {"subject": "hr-backend", "key": "hr-backend", "owner": owner}}


def test_a_trace_without_a_namespaced_owner_is_for_admins_alone() -> None:
    from hopsearch.service.access import ADMIN, Caller
    from hopsearch.service.traces.reads import owns

    same_subject = Caller(subject="hr-backend", key="hr-backend", owner="key:hr-backend")
    assert owns(same_subject, _trace_doc("key:hr-backend"))
    assert not owns(same_subject, {"user": {"subject": "hr-backend", "key": "hr-backend"}})  # written before
    assert not owns(Caller(subject="hr-backend"), _trace_doc(None))
    assert owns(ADMIN, {"user": {"subject": "x"}})


def test_command_line_and_idp_and_key_owners_never_collide() -> None:
    from hopsearch.service.access import owner_id
    from hopsearch.service.auth.keys import caller_of_principals

    cli = caller_of_principals(["user:ceo"])
    assert cli.owner == "cli/sub:ceo" != owner_id("idp", "https://login.example.com", "ceo")
    assert owner_id("key", "a/sub:b") != owner_id("key", "a", "b")  # a name cannot reach into the subject
