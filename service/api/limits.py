"""Per-caller limits: requests per minute (a sliding window of the last 60 s; a ``/retrieve`` batch counts
one request per query) and questions in flight, counted in the caller's :class:`Accounts`: its API key's
(by the key's name) and, for a user someone vouches for, the user's own (by its owner: an IdP user's
``idp:<issuer>/sub:<sub>``, a back end's end user's ``key:<key>/sub:<sub>``). Requests per minute are
shared by the workers of one ``serve --workers N`` (:class:`SharedWindows`); questions in flight are each
process's own. A refusal is a 429 with ``Retry-After``.

Per-key requests per minute shared by the worker processes of one ``hopsearch serve --workers N``.

The supervisor (``serve``) makes a small file before it starts the workers and names it in
``api_shared_limits_file``; each worker maps it (``mmap``) and changes it under an exclusive ``flock``.
A key has one slot: the first 16 bytes of its name's BLAKE2b digest and its GCRA "theoretical arrival
time" (a float of ``time.monotonic``, one clock for every process of the host): a bucket of ``per_minute``
requests refilled evenly over 60 s (all at once from a standing start, then one every ``60 / per_minute``
s), so a 60 s window holds at most ``2 * per_minute - 1``, whatever the number of workers (one process
alone keeps :class:`KeyLimiter`'s exact sliding window). Nothing is shared across hosts: each
host's ``serve`` has its own file, so N hosts allow N times a key's limit.
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import mmap
import os
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hopsearch.service.access import Caller, owner_id
from hopsearch.service.auth.records import KeyLimits
from hopsearch.service.errors import TooManyRequests

WINDOW_S = 60.0
#: Accounts whose windows are kept (when full, the windows of the last minute stay, the rest are dropped;
#: where every one is of the last minute, the memory is emptied and each account starts a fresh window).
MAX_KEYS = 10_000
#: No limits of its own (a key's user: its key's fair share only).
UNLIMITED = KeyLimits()


@dataclass(frozen=True, slots=True)
class Accounts:
    """Where a caller's requests and questions count: ``key``, its API key's name (the key's stored
    limits), and ``user``, the owner a key or the IdP vouches for (its ``user_limits``; a key's user also
    gets a fair share of the key's questions in flight, the key's total still capping it). None: not
    counted there (an admin counts nowhere)."""

    key: str | None = None
    user: str | None = None
    user_limits: KeyLimits = UNLIMITED


def accounts_of(caller: Caller, user_limits: KeyLimits) -> Accounts:
    """Return the accounts of ``caller``, keyed by its owner, never by the credential it came with: a key used
    directly counts as the key; a user the key vouches for (a token the key signed, or any other way a key
    names its user) as the key and as the user (no limits of its own, a fair share of the key's); a user
    no key vouches for (the IdP's) as the user, with ``user_limits`` (``idp_per_minute``,
    ``idp_concurrent_asks``)."""
    if caller.admin:
        return Accounts()
    if caller.key is None:
        return Accounts(user=caller.owner, user_limits=user_limits)
    vouched = caller.owner is not None and caller.owner != owner_id("key", caller.key)
    return Accounts(key=caller.key, user=caller.owner if vouched else None)


#: Counted nowhere (an admin).
NOWHERE = Accounts()


def _who(account: str) -> str:
    """Return an account as a refusal names it (a key's name has no ``:``, an owner always has one)."""
    return f"user [{account}]" if ":" in account else f"key [{account}]"


def _lowest(*limits: int | None) -> int | None:
    named = [limit for limit in limits if limit is not None]
    return min(named) if named else None


class KeyLimiter:
    """``shared``: the windows of every worker of one ``serve`` (:class:`SharedWindows`); None: this
    process's own. An account is a key's name or an owner (:class:`Accounts`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, shared: SharedWindows | None = None) -> None:
        self._clock = clock
        self._shared = shared
        self._limits: dict[str, KeyLimits] = {}
        self._windows: dict[str, deque[float]] = {}
        self._asks: dict[str, int] = {}

    def limits(self, key: str | None) -> KeyLimits:
        return self._limits.get(key, KeyLimits()) if key is not None else KeyLimits()

    def count(self, accounts: Accounts, key_limits: KeyLimits | None = None, count: int = 1) -> None:
        """Count ``count`` requests in each of the caller's accounts: the user's, then the key's
        (``key_limits``; None: those it was last counted with); 429 from the first that is full."""
        if accounts.user is not None:
            self.request(accounts.user, accounts.user_limits, count)
        if accounts.key is not None:
            self.request(accounts.key, key_limits if key_limits is not None else self.limits(accounts.key), count)

    def request(self, key: str, limits: KeyLimits, count: int = 1) -> None:
        """Count ``count`` requests of the account ``key`` (a ``/retrieve`` batch counts each query); 429
        where they would pass its ``per_minute`` requests of the last minute (none of them is counted then)."""
        now = self._clock()
        if len(self._limits) >= MAX_KEYS and key not in self._limits:
            self._make_room(now)
        self._limits[key] = limits
        if limits.per_minute is None or count <= 0:
            return
        if self._shared is not None:
            wait_s = self._shared.take(key, limits.per_minute, count, now)
            if wait_s is not None:
                wait = max(1, math.ceil(wait_s))
                raise TooManyRequests(
                    f"rejected execution: {_who(key)} made its {limits.per_minute} requests of the last minute "
                    f"(across this service's workers); retry in {wait}s",
                    details={"retry_after": wait},
                )
            return
        window = self._windows.setdefault(key, deque())
        while window and window[0] <= now - WINDOW_S:
            window.popleft()
        if len(window) + count > limits.per_minute:
            wait = max(1, math.ceil(window[len(window) + count - limits.per_minute - 1] + WINDOW_S - now))
            raise TooManyRequests(
                f"rejected execution: {_who(key)} made {len(window)} requests in the last minute "
                f"(limit {limits.per_minute}); retry in {wait}s",
                details={"retry_after": wait},
            )
        window.extend([now] * count)

    def _make_room(self, now: float) -> None:
        """Drop the accounts with no request in the last minute (many users each ask once); all of them
        where every one has."""
        stale = [k for k in self._limits if not (window := self._windows.get(k)) or window[-1] <= now - WINDOW_S]
        if len(stale) < len(self._limits) // 2:
            self._limits.clear()
            self._windows.clear()
            return
        for key in stale:
            self._limits.pop(key, None)
            self._windows.pop(key, None)

    def queries(self, accounts: Accounts, count: int) -> None:
        """Count the queries of a batch beyond the one request the gate counted (``count`` - 1) in the
        caller's accounts; a batch of more queries than an account may make in a minute is refused as such
        (no wait would let it through)."""
        if count <= 1:
            return
        named = [(accounts.user, accounts.user_limits), (accounts.key, self.limits(accounts.key))]
        for account, limits in named:
            if account is not None and limits.per_minute is not None and count > limits.per_minute:
                raise TooManyRequests(
                    f"rejected execution: {count} queries in one request are more than {_who(account)}'s limit "
                    f"of {limits.per_minute} a minute: send fewer at a time"
                )
        self.count(accounts, None, count - 1)

    def admit_ask(self, accounts: Accounts, share: int | None = None) -> None:
        """One more question of the caller in flight; 429 where an account is full: the key at its
        ``concurrent_asks``, or at ``share`` (its fair share of the service's questions, :func:`fair_share`)
        where that is lower or the key names none; a user at its own ``concurrent_asks`` or its fair share
        (of its key's questions in flight where a key vouches for it, else of the service's)."""
        held: list[str] = []
        key_limit: int | None = None
        if accounts.key is not None:
            own = self.limits(accounts.key).concurrent_asks
            key_limit = _lowest(own, share)
            which = "its limit" if key_limit == own else "its fair share of api_max_concurrent_asks"
            self._check(accounts.key, key_limit, which)
            held.append(accounts.key)
        if accounts.user is not None:
            own = accounts.user_limits.concurrent_asks
            user_share, of = share, "api_max_concurrent_asks"
            if accounts.key is not None:
                user_share = fair_share(key_limit) if key_limit is not None else None
                of = f"key [{accounts.key}]'s questions"
            user_limit = _lowest(own, user_share)
            self._check(accounts.user, user_limit, "its limit" if user_limit == own else f"its fair share of {of}")
            held.append(accounts.user)
        for account in held:
            self._asks[account] = self._asks.get(account, 0) + 1

    def _check(self, account: str, limit: int | None, which: str) -> None:
        held = self._asks.get(account, 0)
        if limit is not None and held >= limit:
            raise TooManyRequests(
                f"rejected execution: {_who(account)} has {held} questions in flight ({which}: {limit}); retry later"
            )

    def release_ask(self, accounts: Accounts) -> None:
        for account in (accounts.key, accounts.user):
            if account is None:
                continue
            held = self._asks.get(account, 0) - 1
            if held > 0:
                self._asks[account] = held
            else:
                self._asks.pop(account, None)


def fair_share(slots: int) -> int:
    """Return the questions one account may have in flight of ``slots`` (the service's, or a key's for its
    users): half, rounded up, so one key (or one user) never holds every slot (``api_max_concurrent_asks``
    8: 4; 1: 1)."""
    return max(1, math.ceil(slots / 2))


SLOTS = 4096
_SLOT = struct.Struct("<16sd")
#: Slots looked at past a key's own before the last of them is taken over (the table is full).
_PROBES = 32


class SharedWindows:
    """The shared slots of one ``serve`` (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._fd = os.open(self.path, os.O_RDWR)
        self._map = mmap.mmap(self._fd, SLOTS * _SLOT.size)

    @staticmethod
    def create(path: str | Path) -> None:
        """Make the (empty) file the workers map: the supervisor's part."""
        with open(path, "wb") as out:
            out.truncate(SLOTS * _SLOT.size)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)

    def take(self, key: str, per_minute: int, count: int, now: float) -> float | None:
        """Count ``count`` requests of ``key`` at ``now``; None where they fit its ``per_minute``, else the
        seconds until they would (none is counted then)."""
        digest = hashlib.blake2b(key.encode("utf-8"), digest_size=16).digest()
        interval = WINDOW_S / per_minute
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            offset, stored = self._slot(digest)
            tat = max(stored, now)
            after = tat + interval * count
            if after - now > WINDOW_S + 1e-9:
                return after - now - WINDOW_S
            _SLOT.pack_into(self._map, offset, digest, after)
            return None
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _slot(self, digest: bytes) -> tuple[int, float]:
        """Return the offset of ``digest``'s slot (its own, a free one, or the last probed) and its stored time."""
        start = int.from_bytes(digest[:4], "little") % SLOTS
        offset = start * _SLOT.size
        for step in range(_PROBES):
            offset = ((start + step) % SLOTS) * _SLOT.size
            found, stored = _SLOT.unpack_from(self._map, offset)
            if found == digest:
                return offset, stored
            if found == bytes(16):
                return offset, 0.0
        return offset, 0.0
