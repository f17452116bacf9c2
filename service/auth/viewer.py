"""The trace viewer's way in for browsers, which cannot send an API key: a one-time code in a URL's path,
exchanged for a short-lived cookie bound to the caller that minted it.

- A **code** (``hv_`` + 32 random bytes) is minted for a caller and one trace — by ``hopsearch traces show ID
  --open`` (the command line's caller: an admin, or ``--key``'s) or by ``POST /_traces/{id}/_open`` (a key
  holder, for a trace it may read). It lives ``ui_code_s`` seconds and is used once: redeeming it reads it
  (real-time) and deletes it conditionally on that version, so of two redemptions, on any process, one wins.
- A **session** (``hvs_`` + 32 random bytes) is what the code is exchanged for: the cookie's value, living
  ``ui_session_s`` seconds, read by the viewer's pages (and the raw trace they link) only. It reads as the
  caller the code was minted for — its principals, actions and owner: the traces it owns — and stops the
  moment that caller's key is revoked or expires (the key is looked up on every request, as the gate does).
- Neither outlives the **credential** it was minted from: a code or session minted by an end-user token
  (a back end's or the IdP's) ends at the token's ``exp`` at the latest, and a key's at the key's expiry.
  Its **principals are checked again on every request**, never only those it was minted with: a key's
  caller is the key's as it is now (principals, actions, index patterns, namespace); a back end's user keeps
  only what the key still holds; an IdP user gets the IdP's actions and index patterns as configured now;
  and an end user's stored groups removed since the session began are dropped from it.

Both are stored in ``<prefix>-keys`` (every ``serve --workers N`` process and every host honours them),
under the SHA-256 of their secret, never the secret itself.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hopsearch.service.access import PUBLIC, Caller, owner_id
from hopsearch.service.auth.groups import GroupLookup
from hopsearch.service.auth.keys import KeyStore, hash_secret, key_refusal
from hopsearch.service.auth.records import KeyLimits, KeyRecord
from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import AuthenticationError, IndexMissing, VersionConflict
from hopsearch.service.store import Store

CODE_PREFIX = "hv_"
SESSION_PREFIX = "hvs_"
#: The cookie that carries a viewer session.
COOKIE = "hopsearch_viewer"
#: The pre-session cookie a one-time URL's confirmation page sets (its form's token is bound to it).
OPEN_COOKIE = "hopsearch_viewer_open"


def caller_document(caller: Caller) -> dict[str, Any]:
    return {
        "principals": sorted(caller.principals),
        "admin": caller.admin,
        "subject": caller.subject,
        "key": caller.key,
        "indices": list(caller.indices),
        "actions": sorted(caller.actions),
        "namespace": caller.namespace,
        "owner": caller.owner,
    }


def caller_from(doc: Mapping[str, Any]) -> Caller:
    return Caller(
        principals=frozenset(doc.get("principals") or ()),
        admin=bool(doc.get("admin")),
        subject=doc.get("subject"),
        key=doc.get("key"),
        indices=tuple(doc.get("indices") or ()),
        actions=frozenset(doc.get("actions") or ()),
        namespace=doc.get("namespace"),
        owner=doc.get("owner"),
    )


@dataclass(frozen=True, slots=True)
class Redeemed:
    """What a code was minted for: the caller and the trace to open."""

    caller: Caller
    trace_id: str
    #: when the credential the code was minted from ends (a token's ``exp``); None: with the key
    until: datetime | None = None
    #: the caller's stored groups when the code was minted (those removed since are dropped)
    groups: frozenset[str] = frozenset()


class ViewerSessions:
    """Codes and sessions in the keys index (:class:`KeyStore`'s), the key of each caller checked on use."""

    def __init__(
        self,
        keys: KeyStore,
        code_s: float,
        session_s: float,
        groups: GroupLookup | None,
        settings: Settings,
    ) -> None:
        self.keys = keys
        self.code_s = code_s
        self.session_s = session_s
        self.groups = groups
        self.settings = settings  # the IdP's, re-read on every request of a session

    @classmethod
    def of(cls, store: Store, settings: Settings, groups: GroupLookup | None = None) -> ViewerSessions:
        """Keep the sessions in ``store``'s keys index, with the lifetimes ``settings`` give."""
        keys = KeyStore.of(store, settings.api_key_cache_s)
        return cls(keys, settings.ui_code_s, settings.ui_session_s, groups, settings)

    def life_s(self, life_s: float, until: datetime | None, now: datetime | None = None) -> float:
        """Cut ``life_s`` to end at ``until`` (the credential's end) where that comes first (0: already)."""
        if until is None:
            return life_s
        return max(0.0, min(life_s, (until - (now or datetime.now(UTC))).total_seconds()))

    @property
    def _store(self) -> Store:
        return self.keys.store

    async def mint_code(
        self, caller: Caller, trace_id: str, *, until: datetime | None = None, now: datetime | None = None
    ) -> str:
        """Return a new one-time code for ``caller`` and the trace ``trace_id`` (whether the caller may read it is
        the minter's to check: it is read as that caller when the page opens), ending at ``until`` (the
        credential's end) at the latest."""
        code = CODE_PREFIX + secrets.token_urlsafe(32)
        redeemed = Redeemed(caller, trace_id, until, await self._stored_groups(caller))
        await self._write(f"viewer-code:{hash_secret(code)}", "viewer_code", redeemed, self.code_s, now)
        return code

    async def peek(self, code: str, *, now: datetime | None = None) -> Redeemed:
        """Return what ``code`` was minted for, leaving it unused (the confirmation page); :meth:`redeem`'s refusals."""
        doc_id = f"viewer-code:{hash_secret(code)}"
        doc = await self._store.get_document(self.keys.index, doc_id) if code.startswith(CODE_PREFIX) else None
        return await self._redeemed(doc if doc is not None and doc.get("kind") == "viewer_code" else None, now)

    async def redeem(self, code: str, *, now: datetime | None = None) -> Redeemed:
        """Return the caller and trace of ``code``, which is used up; 401 for a code unknown, used or expired, and
        the key's refusal where the caller's key was revoked or expired since."""
        doc = await self._take(f"viewer-code:{hash_secret(code)}") if code.startswith(CODE_PREFIX) else None
        return await self._redeemed(doc, now)

    async def open_session(self, redeemed: Redeemed, *, now: datetime | None = None) -> tuple[str, float]:
        """Return a session for a redeemed code's caller (the cookie's value) and its life in seconds: ``ui_session_s``,
        or less where the credential the code was minted from ends sooner."""
        session = SESSION_PREFIX + secrets.token_urlsafe(32)
        life_s = self.life_s(self.session_s, redeemed.until, now)
        await self._write(f"viewer-session:{hash_secret(session)}", "viewer_session", redeemed, life_s, now)
        return session, life_s

    async def caller(self, session: str, *, now: datetime | None = None) -> tuple[Caller, KeyLimits | None]:
        """Return the caller of a session cookie as it is now (see the module docstring) and its key's limits (None:
        no key); 401 for a session unknown or expired (its credential too), the key's refusal for a caller
        whose key was revoked or expired."""
        doc_id = f"viewer-session:{hash_secret(session)}"
        doc = await self._store.get_document(self.keys.index, doc_id) if session.startswith(SESSION_PREFIX) else None
        if doc is None or doc.get("kind") != "viewer_session" or _expired(doc, now):
            raise AuthenticationError(
                "the viewer's session is unknown or expired (or the credential it was opened with expired): "
                "open another one-time URL (`traces show ID --open`)"
            )
        minted = caller_from(doc.get("caller") or {})
        record = await self._check_key(minted, now)
        caller = await self._current(minted, record, frozenset(doc.get("groups") or ()))
        return caller, record.limits if record is not None else None

    async def _redeemed(self, doc: Mapping[str, Any] | None, now: datetime | None) -> Redeemed:
        if doc is None or _expired(doc, now):
            raise AuthenticationError(
                "the viewer's one-time code is unknown, used or expired: mint another (`hopsearch traces show "
                "ID --open`, or `POST /_traces/{id}/_open` with the key)"
            )
        minted = caller_from(doc.get("caller") or {})
        groups = frozenset(doc.get("groups") or ())
        caller = await self._current(minted, await self._check_key(minted, now), groups)
        until = doc.get("until")
        when = datetime.fromisoformat(until) if isinstance(until, str) else None
        return Redeemed(caller, str(doc.get("trace_id") or ""), when, groups)

    async def _check_key(self, caller: Caller, now: datetime | None) -> KeyRecord | None:
        """Return the caller's key, once checked usable (its refusal else); None without a key."""
        if caller.key is None:  # an admin of the command line or of a flat key, or an IdP user
            return None
        record = await self.keys.by_name(caller.key)
        refusal = key_refusal(record, now or datetime.now(UTC))
        if refusal is not None:
            raise refusal[1]
        return record

    async def _stored_groups(self, caller: Caller) -> frozenset[str]:
        if self.groups is None or caller.subject is None or caller.owner == _key_owner(caller):
            return frozenset()
        return await self.groups.groups_of(caller.subject)

    async def _current(self, minted: Caller, record: KeyRecord | None, groups: frozenset[str]) -> Caller:
        """Return the caller of a code or session as its credential stands now (see the module docstring)."""
        if record is not None and minted.owner == _key_owner(minted):
            return record.caller()  # the key's own caller: whatever the key holds now
        caller = minted
        if record is not None:  # a back end's end user: within what the key holds now
            principals = caller.principals if record.admin else caller.principals & (record.principals | {PUBLIC})
            actions = caller.actions & record.actions - {"admin"}
            caller = replace(caller, principals=principals, actions=actions, indices=record.indices)
            caller = replace(caller, namespace=record.namespace)
        elif caller.owner is not None and caller.owner.startswith("idp:"):
            if not self.settings.idp_issuer or caller.owner.split("/sub:", 1)[0] != owner_id(
                "idp", self.settings.idp_issuer
            ):
                raise AuthenticationError("the IdP this viewer session was opened with is no longer configured")
            actions = caller.actions & frozenset(self.settings.idp_actions)
            caller = replace(caller, actions=actions, indices=tuple(self.settings.idp_indices))
        if groups and self.groups is not None and caller.subject is not None:
            removed = groups - await self.groups.groups_of(caller.subject)
            caller = replace(caller, principals=caller.principals - removed)
        return caller

    async def _write(self, doc_id: str, kind: str, redeemed: Redeemed, life_s: float, now: datetime | None) -> None:
        now = now or datetime.now(UTC)
        doc = {
            "kind": kind,
            "created": now.isoformat(),
            "expires": (now + timedelta(seconds=self.life_s(life_s, redeemed.until, now))).isoformat(),
            "caller": caller_document(redeemed.caller),
            "groups": sorted(redeemed.groups),
        }
        doc |= {"until": redeemed.until.isoformat()} if redeemed.until is not None else {}
        doc |= {"trace_id": redeemed.trace_id} if redeemed.trace_id else {}
        await self.keys.ensure_index()
        await self._store.put_document(self.keys.index, doc_id, doc, create=True)

    async def _take(self, doc_id: str) -> dict[str, Any] | None:
        """Return the code document ``doc_id``, deleted on the version read (None where it is not, or another
        redemption deleted it first)."""
        found = await self._store.get_versioned(self.keys.index, doc_id)
        if found is None or found[0].get("kind") != "viewer_code":
            return None
        doc, seq_no, term = found
        try:
            await self._store.delete_document(
                self.keys.index, doc_id, if_seq_no=seq_no, if_primary_term=term, what="use a viewer code"
            )
        except (VersionConflict, IndexMissing):
            return None
        return doc


def _key_owner(caller: Caller) -> str | None:
    """Return the owner a key's own caller has (no end user's subject); None without a key."""
    return owner_id("key", caller.key) if caller.key is not None else None


def _expired(doc: Mapping[str, Any], now: datetime | None) -> bool:
    expires = doc.get("expires")
    if not isinstance(expires, str):
        return True
    return datetime.fromisoformat(expires) <= (now or datetime.now(UTC))
