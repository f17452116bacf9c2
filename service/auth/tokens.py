"""End-user tokens: a back end's JWT signed for one of its users, or the company IdP's.

**A back end's token** acts for an end user with the rights of an API key. Its header's ``kid`` is
``<key name>/<public key id>`` (or ``<key name>`` alone where the key has one registered public key; key
names hold no ``/``); the key must exist and be usable (not revoked, not expired), and the token must be
signed with that public key's algorithm (EdDSA or RS256) and no other. Claims: ``sub`` (the end user:
``user:<sub>``, whom traces belong to), ``exp`` (required, at most ``token_max_ttl_s`` ahead) and the
``token_principals_claim`` (``principals``) list, each a subset of the key's principals and at most
``token_max_principals`` of them. Groups stored for the user (:mod:`hopsearch.service.auth.groups`) are
added server-side, those the key holds (any for an admin key). An end user is never an admin, whatever
the key.

**An IdP token** (its ``iss`` is ``idp_issuer``) is checked against the IdP's JWKS
(:mod:`hopsearch.service.auth.public_keys`): ``alg`` among ``idp_algorithms`` (and the JWK's own, where it
names one), ``aud`` among ``idp_audience``, ``exp`` at most ``idp_max_ttl_s`` ahead. The caller is
``user:<idp_subject_claim>``, a ``group:<g>`` per entry of ``idp_groups_claim`` and the user's stored
groups, with ``idp_indices`` and ``idp_actions``.

Every caller also has ``public``. A refused token is a 401 (:class:`AuthenticationError`) or, for
principals beyond the key's or too many, a 403 (:class:`AuthorizationError`), each saying why, with
``details["reason"]`` a short code; it is logged as a ``token_refused`` event on ``hopsearch.audit`` and
passed to ``on_failure`` (the gate's metrics counter). The token itself is never logged.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx
import jwt

from hopsearch.service.access import PUBLIC, Caller, document_principal, owner_id, principal
from hopsearch.service.auth.claims import decode, looks_like_jwt, public_key, refuse, shown, when
from hopsearch.service.auth.groups import GroupLookup
from hopsearch.service.auth.public_keys import JwksSource, jwks_source
from hopsearch.service.auth.records import KeyLookup, KeyRecord, TokenKey, TokenVerifier
from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import ApiError, AuthenticationError, AuthorizationError, ConfigError

__all__ = ["FailureHook", "JwtVerifier", "looks_like_jwt", "token_verifier"]

log = logging.getLogger("hopsearch.audit")

#: Called with a refusal's reason code (``signature``, ``expired``…) for each refused token.
FailureHook = Callable[[str], None]


class JwtVerifier:
    """The :class:`~hopsearch.service.auth.records.TokenVerifier` of back ends' and the IdP's tokens."""

    def __init__(
        self,
        keys: KeyLookup | None,
        settings: Settings,
        groups: GroupLookup | None = None,
        *,
        idp: JwksSource | None = None,
        on_failure: FailureHook | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.keys = keys
        self.settings = settings
        self.groups = groups
        self.idp = idp if settings.idp_issuer else None
        self.on_failure = on_failure
        self.clock = clock
        self._parsed: dict[tuple[str, str], jwt.PyJWK] = {}
        #: registered PEMs parsed once per verifier, not on every request (at most a bounded number)
        self._public: dict[tuple[str, str], Any] = {}

    async def verify(self, token: str) -> Caller:
        try:
            return await self._verify(token)
        except (AuthenticationError, AuthorizationError) as exc:
            self._report(exc)
            raise

    def _public_key(self, algorithm: str, pem: str) -> Any:
        found = self._public.get((algorithm, pem))
        if found is None:
            if len(self._public) >= 1024:
                self._public.clear()
            found = self._public[(algorithm, pem)] = public_key(algorithm, pem)
        return found

    async def aclose(self) -> None:
        if self.idp is not None:
            await self.idp.aclose()

    def _report(self, exc: ApiError) -> None:
        reason = str(exc.details.get("reason", "refused"))
        context = {k: v for k, v in exc.details.items() if k in ("key", "kid", "issuer")}
        log.warning("token refused: %s", exc.message, extra={"event": "token_refused", "reason": reason, **context})
        if self.on_failure is not None:
            self.on_failure(reason)

    async def _verify(self, token: str) -> Caller:
        try:
            unverified_token = jwt.api_jwt.decode_complete(token, options={"verify_signature": False})
            header, unverified = unverified_token["header"], unverified_token["payload"]
        except jwt.InvalidTokenError as exc:
            refuse("malformed", f"the token is not a valid JWT: {exc}")
        issuer = unverified.get("iss")
        if self.idp is not None and issuer == self.settings.idp_issuer:
            return await self._idp_token(token, header, self.idp)
        return await self._backend_token(token, header, issuer)

    # --- a back end's token ------------------------------------------------------------------
    async def _backend_token(self, token: str, header: Mapping[str, Any], issuer: Any) -> Caller:
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid.strip():
            refuse("unknown_key", "the token's header names no `kid` (`<key name>/<public key id>`)")
        name, _, key_id = kid.partition("/")
        record = await self.keys.by_name(name) if self.keys is not None else None
        if record is None:
            if issuer is not None and self.idp is not None:
                why = f"its `iss` [{shown(issuer)}] is not the IdP's ({self.settings.idp_issuer})"
                why += f", and its kid [{shown(kid)}]"
                refuse("issuer", f"the token is refused: {why} names no API key", kid=shown(kid))
            refuse("unknown_key", f"the token's kid [{shown(kid)}] names no API key", kid=shown(kid))
        if not record.usable(datetime.now(UTC)):
            why = "revoked" if record.revoked else f"expired at {record.expires}"
            refuse("revoked_key", f"API key [{name}] is {why}: its tokens are refused", key=name)
        token_key = self._token_key(record, key_id)
        # pinned: none, HS256 or the other algorithm never reach the signature check
        if header.get("alg") != token_key.algorithm:
            refuse(
                "algorithm",
                f"the token is signed with [{shown(header.get('alg'))}]; API key [{name}]'s public key "
                f"[{token_key.kid}] takes {token_key.algorithm} only",
                key=name,
            )
        whose = f"API key [{name}]'s public key [{token_key.kid}]"
        key = self._public_key(token_key.algorithm, token_key.public_pem)
        try:
            leeway = self.settings.token_leeway_s
            claims = decode(token, key, token_key.algorithm, whose, require=("sub",), leeway=leeway)
        except AuthenticationError as exc:
            exc.details.setdefault("key", name)
            raise
        self._check_ttl(claims, self.settings.token_max_ttl_s, "token_max_ttl_s")
        subject = self._subject(claims, "sub")
        claimed = self._principals(claims, self.settings.token_principals_claim, "")
        if not record.admin and claimed - record.principals:
            extra = shown(", ".join(sorted(claimed - record.principals)), 400)
            refuse(
                "principals_beyond_key",
                f"the token names principals API key [{name}] does not have: {extra}",
                forbidden=True,
                key=name,
            )
        stored = await self._stored(subject)
        principals = self._all(subject, claimed | stored)
        if not record.admin:
            # the token's whole principal set within the key's: ``user:<sub>`` too, so a key limited to
            # group:eng cannot mint sub=ceo and read what only user:ceo may
            principals &= record.principals | {PUBLIC}
        caller = record.caller(principals=principals, subject=subject)
        return replace(caller, admin=False, actions=caller.actions - {"admin"})

    @staticmethod
    def _token_key(record: KeyRecord, key_id: str) -> TokenKey:
        if not record.token_keys:
            refuse(
                "unknown_key",
                f"API key [{record.name}] has no registered public key: register one "
                f"(hopsearch keys add-public-key {record.name} ID FILE --alg EdDSA)",
                key=record.name,
            )
        if not key_id and len(record.token_keys) == 1:
            return record.token_keys[0]
        for token_key in record.token_keys:
            if token_key.kid == key_id:
                return token_key
        known = ", ".join(k.kid for k in record.token_keys)
        refuse(
            "unknown_key",
            f"API key [{record.name}] has no public key [{shown(key_id)}] (it has: {known}); "
            f"the token's kid is `{record.name}/<public key id>`",
            key=record.name,
        )

    # --- the IdP's token ---------------------------------------------------------------------
    async def _idp_token(self, token: str, header: Mapping[str, Any], idp: JwksSource) -> Caller:
        issuer = self.settings.idp_issuer
        alg = header.get("alg")
        allowed = list(self.settings.idp_algorithms)
        if alg not in allowed:
            refuse(
                "algorithm",
                f"the IdP token is signed with [{shown(alg)}]; idp_algorithms allows {allowed}",
                issuer=issuer,
            )
        kid = header.get("kid", "")
        jwk = await idp.key(kid) if isinstance(kid, str) else None
        if jwk is None:
            why = f"the IdP's keys ({idp.where}) hold no key [{shown(kid)}]"
            refuse("unknown_key", why, issuer=issuer, kid=shown(kid))
        if jwk.get("alg", alg) != alg:
            refuse("algorithm", f"the IdP's key [{kid}] signs with {jwk.get('alg')}, not {alg}", issuer=issuer)
        key = self._jwk(jwk, str(alg), issuer)
        subject_claim = self.settings.idp_subject_claim
        try:
            claims = decode(
                token,
                key,
                str(alg),
                f"the IdP's key [{kid}]",
                issuer=issuer,
                audience=list(self.settings.idp_audience),
                require=("iss", "aud", subject_claim),
                leeway=self.settings.token_leeway_s,
            )
        except AuthenticationError as exc:
            exc.details.setdefault("issuer", issuer)
            raise
        self._check_ttl(claims, self.settings.idp_max_ttl_s, "idp_max_ttl_s")
        subject = self._subject(claims, subject_claim)
        groups = self._principals(claims, self.settings.idp_groups_claim, "group:")
        return Caller(
            principals=self._all(subject, groups | await self._stored(subject)),
            admin=False,
            subject=subject,
            key=None,
            owner=owner_id("idp", issuer, str(claims[subject_claim])),
            indices=tuple(self.settings.idp_indices),
            actions=frozenset(self.settings.idp_actions),
        )

    def _jwk(self, jwk: Mapping[str, Any], alg: str, issuer: str | None) -> jwt.PyJWK:
        """Return the IdP's key for ``alg``, parsed once per process (a new JWKS brings new entries)."""
        memo = (json.dumps(jwk, sort_keys=True), alg)
        found = self._parsed.get(memo)
        if found is None:
            try:
                found = jwt.PyJWK(dict(jwk), algorithm=alg)
            except jwt.PyJWTError as exc:
                refuse("algorithm", f"the IdP's key [{jwk.get('kid')}] is no {alg} key: {exc}", issuer=issuer)
            if len(self._parsed) >= 256:
                self._parsed.clear()
            self._parsed[memo] = found
        return found

    # --- shared checks -----------------------------------------------------------------------
    def _check_ttl(self, claims: Mapping[str, Any], max_ttl_s: float, setting: str) -> None:
        ahead = float(claims["exp"]) - self.clock()
        if ahead > max_ttl_s + self.settings.token_leeway_s:
            refuse(
                "far_exp",
                f"the token's exp ({when(claims['exp'])}) is {ahead:.0f} s away; {setting} allows {max_ttl_s:.0f} s",
            )

    @staticmethod
    def _subject(claims: Mapping[str, Any], claim: str) -> str:
        subject = claims.get(claim)
        if not isinstance(subject, str) or not subject.strip():
            refuse("claims", f"the token's `{claim}` (the end user) is not a non-empty string")
        return subject.strip()

    def _principals(self, claims: Mapping[str, Any], claim: str, prefix: str) -> frozenset[str]:
        """Return the principals a token's ``claim`` lists (absent: none), ``prefix`` put before each name that
        lacks it, each in its one spelling; more than ``token_max_principals`` are refused."""
        names = claims.get(claim, [])
        if not isinstance(names, Sequence) or isinstance(names, str) or not all(isinstance(n, str) for n in names):
            refuse("claims", f"the token's `{claim}` is not a list of strings")
        limit = self.settings.token_max_principals
        if len(names) > limit:
            refuse(
                "too_many_principals",
                f"the token's `{claim}` holds {len(names)} entries, more than token_max_principals ({limit}): "
                "keep large group sets in the groups index (hopsearch groups add USER GROUP…)",
                forbidden=True,
            )
        found = {principal(n) for n in names if n.strip()}
        return frozenset(checked(claim, p if p.startswith(prefix) else principal(prefix + p)) for p in found)

    async def _stored(self, subject: str) -> frozenset[str]:
        return await self.groups.groups_of(subject) if self.groups is not None else frozenset()

    @staticmethod
    def _all(subject: str, principals: frozenset[str]) -> frozenset[str]:
        return principals | {checked("sub", principal(f"user:{subject}")), PUBLIC}


