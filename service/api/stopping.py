"""The service's stop, seen from inside: SIGTERM and SIGINT set :meth:`ApiState.stopping
<hopsearch.service.api.state.ApiState.stopping>` before uvicorn's own handler runs, so every stream and
every wait for an answer ends at once, cleanly (:mod:`~hopsearch.service.api.streaming`), and uvicorn's
graceful shutdown (``api_graceful_timeout_s`` at most) finds no request left to wait for. Without this,
uvicorn waits for each open response to end by itself: a question streaming from a slow model, for as long
as it takes."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from hopsearch.service.api.state import ApiState

SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_on_signals(state: ApiState) -> Iterator[None]:
    """While the app runs: SIGTERM and SIGINT set ``state.stopping()`` and then go on to the handler that
    was there (uvicorn's); the handlers are put back after. Nothing is changed off the main thread (an
    app served from another thread, as tests do: signals reach the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    stopping = state.stopping()
    previous: dict[int, Any] = {int(sig): signal.getsignal(sig) for sig in SIGNALS}

    def handler(sig: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(stopping.set)
        before = previous.get(sig)
        if callable(before):
            before(sig, frame)
        elif before == signal.SIG_DFL and sig == signal.SIGINT:
            raise KeyboardInterrupt

    for sig in SIGNALS:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for number, before in previous.items():
            if signal.getsignal(number) is handler:
                signal.signal(number, before)
