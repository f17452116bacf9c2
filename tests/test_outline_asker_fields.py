"""Nothing a shared outline fact or alias holds that came from the asker reaches another owner (issue 51,
item 1) — over real HTTP (uvicorn) on 7.17, 8.19 and 9.2, tried as an attacker would.

Two askers put a marker in their question: an IdP user ``sub=hr-backend`` asks in Japanese about 秘密計画, a
back end's user ``sub=dana`` about Project Osprey. The scripted identifier copies the question into an
entity's keywords (the fact's ``sub_query``), names an entity after the marker (with a plain alias learnt
beside it) and writes an alias holding it; every summary comes from the public passage alone, so the facts
are shared. Then each reader — the asker itself, a key named ``hr-backend``, another back end's user
``sub=dana``, the same back end's user ``erin``, a public key — reads ``GET /_outlines/…``, ``POST
/_outlines/_search`` (by text, the marker too, and by entity), MCP ``outline`` and asks its own DualRAG
question (the prompts the scripted model received, the answer, its SSE stream, its trace as JSON and in the
viewer): the whole of each is searched for the markers, which only their askers (and admins) may read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import httpx2
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hopsearch.loaders.api import load_jsonl
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.api import create_app
from hopsearch.service.app.runtime import Runtime
from tests.api_fixtures import API_KEY, api_settings, uvicorn_serving_async
from tests.conftest import EsNode
from tests.dual_fixtures import entities, reason, role_of
from tests.llm_fixtures import server_for
from tests.permissions_corpus import write_corpus
from tests.scripted_llm import ScriptRequest
from tests.token_fixtures import AUDIENCE, ISSUER, claims, idp_claims, jwk, pem, sign

ENTITY, COLONY = "Emperor penguins", "Emperor colony"
PASSAGE = "Emperor penguins are the tallest penguins and breed in the Antarctic winter in a large colony."
SHARED = "Emperor penguins breed in the Antarctic winter."
MARKERS = {"idp-hr-backend": "秘密計画", "a-dana": "Osprey"}
QUESTIONS = {
    "idp-hr-backend": "秘密計画はエンペラーペンギン（Emperor penguins）の繁殖に影響しますか？",
    "a-dana": "Will Project Osprey cut Dana Whitfield's bonus, like Emperor penguins breeding?",
}
PLAIN_QUESTION = "Where do Emperor penguins breed?"
ROWS = [{"_id": "penguins", "title": ENTITY, "text": PASSAGE, "acl": "public"}]


def model(request: ScriptRequest) -> str:
    """DualRAG's roles: an identifier that copies the question into keywords, entity names and aliases."""
    prompt = request.prompt
    role = role_of(prompt)
    question = prompt.split("Question:", 1)[-1].strip().splitlines()[0] if "Question:" in prompt else ""
    mark = next((m for m in MARKERS.values() if m in question), None)
    if role == "reasoner":
        outline = prompt.split("Knowledge outline:", 1)[-1].split("Reasoning", 1)[0]
        if f"## {ENTITY}" not in outline:
            return json.dumps(reason("Look it up.", True))
        # once more: the identifier's prompt then names the entities and aliases the outline reused
        again = "Look it up again." not in prompt
        return json.dumps(reason("Look it up again." if again else "I can answer now.", again))
    if role == "identifier":
        if mark is None:
            return json.dumps(entities((ENTITY, ["emperor penguins"]), (COLONY, ["colony"])))
        return json.dumps(
            entities(
                (ENTITY, ["emperor penguins", question]),
                (f"{mark} penguins", ["penguins"], ENTITY),
                (f"{mark} plan", [f"{mark} penguins colony"]),
                (COLONY, ["colony", question], f"{mark} plan"),
            )
        )
    if role == "summarizer":
        return SHARED
    return " They breed in the Antarctic winter."


async def _mcp(url: str, secret: str) -> str:
    keyed = httpx2.AsyncClient(headers={"Authorization": secret}, timeout=60)
    out = []
    async with keyed, Client(streamable_http_client(f"{url}/_mcp/", http_client=keyed)) as client:
        for name in (ENTITY, COLONY):
            found = await client.call_tool("outline", {"entity": name})
            out.append(str(found.content) + json.dumps(found.structured_content or {}, ensure_ascii=False))
    return "\n".join(out)


