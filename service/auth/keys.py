"""Stored API keys: ``<prefix>-keys`` in Elasticsearch, only a hash of each secret kept.

A key is two documents: the key itself under the SHA-256 of its secret (a request's key is one real-time
``GET``, no search and no refresh), and a claim of its name (``name:<name>``, written with
``op_type=create``, so two processes creating one name cannot both succeed) pointing at the hash. A
secret is 32 random bytes (``hs_`` + URL-safe base64): a hash of so much entropy needs no salt nor a slow
function. Revocation flags the key document; a lookup is reused for at most ``api_key_cache_s`` (0.5 s
by default), so every service process refuses a revoked key within that.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from hopsearch.service.access import ACTIONS, Caller, document_principal, owner_id, principal
from hopsearch.service.auth.records import KeyLimits, KeyLookup, KeyRecord, TokenAlgorithm, TokenKey
from hopsearch.service.auth.user_header import check_header_name
from hopsearch.service.errors import (
    AlreadyExists,
    AuthenticationError,
    AuthorizationError,
    ConfigError,
    HopsearchError,
    IndexMissing,
    InputError,
    NotFound,
    VersionConflict,
)
from hopsearch.service.store import Store, load_template

log = logging.getLogger("hopsearch.audit")
SECRET_PREFIX = "hs_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_DURATION = re.compile(r"^\s*(\d{1,6})\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
ALGORITHMS: tuple[TokenAlgorithm, ...] = ("EdDSA", "RS256")
#: Keys a listing shows at most (a service has tens of keys, not thousands).
MAX_LISTED = 10_000


def hash_secret(secret: str) -> str:
    """Return the id a key is stored under: the SHA-256 of its secret, in hex."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def parse_duration(text: str, where: str = "--expires") -> timedelta:
    """``90d``, ``12h``, ``30m``, ``45s``, ``2w`` as a duration; an :class:`InputError` naming ``where`` else."""
    found = _DURATION.match(text)
    if found is None or int(found.group(1)) == 0:
        raise InputError(f"{where}: {text!r} is no duration: a positive number and s, m, h, d or w (90d, 12h)")
    return timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})


def _bad(field: str, message: str) -> InputError:
    return InputError(message, details={"field": field})


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise InputError(
            f"bad key name {name!r}: 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit",
            details={"field": "name"},
        )
    return name


def check_actions(actions: Iterable[str]) -> frozenset[str]:
    chosen = frozenset(a.strip().lower() for a in actions if a.strip())
    unknown = sorted(chosen - ACTIONS)
    if unknown:
        raise _bad("actions", f"unknown action {unknown[0]!r}: one of {', '.join(sorted(ACTIONS))}")
    return chosen


def check_principals(names: Iterable[str]) -> frozenset[str]:
    """Return a key's (or ``--principal``'s) principals in their one spelling: ``public``, ``user:<name>`` or
    ``group:<name>``, each a name a passage's ``acl`` may hold (no wildcard ``*?[]``, comma or control
    character: :func:`~hopsearch.service.access.document_principal`)."""
    chosen = frozenset(principal(n) for n in names if n.strip())
    for name in chosen:
        kind, sep, rest = name.partition(":")
        if name != "public" and (not sep or kind not in ("user", "group") or not rest):
            raise _bad("principals", f"bad principal {name!r}: public, user:<name> or group:<name>")
        try:
            document_principal(name)
        except ValueError as exc:
            raise _bad("principals", str(exc)) from exc
    return chosen


def check_patterns(patterns: Sequence[str]) -> tuple[str, ...]:
    chosen = tuple(p.strip() for p in patterns if p.strip())
    for pattern in chosen:
        if "," in pattern or ":" in pattern or pattern.startswith("-"):
            raise _bad("indices", f"bad index pattern {pattern!r}: one name or `*` pattern per value")
    return chosen or ("*",)


