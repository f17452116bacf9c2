"""ACL values are matched literally, so no principal may be a wildcard: an IdP group named ``*`` once read a
connector document whose readers list holds ``*``. Over real HTTP (uvicorn) on 8.19, with an attached
Elastic-connector index: keys naming ``*?[],`` are refused (``POST /_keys``), a back end's token (through
an admin key, whose end users name any principals) and the IdP's naming such a group are refused 401, and
a stored groups document holding ``group:*`` written around ``hopsearch groups`` gives nothing. Every
response is searched whole for the marker of the ``*`` document."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from hopsearch.cli.main import main
from hopsearch.service.api import create_app
from tests.api_fixtures import API_KEY, api_settings, uvicorn_serving_async
from tests.attached_corpus import plain_client
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.test_permissions_ask import EchoModel
from tests.token_fixtures import AUDIENCE, ISSUER, claims, idp_claims, jwk, pem, sign

WILD = "WILDMARKER-4711"
QUERY = "quarterly budget memo"


def make_index(client: Any, name: str) -> None:
    mappings = {
        "properties": {
            "id": {"type": "keyword"},
            "title": {"type": "text"},
            "body": {"type": "text"},
            "url": {"type": "keyword"},
            "_timestamp": {"type": "date"},
            "_allow_access_control": {"type": "keyword"},
        }
    }
    client.indices.create(index=name, body={"settings": {"number_of_shards": 1}, "mappings": mappings})
    docs = {
        "wild": ["*"],
        "pub": ["group:everyone"],
    }
    for doc_id, acl in docs.items():
        marker = WILD if doc_id == "wild" else "PLAINMARKER"
        body = {"id": doc_id, "title": "Budget", "body": f"The quarterly budget memo says {marker}.", "url": doc_id}
        client.index(index=name, id=doc_id, body={**body, "_allow_access_control": acl, "_timestamp": "2025-01-01"})
    client.indices.refresh(index=name)


async def cli(env: dict[str, str], *args: str) -> Any:
    """The command line, in a thread (it runs its own event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, main, list(args), env=env)


async def test_no_boundary_takes_a_wildcard_principal(es8_node: EsNode, tmp_path: Path) -> None:
    backend = ed25519.Ed25519PrivateKey.generate()
    idp = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk(idp.public_key(), "idp-1")]}))
    client = plain_client(es8_node.url, es8_node.major)
    problems: list[str] = []
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(es8_node.url, llm, idp_issuer=ISSUER, idp_audience=[AUDIENCE], idp_jwks=str(jwks))
        sp = f"corp-sp-{uuid.uuid4().hex[:8]}"
        env = {
            "HOPSEARCH_ES_URL": es8_node.url,
            "HOPSEARCH_INDEX_PREFIX": settings.index_prefix,
            "HOPSEARCH_EMBEDDER": "none",
            "HOPSEARCH_ES_API_KEY": settings.es_api_key.get_secret_value() if settings.es_api_key else "",
        }
        make_index(client, sp)
        try:
            attached = await cli(env, "indices", "attach", sp, "--layout", "elastic-connector")
            assert attached.exit_code == 0, attached.output
            stored = await cli(env, "groups", "add", "mallory", "staff")
            assert stored.exit_code == 0, stored.output
            # a groups document changed around hopsearch groups (a script, curl): a wildcard group in it
            groups_doc = client.get(index=settings.groups_index, id="mallory")["_source"]
            client.index(
                index=settings.groups_index,
                id="mallory",
                body={**groups_doc, "groups": ["group:staff", "group:*"]},
                refresh=True,
            )
            app = create_app(settings)
            async with uvicorn_serving_async(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
                admin = {"Authorization": f"ApiKey {API_KEY}"}
                for bad in ("group:*", "group:?", "group:a,b", "group:[a-z]", "user:*"):
                    made = await http.post(
                        "/_keys", json={"name": f"k{uuid.uuid4().hex[:6]}", "principals": [bad]}, headers=admin
                    )
                    if made.status_code != 400:
                        problems.append(f"key with {bad}: {made.status_code} {made.text[:200]}")
                made = await http.post(
                    "/_keys",
                    json={
                        "name": "intranet",
                        "admin": True,
                        "token_public_key": pem(backend.public_key()),
                        "token_alg": "EdDSA",
                    },
                    headers=admin,
                )
                assert made.status_code == 201, made.text
                tokens = {
                    "back end, principals [group:*]": sign(
                        backend, "EdDSA", "intranet", claims(principals=["group:*"])
                    ),
                    "back end, principals [group:?]": sign(
                        backend, "EdDSA", "intranet", claims(principals=["group:?"])
                    ),
                    "back end, sub *": sign(backend, "EdDSA", "intranet", claims(sub="*", principals=[])),
                    "idp, groups [*]": sign(idp, "RS256", "idp-1", idp_claims(groups=["*"])),
                    "idp, groups [a?]": sign(idp, "RS256", "idp-1", idp_claims(groups=["a?"])),
                }
                for label, token in tokens.items():
                    got = await http.post(
                        f"/{sp}/_retrieve",
                        json={"query": QUERY, "k": 10},
                        headers={"Authorization": f"Bearer {token}"},
                    )
                    if got.status_code != 401 or WILD in got.text:
                        problems.append(f"{label}: {got.status_code} {got.text[:200]}")
                # mallory's stored groups hold group:* (dropped); she reads the public document only
                mallory = sign(idp, "RS256", "idp-1", idp_claims(sub="mallory", groups=["everyone"]))
                got = await http.post(
                    f"/{sp}/_retrieve",
                    json={"query": QUERY, "k": 10},
                    headers={"Authorization": f"Bearer {mallory}"},
                )
                if got.status_code != 200 or WILD in got.text or "PLAINMARKER" not in got.text:
                    problems.append(f"stored group:*: {got.status_code} {got.text[:300]}")
                # an admin reads the * document (the marker is there to be found)
                got = await http.post(f"/{sp}/_retrieve", json={"query": QUERY, "k": 10}, headers=admin)
                assert WILD in got.text, got.text[:300]
        finally:
            client.indices.delete(index=f"{settings.index_prefix}*")
            client.indices.delete(index=sp, ignore_unavailable=True)
    assert problems == [], "\n".join(problems)
