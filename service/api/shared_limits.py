"""Per-key requests per minute shared by the worker processes of one ``hopsearch serve --workers N``.

The supervisor (``serve``) makes a small file before it starts the workers and names it in
``api_shared_limits_file``; each worker maps it (``mmap``) and changes it under an exclusive ``flock``.
A key has one slot: the first 16 bytes of its name's BLAKE2b digest and its GCRA "theoretical arrival
time" (a float of ``time.monotonic``, one clock for every process of the host): a bucket of ``per_minute``
requests refilled evenly over 60 s (all at once from a standing start, then one every ``60 / per_minute``
s), so a 60 s window holds at most ``2 * per_minute - 1``, whatever the number of workers (one process
alone keeps :class:`~.limits.KeyLimiter`'s exact sliding window). Nothing is shared across hosts: each
host's ``serve`` has its own file, so N hosts allow N times a key's limit.
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import struct
from pathlib import Path

WINDOW_S = 60.0
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
        """The offset of ``digest``'s slot (its own, a free one, or the last probed) and its stored time."""
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
