"""What an API key is, and the seams between the key store, the token verifiers and the gate.

A key lives in Elasticsearch (``<prefix>-keys``, :mod:`hopsearch.service.auth.keys`), only a hash of its
secret stored. A key may act for end users: a back end signs a short-lived JWT with a private key whose
public key is registered with the key (:class:`TokenKey`), and the token's principals must be a subset of
the key's. The company's IdP issues tokens of its own, checked against its JWKS
(:mod:`hopsearch.service.auth.tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from hopsearch.service.access import ACTIONS, Caller, owner_id
from hopsearch.service.errors import AuthenticationError

#: The algorithms an end-user token may be signed with, pinned per registered public key.
TokenAlgorithm = Literal["EdDSA", "RS256"]


@dataclass(frozen=True, slots=True)
class TokenKey:
    """A public key registered with an API key: end-user tokens whose header names ``kid`` and whose
    signature verifies with ``public_pem`` under ``algorithm`` (and no other) act for that API key."""

    kid: str
    algorithm: TokenAlgorithm
    public_pem: str


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """Per-key limits (None: the service's own limits only)."""

    concurrent_asks: int | None = None
    per_minute: int | None = None


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One stored API key, as the gate sees it (never its secret)."""

    name: str
    principals: frozenset[str] = frozenset()
    indices: tuple[str, ...] = ("*",)
    actions: frozenset[str] = ACTIONS
    admin: bool = False
    created: datetime | None = None
    expires: datetime | None = None
    revoked: bool = False
    limits: KeyLimits = field(default_factory=KeyLimits)
    token_keys: tuple[TokenKey, ...] = ()
    #: The outline namespace bound to the key (None: the service's).
    namespace: str | None = None
    #: The header whose value is each request's end user (:mod:`~hopsearch.service.auth.user_header`);
    #: None: the key is its own caller.
    user_header: str | None = None

    def usable(self, now: datetime) -> bool:
        return not self.revoked and (self.expires is None or now < self.expires)

    def caller(self, *, principals: frozenset[str] | None = None, subject: str | None = None) -> Caller:
        """Return the caller a request with this key is made by: the key's own principals, or an end user's
        (already checked to be a subset of the key's) with the token's subject. A key that vouches for its
        users by a header is never its own caller: :class:`AuthenticationError` without an end user's
        principals."""
        if principals is None and self.user_header is not None:
            raise AuthenticationError(
                f"the API key [{self.name}] acts only for the users its header [{self.user_header}] names "
                "(a chat front end's key): it is not a caller of its own"
            )
        return Caller(
            principals=self.principals if principals is None else principals,
            admin=self.admin,
            subject=subject or self.name,
            key=self.name,
            indices=self.indices,
            actions=self.actions,
            namespace=self.namespace,
            owner=owner_id("key", self.name, subject),
        )


class KeyLookup(Protocol):
    """Stored keys, read by name (a token's ``kid`` names its key) or by the hash of a secret."""

    async def by_name(self, name: str) -> KeyRecord | None: ...

    async def by_secret(self, secret: str) -> KeyRecord | None: ...


class TokenVerifier(Protocol):
    """Checks an end-user token (a JWT sent as ``Authorization: Bearer``) and says who makes the request;
    raises :class:`~hopsearch.service.errors.AuthenticationError` (401) or
    :class:`~hopsearch.service.errors.AuthorizationError` (403) saying why it is refused."""

    async def verify(self, token: str) -> Caller: ...
