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

Both are stored in ``<prefix>-keys`` (every ``serve --workers N`` process and every host honours them),
under the SHA-256 of their secret, never the secret itself.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from hopsearch.service.access import Caller
from hopsearch.service.auth.keys import KeyStore, hash_secret, key_refusal
from hopsearch.service.auth.records import KeyLimits
from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import AuthenticationError, IndexMissing, VersionConflict
from hopsearch.service.store import Store

CODE_PREFIX = "hv_"
SESSION_PREFIX = "hvs_"
#: The cookie that carries a viewer session.
COOKIE = "hopsearch_viewer"


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


class ViewerSessions:
    """Codes and sessions in the keys index (:class:`KeyStore`'s), the key of each caller checked on use."""

    def __init__(self, keys: KeyStore, code_s: float, session_s: float) -> None:
        self.keys = keys
        self.code_s = code_s
        self.session_s = session_s

    @classmethod
    def of(cls, store: Store, settings: Settings) -> ViewerSessions:
        """Keep the sessions in ``store``'s keys index, with the lifetimes ``settings`` give."""
        return cls(KeyStore.of(store, settings.api_key_cache_s), settings.ui_code_s, settings.ui_session_s)

    @property
    def _store(self) -> Store:
        return self.keys.store

    async def mint_code(self, caller: Caller, trace_id: str, *, now: datetime | None = None) -> str:
        """A new one-time code for ``caller`` and the trace ``trace_id`` (whether the caller may read it is
        the minter's to check: it is read as that caller when the page opens)."""
        code = CODE_PREFIX + secrets.token_urlsafe(32)
        await self._write(f"viewer-code:{hash_secret(code)}", "viewer_code", caller, self.code_s, now, trace_id)
        return code

    async def redeem(self, code: str, *, now: datetime | None = None) -> Redeemed:
        """The caller and trace of ``code``, which is used up; 401 for a code unknown, used or expired, and
        the key's refusal where the caller's key was revoked or expired since."""
        doc = await self._take(f"viewer-code:{hash_secret(code)}") if code.startswith(CODE_PREFIX) else None
        if doc is None or _expired(doc, now):
            raise AuthenticationError(
                "the viewer's one-time code is unknown, used or expired: mint another (`hopsearch traces show "
                "ID --open`, or `POST /_traces/{id}/_open` with the key)"
            )
        caller = caller_from(doc.get("caller") or {})
        await self._check_key(caller, now)
        return Redeemed(caller, str(doc.get("trace_id") or ""))

    async def open_session(self, caller: Caller, *, now: datetime | None = None) -> str:
        """A session for ``caller`` (the cookie's value)."""
        session = SESSION_PREFIX + secrets.token_urlsafe(32)
        await self._write(f"viewer-session:{hash_secret(session)}", "viewer_session", caller, self.session_s, now)
        return session

    async def caller(self, session: str, *, now: datetime | None = None) -> tuple[Caller, KeyLimits | None]:
        """The caller of a session cookie and its key's limits (None: no key); 401 for a session unknown or
        expired, the key's refusal for a caller whose key was revoked or expired."""
        doc_id = f"viewer-session:{hash_secret(session)}"
        doc = await self._store.get_document(self.keys.index, doc_id) if session.startswith(SESSION_PREFIX) else None
        if doc is None or doc.get("kind") != "viewer_session" or _expired(doc, now):
            raise AuthenticationError(
                "the viewer's session is unknown or expired: open another one-time URL (`traces show ID --open`)"
            )
        caller = caller_from(doc.get("caller") or {})
        return caller, await self._check_key(caller, now)

    async def _check_key(self, caller: Caller, now: datetime | None) -> KeyLimits | None:
        """The limits of the caller's key, once checked usable (its refusal else); None without a key."""
        if caller.key is None:  # an admin of the command line or of a flat key, or an IdP user
            return None
        record = await self.keys.by_name(caller.key)
        refusal = key_refusal(record, now or datetime.now(UTC))
        if refusal is not None:
            raise refusal[1]
        return record.limits if record is not None else None

    async def _write(
        self, doc_id: str, kind: str, caller: Caller, life_s: float, now: datetime | None, trace_id: str = ""
    ) -> None:
        now = now or datetime.now(UTC)
        doc = {
            "kind": kind,
            "created": now.isoformat(),
            "expires": (now + timedelta(seconds=life_s)).isoformat(),
            "caller": caller_document(caller),
        } | ({"trace_id": trace_id} if trace_id else {})
        await self.keys.ensure_index()
        await self._store.put_document(self.keys.index, doc_id, doc, create=True)

    async def _take(self, doc_id: str) -> dict[str, Any] | None:
        """The code document ``doc_id``, deleted on the version read (None where it is not, or another
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


def _expired(doc: Mapping[str, Any], now: datetime | None) -> bool:
    expires = doc.get("expires")
    if not isinstance(expires, str):
        return True
    return datetime.fromisoformat(expires) <= (now or datetime.now(UTC))
