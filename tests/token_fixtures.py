"""End-user tokens for tests: PEM and JWK forms of keys made with ``cryptography``, signed claims, and
an in-memory key store (the :class:`~hopsearch.service.auth.records.KeyLookup` seam, ours, not
Elasticsearch)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from hopsearch.service.auth.records import KeyRecord

ISSUER = "https://login.example.com/tenant/v2.0"
AUDIENCE = "api://hopsearch"


def pem(public: Any) -> str:
    return str(
        public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    )


class Keys:
    """The key store as the verifier sees it: records by name (secrets play no part in tokens)."""

    def __init__(self, *records: KeyRecord) -> None:
        self.records = {r.name: r for r in records}

    async def by_name(self, name: str) -> KeyRecord | None:
        return self.records.get(name)

    async def by_secret(self, secret: str) -> KeyRecord | None:
        return None


def claims(**extra: Any) -> dict[str, Any]:
    return {"sub": "alice", "exp": int(time.time()) + 600, "principals": ["group:staff"], **extra}


def sign(key: Any, alg: str, kid: str | None, body: Mapping[str, Any], **header: Any) -> str:
    headers = {**header, **({"kid": kid} if kid is not None else {})}
    return jwt.encode(dict(body), key, algorithm=alg, headers=headers)


def jwk(public: Any, kid: str, **fields: Any) -> dict[str, Any]:
    kind = RSAAlgorithm if isinstance(public, rsa.RSAPublicKey) else OKPAlgorithm
    if isinstance(public, ec.EllipticCurvePublicKey):
        kind = ECAlgorithm
    data: dict[str, Any] = json.loads(kind.to_jwk(public))
    return {**data, "kid": kid, "use": "sig", **fields}


def idp_claims(**extra: Any) -> dict[str, Any]:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "u-123", "iat": now, "exp": now + 3600, "groups": ["HR", "eng"]}
    return {**body, **extra}
