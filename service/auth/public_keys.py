"""The public keys end-user tokens are checked against: a back end's PEM, registered with its API key, and
the company IdP's JWKS (a file read at start, or a URL fetched and kept).

A JWKS URL is fetched at the first token, used for ``idp_jwks_refresh_s`` and fetched again after it; a
token naming a ``kid`` the keys lack fetches again at once (an IdP rotating its keys), at most every
:data:`REFETCH_S` seconds, so a stream of made-up ``kid`` values costs the IdP one request per interval.
A failed fetch keeps the keys fetched before (logged); with none, the token is refused.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import httpx
from cryptography.hazmat.primitives.asymmetric import ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from hopsearch.service.auth.records import TokenAlgorithm, TokenKey
from hopsearch.service.errors import AuthenticationError, ConfigError, InputError

log = logging.getLogger(__name__)

#: Shortest wait between two fetches of a JWKS URL for a ``kid`` it did not hold.
REFETCH_S = 10.0
#: Seconds one JWKS fetch may take.
FETCH_TIMEOUT_S = 10.0
#: Smallest RSA modulus a registered key may have, bits.
MIN_RSA_BITS = 2048


def token_key(kid: str, algorithm: str, pem: str | bytes, *, source: str = "public key") -> TokenKey:
    """Return a public key to register with an API key, checked: a PEM public key (never a private one) of the
    algorithm's kind (EdDSA: Ed25519 or Ed448; RS256: RSA of at least :data:`MIN_RSA_BITS` bits).
    ``InputError`` naming ``source`` (the file) and what is wrong."""
    text = pem.decode("ascii", "replace") if isinstance(pem, bytes) else pem
    if "PRIVATE KEY" in text:
        raise InputError("is a private key: register the public key (openssl pkey -pubout)", source=source)
    if not kid or "/" in kid:
        raise InputError(f"bad public key id {kid!r}: a non-empty name without '/'", source=source)
    try:
        key = load_pem_public_key(text.encode("ascii", "replace"))
    except ValueError as exc:
        raise InputError(f"is not a PEM public key ({exc})", source=source) from exc
    if algorithm == "EdDSA":
        if not isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
            raise InputError(f"is a {type(key).__name__}, not an Ed25519 key (EdDSA)", source=source)
        alg: TokenAlgorithm = "EdDSA"
    elif algorithm == "RS256":
        if not isinstance(key, rsa.RSAPublicKey):
            raise InputError(f"is a {type(key).__name__}, not an RSA key (RS256)", source=source)
        if key.key_size < MIN_RSA_BITS:
            raise InputError(f"is an RSA key of {key.key_size} bits, fewer than {MIN_RSA_BITS}", source=source)
        alg = "RS256"
    else:
        raise InputError(f"bad token algorithm {algorithm!r}: EdDSA or RS256", source=source)
    return TokenKey(kid=kid, algorithm=alg, public_pem=text.strip() + "\n")


def parse_jwks(data: Any, where: str) -> dict[str, dict[str, Any]]:
    """Return the signing keys of a JWKS document by ``kid`` (a key without one under ``""``); keys for
    encryption (``use: enc``) are left out. ``ValueError`` saying what is wrong."""
    keys = data.get("keys") if isinstance(data, Mapping) else None
    if not isinstance(keys, list):
        raise ValueError(f"{where}: not a JWKS (an object with a `keys` list)")
    found: dict[str, dict[str, Any]] = {}
    for number, key in enumerate(keys):
        if not isinstance(key, Mapping) or not isinstance(key.get("kty"), str):
            raise ValueError(f"{where}: keys[{number}] is not a JWK (an object with `kty`)")
        if key.get("use", "sig") != "sig":
            continue
        found[str(key.get("kid", ""))] = dict(key)
    if not found:
        raise ValueError(f"{where}: holds no signing key")
    return found


class JwksSource(Protocol):
    """The IdP's signing keys; ``where`` names them in messages (the file or URL)."""

    where: str

    async def key(self, kid: str) -> dict[str, Any] | None:
        """Return the JWK of ``kid`` (``""``: the only key of a set with one), or None."""
        ...

    async def aclose(self) -> None: ...


def _pick(keys: Mapping[str, dict[str, Any]], kid: str) -> dict[str, Any] | None:
    if kid in keys:
        return keys[kid]
    if not kid and len(keys) == 1:
        return next(iter(keys.values()))
    return None


class JwksFile:
    """A JWKS file, read once (at start): ``ConfigError`` naming the file where it cannot be used."""

    def __init__(self, path: Path) -> None:
        self.where = str(path)
        try:
            self._keys = parse_jwks(json.loads(path.read_text(encoding="utf-8")), self.where)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
            raise ConfigError(f"idp_jwks: {exc}" if isinstance(exc, ValueError) else f"idp_jwks {path}: {exc}") from exc

    async def key(self, kid: str) -> dict[str, Any] | None:
        return _pick(self._keys, kid)

    async def aclose(self) -> None:
        return None


class JwksUrl:
    """A JWKS URL, fetched with httpx and kept ``refresh_s`` seconds (an injectable client for tests)."""

    def __init__(
        self, url: str, *, refresh_s: float, client: httpx.AsyncClient | None = None, refetch_s: float = REFETCH_S
    ) -> None:
        self.where = url
        self.refresh_s = refresh_s
        self.refetch_s = refetch_s
        self._client = client or httpx.AsyncClient(timeout=FETCH_TIMEOUT_S, follow_redirects=False)
        self._owned = client is None
        self._keys: dict[str, dict[str, Any]] | None = None
        self._fetched = float("-inf")
        self._lock = asyncio.Lock()

    async def key(self, kid: str) -> dict[str, Any] | None:
        if time.monotonic() - self._fetched > self.refresh_s:
            await self._fetch(self._fetched)
        assert self._keys is not None
        found = _pick(self._keys, kid)
        if found is None and time.monotonic() - self._fetched > self.refetch_s:
            await self._fetch(self._fetched)
            found = _pick(self._keys, kid)
        return found

    async def _fetch(self, seen: float) -> None:
        async with self._lock:
            if self._fetched != seen:  # another token fetched them meanwhile
                return
            try:
                response = await self._client.get(self.where, headers={"Accept": "application/json"})
                response.raise_for_status()
                keys = parse_jwks(response.json(), self.where)
            except (httpx.HTTPError, ValueError) as exc:
                if self._keys is None:
                    raise AuthenticationError(
                        f"the IdP's signing keys could not be fetched from {self.where}: {exc}",
                        details={"reason": "jwks_unavailable"},
                    ) from exc
                log.warning("JWKS %s could not be fetched again (%s): the keys before stay in use", self.where, exc)
                # try again in REFETCH_S, not after a whole refresh interval
                self._fetched = time.monotonic() - self.refresh_s + self.refetch_s
                return
            self._keys, self._fetched = keys, time.monotonic()
            log.info("JWKS %s: %d signing keys", self.where, len(keys))

    async def aclose(self) -> None:
        if self._owned:
            await self._client.aclose()


def jwks_source(location: str, *, refresh_s: float, client: httpx.AsyncClient | None = None) -> JwksSource:
    """Return the ``idp_jwks`` setting's keys: an ``http(s)://`` URL, else a file path."""
    if location.startswith(("https://", "http://")):
        return JwksUrl(location, refresh_s=refresh_s, client=client)
    return JwksFile(Path(location).expanduser())
