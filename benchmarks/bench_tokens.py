"""What checking an end-user token costs per request, against PyJWT's signature check alone.

    .venv/bin/python benchmarks/bench_tokens.py [--n 2000] [--es URL]

Times :meth:`JwtVerifier.verify` (every check: header, key record, pinned algorithm, signature, ``exp``
cap, principals against the key, the caller) for a back end's EdDSA and RS256 tokens and an IdP's RS256
token (JWKS file), each with 10 principals; and, with ``--es``, with the user's groups read from a real
groups index (``groups_cache_s`` 0: one GET per token, and the default 2 s). Prints microseconds per token
(median of 5 runs of N) and the ratio to ``jwt.decode`` with the same key (the floor: the signature).
The key store is in memory here; the stored keys' own lookup is the key store's cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from jwt.algorithms import RSAAlgorithm

from hopsearch.service.auth.groups import EsGroups, GroupLookup
from hopsearch.service.auth.public_keys import jwks_source
from hopsearch.service.auth.records import KeyRecord, TokenKey
from hopsearch.service.auth.tokens import JwtVerifier
from hopsearch.service.config.settings import Settings
from hopsearch.service.store import Store

ISSUER, AUDIENCE = "https://idp.example.com", "api://hopsearch"
PRINCIPALS = [f"group:g{n}" for n in range(10)]


class Keys:
    def __init__(self, record: KeyRecord) -> None:
        self.record = record

    async def by_name(self, name: str) -> KeyRecord | None:
        return self.record if name == self.record.name else None

    async def by_secret(self, secret: str) -> KeyRecord | None:
        return None


def pem(public: Any) -> str:
    raw = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return str(raw.decode())


async def per_token_us(
    floor: Callable[[], Awaitable[Any]], full: Callable[[], Awaitable[Any]], n: int
) -> tuple[float, float]:
    """Microseconds per token of ``floor`` and ``full``, interleaved runs (the machine's load hits both)."""
    runs: tuple[list[float], list[float]] = ([], [])
    for _ in range(5):
        for work, times in ((floor, runs[0]), (full, runs[1])):
            start = time.perf_counter()
            for _ in range(n):
                await work()
            times.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(runs[0]), statistics.median(runs[1])


async def main(n: int, es: str | None) -> None:
    ed, rs = ed25519.Ed25519PrivateKey.generate(), rsa.generate_private_key(public_exponent=65537, key_size=2048)
    record = KeyRecord(
        "backend",
        frozenset(PRINCIPALS),
        token_keys=(TokenKey("ed", "EdDSA", pem(ed.public_key())), TokenKey("rs", "RS256", pem(rs.public_key()))),
    )
    exp = int(time.time()) + 3000
    claims = {"sub": "alice", "exp": exp, "principals": PRINCIPALS}
    tokens = {
        "back end EdDSA": (jwt.encode(claims, ed, "EdDSA", headers={"kid": "backend/ed"}), ed.public_key(), "EdDSA"),
        "back end RS256": (jwt.encode(claims, rs, "RS256", headers={"kid": "backend/rs"}), rs.public_key(), "RS256"),
    }
    idp_claims = {"sub": "alice", "exp": exp, "iss": ISSUER, "aud": AUDIENCE, "groups": [f"g{n}" for n in range(10)]}
    tokens["IdP RS256 (JWKS)"] = (jwt.encode(idp_claims, rs, "RS256", headers={"kid": "idp"}), rs.public_key(), "RS256")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "jwks.json"
        path.write_text(json.dumps({"keys": [{**json.loads(RSAAlgorithm.to_jwk(rs.public_key())), "kid": "idp"}]}))
        settings = Settings(idp_issuer=ISSUER, idp_audience=[AUDIENCE], idp_jwks=str(path))
        idp = jwks_source(str(path), refresh_s=3600)

        async def report(label: str, groups: GroupLookup | None) -> None:
            check = JwtVerifier(Keys(record), settings, groups, idp=idp)
            for name, (token, public, alg) in tokens.items():

                async def floor(token: str = token, public: Any = public, alg: str = alg) -> Any:
                    return jwt.decode(token, public, algorithms=[alg], options={"verify_aud": False})

                async def full(token: str = token) -> Any:
                    return await check.verify(token)

                base, cost = await per_token_us(floor, full, n)
                print(f"{name:18} {label:28} {cost:8.1f} µs/token  jwt.decode {base:7.1f} µs  {cost / base:5.2f}x")

        await report("no groups", None)
        if es:
            store = await Store.connect(Settings(es_url=[es], index_prefix=f"bench-{uuid.uuid4().hex[:8]}"))
            try:
                groups = EsGroups(store, cache_s=0)
                await groups.add("alice", [f"g{n}" for n in range(5)])
                await report("groups index, one GET each", groups)
                await report("groups index, cached 2 s", EsGroups(store, cache_s=2.0))
            finally:
                await store.client.indices.delete(index=store.settings.groups_index, ignore_unavailable=True)
                await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="Tokens per run.")
    parser.add_argument("--es", default=None, help="Elasticsearch URL for the groups index runs.")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.es))
