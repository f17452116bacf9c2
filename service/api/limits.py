"""Per-key limits: requests per minute (a sliding window of the last 60 s; a ``/retrieve`` batch counts
one request per query) and questions in flight. Requests per minute are shared by the workers of one
``serve --workers N`` (:mod:`~.shared_limits`); questions in flight are each process's own. A refusal is
a 429 with ``Retry-After``."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from hopsearch.service.api.shared_limits import SharedWindows
from hopsearch.service.auth.records import KeyLimits
from hopsearch.service.errors import TooManyRequests

WINDOW_S = 60.0
#: Keys whose windows are kept (the memory is emptied when full; a key then starts a fresh window).
MAX_KEYS = 10_000


class KeyLimiter:
    """``shared``: the windows of every worker of one ``serve`` (:mod:`~.shared_limits`); None: this
    process's own."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, shared: SharedWindows | None = None) -> None:
        self._clock = clock
        self._shared = shared
        self._limits: dict[str, KeyLimits] = {}
        self._windows: dict[str, deque[float]] = {}
        self._asks: dict[str, int] = {}

    def limits(self, key: str | None) -> KeyLimits:
        return self._limits.get(key, KeyLimits()) if key is not None else KeyLimits()

    def request(self, key: str, limits: KeyLimits, count: int = 1) -> None:
        """Counts ``count`` requests of ``key`` (a ``/retrieve`` batch counts each query); 429 where they
        would pass its ``per_minute`` requests of the last minute (none of them is counted then)."""
        if len(self._limits) >= MAX_KEYS and key not in self._limits:
            self._limits.clear()
            self._windows.clear()
        self._limits[key] = limits
        if limits.per_minute is None or count <= 0:
            return
        now = self._clock()
        if self._shared is not None:
            wait_s = self._shared.take(key, limits.per_minute, count, now)
            if wait_s is not None:
                wait = max(1, math.ceil(wait_s))
                raise TooManyRequests(
                    f"rejected execution: key [{key}] made its {limits.per_minute} requests of the last minute "
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
                f"rejected execution: key [{key}] made {len(window)} requests in the last minute "
                f"(limit {limits.per_minute}); retry in {wait}s",
                details={"retry_after": wait},
            )
        window.extend([now] * count)

    def queries(self, key: str | None, count: int) -> None:
        """Counts the queries of a batch beyond the one request the gate counted (``count`` - 1); a batch of
        more queries than the key may make in a minute is refused as such (no wait would let it through)."""
        if key is None or count <= 1:
            return
        limits = self.limits(key)
        if limits.per_minute is not None and count > limits.per_minute:
            raise TooManyRequests(
                f"rejected execution: {count} queries in one request are more than key [{key}]'s limit of "
                f"{limits.per_minute} a minute: send fewer at a time"
            )
        self.request(key, limits, count - 1)

    def admit_ask(self, key: str | None, share: int | None = None) -> None:
        """One more question of ``key`` in flight; 429 at its ``concurrent_asks``, or at ``share`` (its fair
        share of the service's questions, :func:`fair_share`) where that is lower or the key names none."""
        if key is None:
            return
        own = self.limits(key).concurrent_asks
        limit = min(own, share) if own is not None and share is not None else own if own is not None else share
        held = self._asks.get(key, 0)
        if limit is not None and held >= limit:
            which = "its limit" if limit == own else "its fair share of api_max_concurrent_asks"
            raise TooManyRequests(
                f"rejected execution: key [{key}] has {held} questions in flight ({which}: {limit}); retry later"
            )
        self._asks[key] = held + 1

    def release_ask(self, key: str | None) -> None:
        if key is None:
            return
        held = self._asks.get(key, 0) - 1
        if held > 0:
            self._asks[key] = held
        else:
            self._asks.pop(key, None)


def fair_share(slots: int) -> int:
    """The questions one key may have in flight of the service's ``slots``: half, rounded up, so one key
    never holds every slot (``api_max_concurrent_asks`` 8: 4; 1: 1)."""
    return max(1, math.ceil(slots / 2))
