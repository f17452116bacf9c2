"""What sharing keys' requests per minute across ``serve --workers N`` costs a request: one
``KeyLimiter.request`` of a key with ``per_minute`` set, this process's own window against the shared
file (``mmap`` + ``flock``, :mod:`hopsearch.service.api.shared_limits`). Prints microseconds per call
(median of 5 rounds); a ``_retrieve`` of a key without ``per_minute`` makes no such call.

    .venv/bin/python benchmarks/bench_shared_limits.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from hopsearch.service.api.limits import KeyLimiter
from hopsearch.service.api.shared_limits import SharedWindows
from hopsearch.service.auth.records import KeyLimits

CALLS = 100_000
LIMITS = KeyLimits(per_minute=10**9)


def per_call_us(limiter: KeyLimiter, keys: list[str]) -> float:
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for n in range(CALLS):
            limiter.request(keys[n % len(keys)], LIMITS)
        rounds.append((time.perf_counter() - started) / CALLS * 1e6)
    return statistics.median(rounds)


def main() -> None:
    keys = [f"key-{n}" for n in range(50)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "limits"
        SharedWindows.create(path)
        shared = SharedWindows(path)
        try:
            local_us = per_call_us(KeyLimiter(), keys)
            shared_us = per_call_us(KeyLimiter(shared=shared), keys)
        finally:
            shared.close()
    print(f"per-process window: {local_us:.2f} us/request")
    print(f"shared window:      {shared_us:.2f} us/request (+{shared_us - local_us:.2f} us)")


if __name__ == "__main__":
    main()
