"""A headless Chromium driven over the DevTools protocol (Debian's ``chromium``, never a downloaded browser):
navigate, evaluate JavaScript, type text and press keys as a user would. Enough to sign in to a web app and
send a chat message; nothing is mocked."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import websockets

from tests.conftest import unavailable

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
    "--remote-debugging-port=0",
]


class Page:
    """One page of the browser: DevTools commands over its websocket."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self._ids = itertools.count(1)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        await self.socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(await self.socket.recv())
            if message.get("id") == ident:
                assert "error" not in message, message
                result: dict[str, Any] = message.get("result", {})
                return result

    async def evaluate(self, expression: str) -> Any:
        found = await self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        assert "exceptionDetails" not in found, found
        return found.get("result", {}).get("value")

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete'")

    async def wait_for(self, condition: str, timeout_s: float = 60.0) -> Any:
        """The first truthy value of ``condition`` (a JavaScript expression), polled."""
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(AssertionError):
                value = await self.evaluate(condition)
                if value:
                    return value
            assert time.monotonic() < deadline, f"timed out waiting for: {condition}"
            await asyncio.sleep(0.25)

    async def type(self, text: str) -> None:
        await self.send("Input.insertText", text=text)

    async def press_enter(self) -> None:
        for kind in ("keyDown", "keyUp"):
            await self.send(
                "Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13, text="\r"
            )

    async def text(self) -> str:
        return str(await self.evaluate("document.body.innerText"))


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        unavailable("chromium is not installed (scripts/bootstrap.sh installs Debian's package)")
        raise AssertionError("unreachable")
    return found


def _start(profile: Path) -> subprocess.Popen[bytes]:
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "DevToolsActivePort").unlink(missing_ok=True)  # an earlier browser's
    args = [chromium(), *FLAGS, f"--user-data-dir={profile}", "about:blank"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _port(profile: Path) -> int | None:
    active = profile / "DevToolsActivePort"
    return int(active.read_text().split()[0]) if active.exists() and active.read_text().strip() else None


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@contextlib.asynccontextmanager
async def browser_page(profile: Path) -> AsyncIterator[Page]:
    """A fresh headless Chromium (its own profile) and its one page."""
    process = _start(profile)
    try:
        deadline = time.monotonic() + 60
        while (port := _port(profile)) is None:
            assert process.poll() is None and time.monotonic() < deadline, "chromium did not start"
            await asyncio.sleep(0.2)
        async with httpx.AsyncClient(timeout=10) as http:
            targets = (await http.get(f"http://127.0.0.1:{port}/json")).json()
        url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
        async with websockets.connect(url, max_size=2**26) as socket:
            page = Page(socket)
            await page.send("Page.enable")
            yield page
    finally:
        _stop(process)
