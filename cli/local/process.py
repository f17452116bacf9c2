"""Local background processes — the Elasticsearch node (:mod:`.esnode`) and the LLM server
(:mod:`.llm_server`) — started, probed and stopped the same way.

A process runs in its own session (so its whole group can be signalled), writes its output to a log
file, and is recorded in a pid file. :func:`wait_ready` polls :func:`probe` until the process answers,
failing with the log's tail when it exits first; :func:`stop_group` sends SIGTERM to the group and
SIGKILL after a timeout. ``service/`` never starts processes: this is the only module that does.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from hopsearch.service.errors import NodeError

T = TypeVar("T")


def probe(url: str, timeout: float = 2.0, *, headers: Mapping[str, str] | None = None) -> Any | None:
    """Return the JSON body of ``GET url`` when it answers 200, else ``None`` (the one readiness probe)."""
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=dict(headers or {})), timeout=timeout
        ) as response:
            if response.status != 200:
                return None
            return json.loads(response.read() or b"null")
    except (urllib.error.URLError, OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a process of another user counts; a zombie child of ours does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    _reap(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, 0)
        return True
    return False


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def spawn(command: Sequence[str], log_path: Path, *, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``command`` in the background, in its own session, its output appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log_file:
        return subprocess.Popen(
            list(command),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )


def tail(path: Path, chars: int = 2000) -> str:
    """Return the end of a log file ("" when it cannot be read)."""
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def wait_ready(
    process: subprocess.Popen[bytes],
    ready: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    log_path: Path,
    interval: float = 0.5,
) -> T:
    """Poll ``ready()`` until it returns a value; :class:`NodeError` with the log's tail when the process
    exits first or ``timeout`` passes (the caller stops it then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise NodeError(f"{what} exited with {process.returncode}; log tail:\n{tail(log_path)}")
        found = ready()
        if found is not None:
            return found
        time.sleep(interval)
    raise NodeError(f"{what} did not answer within {timeout:g} s; log tail:\n{tail(log_path)}")


def _wait_gone(pid: int, timeout: float) -> bool:
    """Wait until process group ``pid`` is gone (reaping our child); ``False`` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            _reap(pid)
            return True
        except PermissionError:
            return not alive(pid)
        _reap(pid)
        time.sleep(0.1)
    return False


def stop_group(pid: int, *, timeout: float) -> bool:
    """SIGTERM to the process group of ``pid``, SIGKILL after ``timeout``; ``False`` if it was not running."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    if not _wait_gone(pid, timeout):
        kill_group(pid)
    return True


def kill_group(pid: int, *, timeout: float = 10.0) -> None:
    """SIGKILL the process group of ``pid`` at once and wait for it to go."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    _wait_gone(pid, timeout)
