"""A scripted OpenAI-compatible ``/v1/embeddings`` server on loopback with a GPU server's shape of cost.

A real HTTP server (aiohttp) in its own thread and event loop. It serves at most ``slots`` requests at
once, each for a fixed ``batch_s`` whatever its size (a GPU runs a batch in about the time of one text;
vLLM and TEI batch concurrent requests); the others wait in its queue. Its capacity is therefore
``slots * batch_size / batch_s`` texts per second. Vectors are fixed per text (seeded by its CRC), unit
length, ``dims`` wide. It records what a test observes: ``max_in_flight`` (requests received and not yet
answered), and per served request its texts and its (start, end) on the server's clock (``time.monotonic``,
the same clock in every process of the machine; ``GET /v1/stats`` gives them to a benchmark in another process).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import zlib
from dataclasses import dataclass

import numpy as np
from aiohttp import web


@dataclass(frozen=True, slots=True)
class Served:
    texts: tuple[str, ...]
    start: float
    end: float


class ScriptedEmbeddings:
    def __init__(self, *, dims: int = 8, slots: int = 1, batch_s: float = 0.05, model: str = "scripted-embed") -> None:
        self.dims = dims
        self.slots = slots
        self.batch_s = batch_s
        self.model = model
        self.in_flight = 0
        self.max_in_flight = 0
        self.served: list[Served] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._vectors: dict[str, list[float]] = {}
        self._encoded: dict[str, str] = {}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def vector(self, text: str) -> list[float]:
        if text not in self._vectors:
            rng = np.random.default_rng(zlib.crc32(text.encode()))
            v = rng.standard_normal(self.dims)
            self._vectors[text] = [float(x) for x in v / np.linalg.norm(v)]
        return self._vectors[text]

    def _payload(self, texts: list[str]) -> str:
        # each text's vector serialised once: the server's own cost stays small beside ``batch_s``
        for t in texts:
            if t not in self._encoded:
                self._encoded[t] = json.dumps(self.vector(t))
        data = ",".join(
            f'{{"object":"embedding","index":{i},"embedding":{self._encoded[t]}}}' for i, t in enumerate(texts)
        )
        return f'{{"object":"list","model":{json.dumps(self.model)},"data":[{data}],"usage":{{"prompt_tokens":0}}}}'

    def overlapping(self) -> int:
        """The most served requests whose service intervals overlap at one instant."""
        events = sorted([(s.start, 1) for s in self.served] + [(s.end, -1) for s in self.served])
        best = now = 0
        for _, step in events:
            now += step
            best = max(best, now)
        return best

    def __enter__(self) -> ScriptedEmbeddings:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main(ready)), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("scripted embeddings server did not start")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(10)

    async def _main(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        gate = asyncio.Semaphore(self.slots)

        async def embeddings(request: web.Request) -> web.Response:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                body = await request.json()
                texts = [str(t) for t in body["input"]]
                async with gate:
                    start = time.monotonic()
                    await asyncio.sleep(self.batch_s)
                    end = time.monotonic()
                self.served.append(Served(tuple(texts), start, end))
                return web.Response(text=self._payload(texts), content_type="application/json")
            finally:
                self.in_flight -= 1

        async def stats(request: web.Request) -> web.Response:
            served = [[item.start, item.end] for item in self.served]
            return web.json_response({"slots": self.slots, "served": served, "max_in_flight": self.max_in_flight})

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/embeddings", embeddings)
        app.router.add_get("/v1/stats", stats)
        runner = web.AppRunner(app, shutdown_timeout=0.2)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        ready.set()
        await self._stopping.wait()
        await runner.cleanup()


def main() -> None:
    """``python -m tests.scripted_embeddings --slots N --batch-ms MS --dims D``: serve in this process (the
    benchmarks run it apart from the client, as a real server is), print the port, stop when stdin closes."""
    import argparse
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--batch-ms", type=float, default=100.0)
    parser.add_argument("--dims", type=int, default=384)
    args = parser.parse_args()
    with ScriptedEmbeddings(dims=args.dims, slots=args.slots, batch_s=args.batch_ms / 1000) as server:
        print(server.port, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
