"""A question's own words stay with its asker in shared outlines, and a summary that echoes its prompt is
no fact — over real HTTP (uvicorn) on 8.19, tried as an attacker would.

The HR back end's key asks "Is QSECRET-4242 (our confidential layoff plan) related to Emperor penguins?"
with DualRAG; the scripted model restates the question in its summary of a public passage, names an
entity after the secret (whose summary is the whole prompt: an echo) and learns an alias from it. A
public back end then asks about the penguins (its fact, all words from the passage, stays shared). Every
reader — the public key, a second back end minting ``sub=hr-backend``, an IdP user ``hr-backend`` — reads
every route that shows a fact, an entity name or an alias (``GET /_outlines/…`` by entity, alias and the
secret's name, ``POST /_outlines/_search``, MCP ``outline``, its own DualRAG answer as JSON and SSE, with
the outline it reused) and the whole response is searched for the secret."""

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
from tests.permissions_corpus import squash, write_corpus
from tests.scripted_llm import ScriptRequest
from tests.token_fixtures import AUDIENCE, ISSUER, claims, idp_claims, jwk, pem, sign

SECRET_QUESTION = "Is QSECRET-4242 (our confidential layoff plan) related to Emperor penguins?"
PLAIN_QUESTION = "Where do Emperor penguins breed?"
PASSAGE = "Emperor penguins are the tallest penguins and breed in the Antarctic winter."
SHARED = "Emperor penguins breed in the Antarctic winter."
SECRETS = ("QSECRET", "layoff", "confidential")
ENTITY, SECRET_ENTITY, SECRET_ALIAS = "Emperor penguins", "QSECRET-4242 plan", "QSECRET-4242 penguins"
ROWS = [
    {"_id": "penguins", "title": "Emperor penguins", "text": PASSAGE, "acl": "public"},
    {"_id": "moon", "title": "Moon", "text": "The moon orbits the earth.", "acl": "public"},
]


def model(request: ScriptRequest) -> str:
    """DualRAG's roles from the prompt alone: a model that restates what it was asked."""
    prompt = request.prompt
    role = role_of(prompt)
    secret = "QSECRET" in prompt.split("Knowledge outline", 1)[0]
    outline = prompt.split("Knowledge outline:", 1)[-1].split("Reasoning", 1)[0]
    if role == "reasoner":
        done = f"## {ENTITY}" in outline
        return json.dumps(reason("I can answer now." if done else "Look it up.", not done))
    if role == "identifier":
        if secret:
            found = entities(
                (ENTITY, ["emperor penguins"]), (SECRET_ENTITY, ["penguins"]), (SECRET_ALIAS, ["penguins"], ENTITY)
            )
        else:
            found = entities((ENTITY, ["emperor penguins"]))
        return json.dumps(found)
    if role == "summarizer":
        if f"Passages about {SECRET_ENTITY}:" in prompt:
            return squash(prompt)  # the whole prompt: instructions, question and all
        return f"{SHARED[:-1]}, which bears on QSECRET-4242 (our confidential layoff plan)." if secret else SHARED
    return " unknown"


async def _mcp_outline(url: str, secret: str) -> str:
    keyed = httpx2.AsyncClient(headers={"Authorization": secret}, timeout=60)
    out = []
    async with keyed, Client(streamable_http_client(f"{url}/_mcp/", http_client=keyed)) as client:
        for name in (ENTITY, SECRET_ALIAS, SECRET_ENTITY):
            found = await client.call_tool("outline", {"entity": name})
            out.append(str(found.content) + json.dumps(found.structured_content or {}))
    return "\n".join(out)


async def _secrets(http: httpx.AsyncClient, idp_key: Any) -> dict[str, str]:
    secrets: dict[str, str] = {}
    for name, principals in (("hr-backend", ["group:hr", "public"]), ("public-backend", ["public"])):
        made = await http.post("/_keys", json={"name": name, "principals": principals})
        assert made.status_code == 201, made.text
        secrets[name] = f"ApiKey {made.json()['key']}"
    signer = ed25519.Ed25519PrivateKey.generate()
    body = {"name": "eng", "principals": ["group:eng", "public"], "token_alg": "EdDSA"}
    made = await http.post("/_keys", json={**body, "token_public_key": pem(signer.public_key())})
    assert made.status_code == 201, made.text
    secrets["eng-as-hr-backend"] = f"Bearer {sign(signer, 'EdDSA', 'eng', claims(sub='hr-backend', principals=[]))}"
    token = sign(idp_key, "RS256", "idp-1", idp_claims(sub="hr-backend", groups=[]))
    secrets["idp-hr-backend"] = f"Bearer {token}"
    return secrets


