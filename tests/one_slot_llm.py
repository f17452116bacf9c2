"""A one-slot OpenAI-compatible server, the way llama.cpp serves: while a generation runs nothing else
is answered — ``GET /v1/models`` included — until it finishes. The test decides when it finishes
(:meth:`OneSlotLLM.finish`), so a generation is "long" for exactly as long as the test needs."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

from aiohttp import web


class OneSlotLLM:
    def __init__(self, model: str = "scripted") -> None:
        self.model = model
        self.port = 0
        self.generating = threading.Event()
        self.models_answered = 0
        self._finish = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def finish(self) -> None:
        """Let the running generation (and every later one) finish."""
        self._finish.set()

    def __enter__(self) -> OneSlotLLM:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main(ready)), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("one-slot LLM server did not start")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._finish.set()
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(10)

    async def _main(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        slot = asyncio.Lock()

        async def models(request: web.Request) -> web.Response:
            async with slot:
                self.models_answered += 1
                return web.json_response({"object": "list", "data": [{"id": self.model, "owned_by": "llamacpp"}]})

        async def completions(request: web.Request) -> web.Response:
            body: dict[str, Any] = await request.json()
            async with slot:
                self.generating.set()
                await asyncio.to_thread(self._finish.wait)
                self.generating.clear()
            choice = {"index": 0, "text": " done", "finish_reason": "stop"}
            usage = {"prompt_tokens": len(str(body.get("prompt", "")).split()), "completion_tokens": 1}
            return web.json_response(
                {"object": "text_completion", "model": self.model, "choices": [choice], "usage": usage}
            )

        app = web.Application()
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/completions", completions)
        runner = web.AppRunner(app, shutdown_timeout=0.2, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        ready.set()
        await self._stopping.wait()
        await runner.cleanup()
