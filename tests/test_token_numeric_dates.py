"""A token's ``exp`` (and ``nbf``, ``iat``) must be a JSON number (RFC 7519 NumericDate), over real HTTP
(uvicorn) on 8.19: a back end's token and the IdP's with ``exp`` as a string of digits are refused with a
401 naming the claim; the same tokens with a number are served."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from hopsearch.service.api import create_app
from tests.api_fixtures import API_KEY, api_settings, uvicorn_serving_async
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.test_permissions_ask import EchoModel
from tests.token_fixtures import AUDIENCE, ISSUER, claims, idp_claims, jwk, pem, sign


async def _statuses(url: str, tokens: dict[str, str]) -> dict[str, tuple[int, str]]:
    out: dict[str, tuple[int, str]] = {}
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        for label, token in tokens.items():
            got = await http.get(
                "/_ui/traces", headers={"Authorization": f"Bearer {token}", "Accept": "application/json"}
            )
            out[label] = (got.status_code, got.text)
    return out


async def test_a_numeric_string_exp_is_refused_for_back_end_and_idp_tokens(es8_node: EsNode, tmp_path: Path) -> None:
    backend = ed25519.Ed25519PrivateKey.generate()
    idp = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [jwk(idp.public_key(), "idp-1")]}))
    later = int(time.time()) + 300
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(es8_node.url, llm, idp_issuer=ISSUER, idp_audience=[AUDIENCE], idp_jwks=str(jwks))
        async with uvicorn_serving_async(create_app(settings)) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as admin:
                made = await admin.post(
                    "/_keys",
                    json={
                        "name": "intranet",
                        "principals": ["group:staff", "public"],
                        "token_public_key": pem(backend.public_key()),
                        "token_alg": "EdDSA",
                    },
                    headers={"Authorization": f"ApiKey {API_KEY}"},
                )
                assert made.status_code == 201, made.text
            tokens: dict[str, Any] = {
                "key, exp number": sign(backend, "EdDSA", "intranet", claims(exp=later)),
                "key, exp string": sign(backend, "EdDSA", "intranet", claims(exp=str(later))),
                "key, nbf string": sign(backend, "EdDSA", "intranet", claims(exp=later, nbf=str(later - 600))),
                "idp, exp number": sign(idp, "RS256", "idp-1", idp_claims(exp=later)),
                "idp, exp string": sign(idp, "RS256", "idp-1", idp_claims(exp=str(later))),
                "idp, iat string": sign(idp, "RS256", "idp-1", idp_claims(exp=later, iat=str(later - 600))),
            }
            got = await _statuses(url, tokens)
    for label, (status, text) in got.items():
        if "number" in label:
            assert status == 200, (label, text)
        else:
            claim = label.split(", ")[1].split()[0]
            assert status == 401 and f"`{claim}`" in text and "NumericDate" in text, (label, status, text)