def check_key_id(kid: str) -> str:
    """Return a public key's id (what an end-user token's ``kid`` names after ``<key name>/``): the key names'
    spelling, so never a ``/``."""
    if not _NAME.match(kid):
        raise _bad(
            "token_key_id",
            f"bad public key id {kid!r}: 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return kid


def token_key(kid: str, algorithm: str, public_pem: str) -> TokenKey:
    """Return a public key registered with a key under the id ``kid``, checked: a PEM public key of the
    algorithm's kind (Ed25519 for EdDSA, RSA of at least 2048 bits for RS256)."""
    from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    check_key_id(kid)
    if algorithm not in ALGORITHMS:
        raise _bad("token_alg", f"token algorithm {algorithm!r}: one of {', '.join(ALGORITHMS)}")
    try:
        loaded = load_pem_public_key(public_pem.encode("utf-8"))
    except (ValueError, TypeError) as exc:
        raise _bad("token_public_key", f"the token public key is not a PEM public key ({exc})") from exc
    if algorithm == "EdDSA" and not isinstance(loaded, ed25519.Ed25519PublicKey):
        raise _bad("token_public_key", "EdDSA takes an Ed25519 public key")
    if algorithm == "RS256" and not (isinstance(loaded, rsa.RSAPublicKey) and loaded.key_size >= 2048):
        raise _bad("token_public_key", "RS256 takes an RSA public key of at least 2048 bits")
    return TokenKey(kid=kid, algorithm=algorithm, public_pem=public_pem)


def _date(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def record_of(doc: Mapping[str, Any]) -> KeyRecord:
    """Return a stored key document as the gate sees it."""
    limits = doc.get("limits") or {}
    return KeyRecord(
        name=str(doc["name"]),
        principals=frozenset(doc.get("principals") or ()),
        indices=tuple(doc.get("indices") or ("*",)),
        actions=frozenset(doc.get("actions") or ()),
        admin=bool(doc.get("admin")),
        created=_date(doc.get("created")),
        expires=_date(doc.get("expires")),
        revoked=bool(doc.get("revoked")),
        limits=KeyLimits(concurrent_asks=limits.get("concurrent_asks"), per_minute=limits.get("per_minute")),
        token_keys=tuple(
            TokenKey(kid=str(t["kid"]), algorithm=t["algorithm"], public_pem=str(t["public_pem"]))
            for t in doc.get("token_keys") or ()
        ),
        namespace=doc.get("namespace"),
        user_header=doc.get("user_header") or None,
    )


def _fields(record: KeyRecord) -> dict[str, Any]:
    """Return what a key's stored document and its listing share."""
    return {
        "name": record.name,
        "principals": sorted(record.principals),
        "indices": list(record.indices),
        "actions": sorted(record.actions),
        "admin": record.admin,
        "created": record.created.isoformat() if record.created else None,
        "expires": record.expires.isoformat() if record.expires else None,
        "limits": {"concurrent_asks": record.limits.concurrent_asks, "per_minute": record.limits.per_minute},
        "namespace": record.namespace,
        "user_header": record.user_header,
    }


def document_of(record: KeyRecord, digest: str) -> dict[str, Any]:
    return {
        "kind": "key",
        **_fields(record),
        "hash": digest,
        "revoked": record.revoked,
        "token_keys": [{"kid": t.kid, "algorithm": t.algorithm, "public_pem": t.public_pem} for t in record.token_keys],
    }


def listed(record: KeyRecord, now: datetime | None = None) -> dict[str, Any]:
    """Return what ``keys list`` and ``GET /_keys`` show of a key: everything but its secret (never stored) and hash."""
    now = now or datetime.now(UTC)
    state = "revoked" if record.revoked else "expired" if not record.usable(now) else "active"
    return {
        **_fields(record),
        "state": state,
        "token_keys": [{"kid": t.kid, "algorithm": t.algorithm} for t in record.token_keys],
    }


#: The detail of a refusal of the credential itself (not of what it may do): OpenAI's face answers it 401.
REFUSED_CREDENTIAL = {"credential": "refused"}


def key_refusal(record: KeyRecord | None, now: datetime) -> tuple[str, HopsearchError] | None:
    """Why a request with a stored key is refused, as ``(audit event, error)``; None for a usable key."""
    if record is None:
        return "auth_unknown_key", AuthorizationError("the API key is not accepted", details=REFUSED_CREDENTIAL)
    if record.revoked:
        why = f"the API key [{record.name}] is revoked"
        return "auth_revoked_key", AuthorizationError(why, details=REFUSED_CREDENTIAL)
    if not record.usable(now):
        expired = record.expires.isoformat() if record.expires else "?"
        return "auth_expired_key", AuthenticationError(f"the API key [{record.name}] expired at {expired}")
    return None


async def caller_for_secret(lookup: KeyLookup, secret: str) -> Caller:
    """Return the caller a stored key's secret makes (the command line's ``--key``); its refusal else."""
    record = await lookup.by_secret(secret.strip())
    refusal = key_refusal(record, datetime.now(UTC))
    if refusal is not None:
        raise refusal[1]
    assert record is not None
    return record.caller()


def caller_of_principals(names: Iterable[str]) -> Caller:
    """Return a caller that is no admin, of ``names`` (the command line's ``--principal``); its subject, whom its
    traces belong to, is its first ``user:`` principal's name."""
    principals = check_principals(names)
    users = sorted(p.partition(":")[2] for p in principals if p.startswith("user:"))
    subject = users[0] if users else None
    return Caller(principals=principals, subject=subject, owner=owner_id("cli", None, subject) if subject else None)


@dataclass(frozen=True, slots=True)
class NewKey:
    """What creating a key asks for (checked by :meth:`KeyStore.create`)."""

    name: str
    principals: Sequence[str] = ()
    indices: Sequence[str] = ()
    actions: Sequence[str] = ()
    admin: bool = False
    expires: str | None = None
    concurrent_asks: int | None = None
    per_minute: int | None = None
    token_algorithm: str | None = None
    token_public_pem: str | None = None
    #: The public key's id (the ``kid`` of its tokens is ``<name>/<id>``); default: the key's name.
    token_key_id: str | None = None
    namespace: str | None = None
    #: The header naming each request's end user (a chat front end's key): :mod:`.user_header`.
    user_header: str | None = None


class KeyStore:
    """The keys index of one prefix; implements :class:`~hopsearch.service.auth.records.KeyLookup`.
    Lookups are reused for ``cache_s`` seconds (at most 0.9: a revocation is seen within one second)."""

    def __init__(self, store: Store, index: str, cache_s: float = 0.5) -> None:
        self.store = store
        self.index = index
        self.cache_s = min(cache_s, 0.9)
        self._by_hash: dict[str, tuple[float, KeyRecord | None]] = {}
        #: name → hash: a claim never changes (a name is never given to another key), so it is kept
        self._names: dict[str, str] = {}
        self._any: tuple[float, bool] | None = None
        self._ready = False

    @classmethod
    def of(cls, store: Store, cache_s: float = 0.5) -> KeyStore:
        """Open the keys index of ``store``; ``cache_s``: the ``api_key_cache_s`` setting (its default here)."""
        return cls(store, store.names.keys, cache_s)

    async def ensure_index(self) -> None:
        if self._ready:
            return
        if not await self.store.exists(self.index):
            await self.store._create(self.index, load_template("keys"))
        self._ready = True

    async def create(self, new: NewKey, *, now: datetime | None = None) -> tuple[str, KeyRecord]:
        """Return a new key: its secret (shown once, never stored) and record. A name in use (revoked keys' too)
        is refused."""
        now = now or datetime.now(UTC)
        name = check_name(new.name)
        principals = check_principals(new.principals)
        if not principals and not new.admin:
            raise _bad("principals", "a key that is not an admin needs a principal: user:NAME, group:NAME or public")
        if new.concurrent_asks is not None and new.concurrent_asks < 1:
            raise _bad("concurrent_asks", "concurrent asks must be at least 1")
        if new.per_minute is not None and new.per_minute < 1:
            raise _bad("per_minute", "requests per minute must be at least 1")
        if (new.token_public_pem is None) != (new.token_algorithm is None):
            raise InputError("a token public key and its algorithm go together (--token-public-key, --token-alg)")
        if new.token_key_id is not None and new.token_public_pem is None:
            raise InputError("a public key id names a token public key: give one (--token-public-key, --token-alg)")
        token_keys: tuple[TokenKey, ...] = ()
        if new.token_public_pem is not None and new.token_algorithm is not None:
            token_keys = (token_key(new.token_key_id or name, new.token_algorithm, new.token_public_pem),)
        actions = check_actions(new.actions) if new.actions else ACTIONS - {"admin"}
        if new.user_header is not None and new.admin:
            raise _bad("user_header", "an admin key vouches for no users: a key with a user header is never an admin")
        if "admin" in actions and not new.admin:
            raise _bad("actions", "the admin action is an admin key's: create it with admin (--admin)")
        record = KeyRecord(
            name=name,
            principals=principals,
            indices=check_patterns(new.indices),
            actions=actions | ({"admin"} if new.admin else frozenset()),
            admin=new.admin,
            created=now,
            expires=now + parse_duration(new.expires) if new.expires else None,
            limits=KeyLimits(new.concurrent_asks, new.per_minute),
            token_keys=token_keys,
            namespace=new.namespace or None,
            user_header=check_header_name(new.user_header) if new.user_header is not None else None,
        )
        await self.ensure_index()
        secret = new_secret()
        digest = hash_secret(secret)
        claim = {"kind": "name", "name": name, "hash": digest, "created": now.isoformat()}
        if not await self.store.create_document(self.index, f"name:{name}", claim, refresh=False):
            raise AlreadyExists(f"a key named [{name}] exists already (revoked keys keep their names)")
        await self.store.put_document(self.index, digest, document_of(record, digest), refresh=True, create=True)
        self._any = None
        log.info(
            "key created: %s",
            name,
            extra={"event": "key_created", "key": name, "admin": record.admin, "principals": sorted(principals)},
        )
        return secret, record

    async def revoke(self, name: str, *, now: datetime | None = None) -> KeyRecord:
        """Flag the key revoked (kept, so its name stays taken and the listing says so); 404 if none."""
        stamp = (now or datetime.now(UTC)).isoformat()

        def revoked(doc: dict[str, Any]) -> dict[str, Any]:
            return doc | {"revoked": True, "revoked_at": doc.get("revoked_at") or stamp}

        record = await self._change(name, revoked, "revoked")
        log.info("key revoked: %s", name, extra={"event": "key_revoked", "key": name})
        return record

    async def add_token_key(self, name: str, kid: str, algorithm: str, public_pem: str) -> KeyRecord:
        """Register one more public key with key ``name``: its tokens and those of the public keys it
        already has are all accepted (a rotation's overlap), each naming its own ``kid``."""
        added = token_key(kid, algorithm, public_pem)

        def with_it(doc: dict[str, Any]) -> dict[str, Any]:
            kept = list(doc.get("token_keys") or ())
            if any(t.get("kid") == kid for t in kept):
                raise AlreadyExists(f"key [{name}] has a public key [{kid}] already: pick another id or remove it")
            fresh = {"kid": added.kid, "algorithm": added.algorithm, "public_pem": added.public_pem}
            return doc | {"token_keys": [*kept, fresh]}

        record = await self._change(name, with_it, "given a public key")
        log.info(
            "public key %s added to key %s", kid, name, extra={"event": "token_key_added", "key": name, "kid": kid}
        )
        return record

    async def remove_token_key(self, name: str, kid: str) -> KeyRecord:
        """Remove the public key ``kid`` from key ``name``: tokens naming it are refused from then on
        (within ``api_key_cache_s`` in every process); 404 where the key has none of that id."""

        def without_it(doc: dict[str, Any]) -> dict[str, Any]:
            kept = list(doc.get("token_keys") or ())
            left = [t for t in kept if t.get("kid") != kid]
            if len(left) == len(kept):
                known = ", ".join(str(t.get("kid")) for t in kept) or "none"
                raise NotFound(f"key [{name}] has no public key [{kid}] (it has: {known})")
            return doc | {"token_keys": left}

        record = await self._change(name, without_it, "rid of a public key")
        log.info(
            "public key %s removed from key %s",
            kid,
            name,
            extra={"event": "token_key_removed", "key": name, "kid": kid},
        )
        return record

    async def _change(self, name: str, change: Callable[[dict[str, Any]], dict[str, Any]], doing: str) -> KeyRecord:
        """Key ``name``'s document changed by ``change`` (which may raise to refuse), written only over the
        version it read (another writer's change is read again and ``change`` applied to it); 404 if none."""
        digest = await self._hash_of(name)
        if digest is None:
            raise NotFound(f"no key named [{name}]", details={"index": self.index})
        for _ in range(5):
            found = await self.store.get_versioned(self.index, digest)
            if found is None:
                raise NotFound(f"no key named [{name}]", details={"index": self.index})
            doc, seq_no, term = found
            doc = change(doc)
            try:
                await self.store.put_document(
                    self.index, digest, doc, refresh=True, if_seq_no=seq_no, if_primary_term=term
                )
            except VersionConflict:
                continue
            self._by_hash.pop(digest, None)
            return record_of(doc)
        raise ConfigError(f"key [{name}] kept changing while it was {doing}; try again")

    async def keys(self) -> list[KeyRecord]:
        """Every key (revoked ones too), by name."""
        body = {"size": MAX_LISTED, "query": {"term": {"kind": "key"}}, "sort": [{"name": "asc"}]}
        try:
            found = await self.store.search(self.index, body)
        except IndexMissing:
            return []
        return [record_of(hit["_source"]) for hit in found.get("hits", {}).get("hits", [])]

    async def _hash_of(self, name: str) -> str | None:
        if not _NAME.match(name):
            return None
        known = self._names.get(name)
        if known is not None:
            return known
        claim = await self.store.get_document(self.index, f"name:{name}")
        if not claim or not claim.get("hash"):
            return None
        if len(self._names) >= 4096:
            self._names.clear()
        self._names[name] = str(claim["hash"])
        return self._names[name]

    async def by_name(self, name: str) -> KeyRecord | None:
        digest = await self._hash_of(name)
        return await self._record(digest) if digest is not None else None

    async def by_secret(self, secret: str) -> KeyRecord | None:
        if not secret.startswith(SECRET_PREFIX) or len(secret) > 256:
            return None  # not one of ours: no round trip
        return await self._record(hash_secret(secret))

    async def _record(self, digest: str) -> KeyRecord | None:
        now = time.monotonic()
        cached = self._by_hash.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        doc = await self.store.get_document(self.index, digest)
        record = record_of(doc) if doc is not None and doc.get("kind") == "key" else None
        if self.cache_s > 0:
            if len(self._by_hash) >= 4096:
                self._by_hash.clear()
            self._by_hash[digest] = (now + self.cache_s, record)
        return record

    async def any_keys(self) -> bool:
        """Whether any key was ever stored (revoked ones count: a service that had keys stays closed),
        reused for ``cache_s``."""
        now = time.monotonic()
        if self._any is not None and self._any[0] > now:
            return self._any[1]
        try:
            found = await self.store.count(self.index, {"term": {"kind": "key"}})
        except IndexMissing:
            found = 0
        self._any = (now + self.cache_s, found > 0)
        return found > 0
