"""A real HTTP reverse proxy on loopback that counts the requests it forwards (for round-trip tests)."""

from __future__ import annotations

from collections import Counter

import aiohttp
from aiohttp import web


class CountingProxy:
    """Forward every request to ``upstream``; ``paths`` counts them by (method, path)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.paths: Counter[tuple[str, str]] = Counter()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    @property
    def total(self) -> int:
        return sum(self.paths.values())

    def reset(self) -> None:
        self.paths.clear()

    async def _handle(self, request: web.Request) -> web.Response:
        assert self._session is not None
        self.paths[(request.method, request.path)] += 1
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=body, headers=headers
        ) as upstream:
            payload = await upstream.read()
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