async def _views(http: httpx.AsyncClient, url: str, alias: str, secret: str) -> dict[str, str]:
    head = {"Authorization": secret}
    got: dict[str, str] = {}
    for name in (ENTITY, SECRET_ALIAS, SECRET_ENTITY):
        read = await http.get(f"/_outlines/{quote(name)}", headers=head)
        got[f"GET outline {name}"] = read.text
        got[f"GET outline {name} status"] = str(read.status_code)
    for query in ("QSECRET-4242", "penguins", "layoff plan"):
        got[f"search {query}"] = (await http.post("/_outlines/_search", json={"query": query}, headers=head)).text
    got["mcp outline"] = await _mcp_outline(url, secret)
    ask = {"question": PLAIN_QUESTION, "strategy": "dualrag"}
    answered = await http.post(f"/{alias}/_ask", json=ask, headers=head)
    assert answered.status_code == 200, answered.text
    got["_ask"] = answered.text
    got["_ask SSE"] = (await http.post(f"/{alias}/_ask?stream=true", json=ask, headers=head)).text
    got["own trace"] = (await http.get(f"/_traces/{answered.json()['trace_id']}", headers=head)).text
    return got


async def test_a_question_s_words_reach_no_other_user_through_shared_outlines(es8_node: EsNode, tmp_path: Path) -> None:
    idp_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk(idp_key.public_key(), "idp-1")]}))
    problems: list[str] = []
    with server_for("vllm", model) as llm:
        settings = api_settings(
            es8_node.url, llm, outline_max_age_s=3600, idp_issuer=ISSUER, idp_audience=[AUDIENCE], idp_jwks=str(jwks)
        )
        async with await Runtime.open(settings) as runtime:
            try:
                await load_jsonl(runtime.store, write_corpus(tmp_path, ROWS), LoadOptions(batch_size=50))
                async with uvicorn_serving_async(create_app(settings)) as url:
                    admin = {"Authorization": f"ApiKey {API_KEY}"}
                    alias = settings.passages_alias
                    async with httpx.AsyncClient(base_url=url, timeout=60, headers=admin) as http:
                        secrets = await _secrets(http, idp_key)
                        trace_ids: dict[str, str] = {}
                        for who, question in (("hr-backend", SECRET_QUESTION), ("public-backend", PLAIN_QUESTION)):
                            ask = {"question": question, "strategy": "dualrag"}
                            head = {"Authorization": secrets[who]}
                            answered = await http.post(f"/{alias}/_ask", json=ask, headers=head)
                            assert answered.status_code == 200, answered.text
                            trace_ids[who] = answered.json()["trace_id"]
                        await runtime.store.refresh(settings.outlines_index)
                        for reader, secret in secrets.items():
                            views = await _views(http, url, alias, secret)
                            if reader != "hr-backend":
                                for name in (SECRET_ALIAS, SECRET_ENTITY):
                                    if views.pop(f"GET outline {name} status") != "404":
                                        problems.append(f"{reader} GET outline {name}: {views[f'GET outline {name}']}")
                            for what, text in views.items():
                                # a 404 names what the reader asked for: its own words are no leak
                                typed = "QSECRET" in what or what in (
                                    "mcp outline",
                                    *(f"GET outline {n}" for n in (SECRET_ALIAS, SECRET_ENTITY)),
                                )
                                found = [
                                    s
                                    for s in SECRETS
                                    if s.casefold() in text.casefold() and not (typed and s == "QSECRET")
                                ]
                                if reader != "hr-backend" and found:
                                    problems.append(f"{reader} {what}: the HR question's words {found}")
                                if (
                                    reader == "public-backend"
                                    and what == f"GET outline {ENTITY}"
                                    and SHARED not in text
                                ):
                                    problems.append(f"the shared fact is not shared: {text[:300]}")
                                if reader == "hr-backend" and what == f"GET outline {ENTITY}" and "QSECRET" not in text:
                                    problems.append(f"hr cannot read its own fact: {text[:300]}")  # the check can see
                        hr_read = await http.get(f"/_traces/{trace_ids['hr-backend']}")
                        assert hr_read.status_code == 200, hr_read.text
                        hr_trace = hr_read.json()["_source"]
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )
    assert problems == [], "\n".join(problems)
    summaries = [s for s in hr_trace["steps"] if s["kind"] == "summarize"]
    echoed = [s["details"] for s in summaries if s["details"]["entity"] == SECRET_ENTITY]
    assert echoed and all(d["echo"] and d["dropped"] for d in echoed), summaries  # dropped and counted


def test_a_summary_that_restates_the_prompt_or_the_question_is_an_echo() -> None:
    from hopsearch.service.strategies.dualrag_prompts import is_echo

    japanese = "The question is in Japanese: write the answer … Question: 東京の人口は？ Knowledge outline: (nothing …)"
    assert is_echo(japanese, "東京の人口は？")
    assert is_echo(
        "You asked: is QSECRET-4242 related to Emperor penguins",
        SECRET_QUESTION.replace("(our confidential layoff plan) ", ""),
    )
    assert not is_echo(SHARED, PLAIN_QUESTION) and not is_echo("None", PLAIN_QUESTION)