async def _secrets(http: httpx.AsyncClient, idp_key: Any) -> dict[str, str]:
    """Every principal: the askers and the owners that collide with them."""
    made = await http.post("/_keys", json={"name": "hr-backend", "principals": ["public"]})
    assert made.status_code == 201, made.text
    secrets = {"key-hr-backend": f"ApiKey {made.json()['key']}"}
    for back_end in ("a", "b"):
        signer = ed25519.Ed25519PrivateKey.generate()
        body = {"name": f"backend-{back_end}", "principals": ["public"], "token_alg": "EdDSA"}
        made = await http.post("/_keys", json={**body, "token_public_key": pem(signer.public_key())})
        assert made.status_code == 201, made.text
        for sub in ("dana", "erin"):
            token = sign(signer, "EdDSA", f"backend-{back_end}", claims(sub=sub, principals=[]))
            secrets[f"{back_end}-{sub}"] = f"Bearer {token}"
    secrets["idp-hr-backend"] = f"Bearer {sign(idp_key, 'RS256', 'idp-1', idp_claims(sub='hr-backend', groups=[]))}"
    return secrets


async def _views(http: httpx.AsyncClient, url: str, alias: str, secret: str, prompts: Any) -> dict[str, str]:
    """Everything ``secret``'s owner reads of the outlines, its own DualRAG question's prompts included."""
    head = {"Authorization": secret}
    got: dict[str, str] = {}
    for name in (ENTITY, COLONY):
        got[f"GET {name}"] = (await http.get(f"/_outlines/{quote(name)}", headers=head)).text
        got[f"search entity {name}"] = (await http.post("/_outlines/_search", json={"entity": name}, headers=head)).text
    for query in ("penguins", "colony", *MARKERS.values()):
        got[f"search {query}"] = (await http.post("/_outlines/_search", json={"query": query}, headers=head)).text
    got["mcp outline"] = await _mcp(url, secret)
    before = len(prompts())
    ask = {"question": PLAIN_QUESTION, "strategy": "dualrag"}
    answered = await http.post(f"/{alias}/_ask", json=ask, headers=head)
    assert answered.status_code == 200, answered.text
    got["_ask"] = answered.text
    got["prompts of its DualRAG question"] = "\n".join(prompts()[before:])
    trace_id = answered.json()["trace_id"]
    got["its trace"] = (await http.get(f"/_traces/{trace_id}", headers=head)).text
    got["its trace in the viewer"] = (await http.get(f"/_ui/traces/{trace_id}", headers=head)).text
    got["_ask SSE"] = (await http.post(f"/{alias}/_ask?stream=true", json=ask, headers=head)).text
    return got


def _check(reader: str, views: dict[str, str], problems: list[str]) -> None:
    for asker, mark in MARKERS.items():
        for what, text in views.items():
            typed = what == f"search {mark}"  # the reader's own query, echoed by nobody: still checked below
            hits = json.loads(text).get("hits", {}).get("hits", []) if typed else None
            found = mark in (json.dumps(hits, ensure_ascii=False) if typed else text)
            if reader != asker and (found or (typed and hits)):
                problems.append(f"{reader} {what}: {asker}'s {mark!r} ({text[:200]})")
        if reader == asker and mark not in views[f"GET {ENTITY}"]:
            problems.append(f"{reader} cannot read its own sub-query: {views[f'GET {ENTITY}'][:300]}")
    if SHARED not in views[f"GET {ENTITY}"]:
        problems.append(f"{reader}: the shared fact is not shared: {views[f'GET {ENTITY}'][:300]}")


async def test_nothing_an_asker_wrote_reaches_another_owner(es_node: EsNode, tmp_path: Path) -> None:
    idp_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk(idp_key.public_key(), "idp-1")]}))
    problems: list[str] = []
    with server_for("vllm", model) as llm:
        settings = api_settings(
            es_node.url, llm, outline_max_age_s=3600, idp_issuer=ISSUER, idp_audience=[AUDIENCE], idp_jwks=str(jwks)
        )
        async with await Runtime.open(settings) as runtime:
            try:
                await load_jsonl(runtime.store, write_corpus(tmp_path, ROWS), LoadOptions(batch_size=50))
                async with uvicorn_serving_async(create_app(settings)) as url:
                    alias = settings.passages_alias
                    admin = {"Authorization": f"ApiKey {API_KEY}"}
                    async with httpx.AsyncClient(base_url=url, timeout=60, headers=admin) as http:
                        secrets = await _secrets(http, idp_key)
                        for asker, question in QUESTIONS.items():
                            ask = {"question": question, "strategy": "dualrag"}
                            head = {"Authorization": secrets[asker]}
                            answered = await http.post(f"/{alias}/_ask", json=ask, headers=head)
                            assert answered.status_code == 200, answered.text
                        await runtime.store.refresh(settings.outlines_index)
                        stored = (await http.post("/_outlines/_search", json={"query": "penguins"})).text
                        assert all(mark in stored for mark in MARKERS.values()), stored  # admins read all of it
                        for reader, secret in secrets.items():
                            _check(reader, await _views(http, url, alias, secret, lambda: llm.prompts), problems)
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )
    assert problems == [], "\n".join(problems)
