"""A real HTTP reverse proxy on loopback that counts the requests it forwards (for round-trip tests).

``refuse`` and ``rewrite`` let a test stand in for an overloaded node: answer a request with 429 without
forwarding it, or change the status of items in a real ``_bulk`` answer (the node did the work; the
client must still believe it has to resend); ``delay`` holds a request that many seconds before it is
forwarded (a node that answers after the client's timeout: the work is still done).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import aiohttp
from aiohttp import web


class CountingProxy:
    """Forward every request to ``upstream``; ``paths`` counts them by (method, path)."""

    def __init__(
        self,
        upstream: str,
        *,
        refuse: Callable[[web.Request, int], bool] | None = None,
        rewrite: Callable[[web.Request, int, bytes], bytes] | None = None,
        delay: Callable[[web.Request, int], float] | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.refuse = refuse
        self.rewrite = rewrite
        self.delay = delay
        self.paths: Counter[tuple[str, str]] = Counter()
        #: (method, path, the Authorization header or None) of every request, in order.
        self.credentials: list[tuple[str, str, str | None]] = []
        #: (method, path, body) of every request, in order (what reached the cluster, byte for byte).
        self.bodies: list[tuple[str, str, bytes]] = []
        #: (method, path, every header as sent) of every request, in order.
        self.headers: list[tuple[str, str, list[tuple[str, str]]]] = []
        #: while true, every connection is dropped unanswered (Elasticsearch "down" behind the proxy)
        self.down = False
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    @property
    def total(self) -> int:
        return sum(self.paths.values())

    def reset(self) -> None:
        self.paths.clear()
        self.credentials.clear()
        self.bodies.clear()
        self.headers.clear()

    async def _handle(self, request: web.Request) -> web.Response:
        assert self._session is not None
        if self.down:  # like a node that went away: the connection drops without an answer
            if request.transport is not None:
                request.transport.abort()
            raise ConnectionResetError("proxy is down")
        self.paths[(request.method, request.path)] += 1
        self.credentials.append((request.method, request.path, request.headers.get("Authorization")))
        self.headers.append((request.method, request.path, list(request.headers.items())))
        seen = self.paths[(request.method, request.path)]
        body = await request.read()
        self.bodies.append((request.method, request.path, body))
        if self.refuse is not None and self.refuse(request, seen):
            error = b'{"error":{"type":"es_rejected_execution_exception","reason":"proxy refuses"},"status":429}'
            return web.Response(status=429, body=error, content_type="application/json")
        if self.delay is not None and (hold := self.delay(request, seen)) > 0:
            await asyncio.sleep(hold)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        if self.rewrite is not None:  # the answer must be plain JSON to be rewritten
            headers = {k: v for k, v in headers.items() if k.lower() != "accept-encoding"}
            headers["Accept-Encoding"] = "identity"
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=body, headers=headers
        ) as upstream:
            payload = await upstream.read()
            if self.rewrite is not None:
                payload = self.rewrite(request, seen, payload)
            keep = {
                k: v
                for k, v in upstream.headers.items()
                if k.lower() not in ("content-length", "transfer-encoding", "connection")
            }
            return web.Response(status=upstream.status, body=payload, headers=keep)

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._session = aiohttp.ClientSession(auto_decompress=False)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