def checked(claim: str, name: str) -> str:
    """Return a principal a token names (an entry of ``claim``, or ``user:<sub>``) as a passage's ``acl`` may hold
    it (:func:`~hopsearch.service.access.document_principal`): wildcards (``*?[]``), commas and control
    characters are refused, so a group named ``*`` never matches a document whose readers list ``*``."""
    try:
        return document_principal(name)
    except ValueError as exc:
        refuse("bad_principal", f"the token's `{claim}` names a principal no document can hold: {exc}")


def token_verifier(
    settings: Settings,
    keys: KeyLookup | None,
    groups: GroupLookup | None,
    *,
    on_failure: FailureHook | None = None,
    http: httpx.AsyncClient | None = None,
) -> TokenVerifier | None:
    """Return the service's token verifier: back ends' tokens wherever keys are stored (``keys``), the IdP's
    where ``idp_issuer`` is set (with ``idp_audience`` and ``idp_jwks``: ``ConfigError`` naming what is
    missing; a JWKS file is read here); None where neither applies."""
    idp: JwksSource | None = None
    if settings.idp_issuer:
        missing = [n for n in ("idp_audience", "idp_jwks") if not getattr(settings, n)]
        if missing:
            raise ConfigError(f"idp_issuer is set without {' and '.join(missing)}: IdP tokens cannot be checked")
        assert settings.idp_jwks is not None
        idp = jwks_source(settings.idp_jwks, refresh_s=settings.idp_jwks_refresh_s, client=http)
    if keys is None and idp is None:
        return None
    return JwtVerifier(keys, settings, groups, idp=idp, on_failure=on_failure)
