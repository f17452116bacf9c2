"""``/_mcp`` answered as the documented ``/_mcp/`` mount, without a redirect: Starlette's mount answers
the bare path with a 307 to the slashed one, and some MCP clients do not follow a redirect on POST. The
path is rewritten before anything else sees it (the gate checks the request as made to ``/_mcp/``)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

#: Where the MCP wing's app is mounted (:mod:`hopsearch.service.api.mcp.tools`).
MOUNT = "/_mcp"


class McpPath:
    """The outermost middleware: a request for ``/_mcp`` is one for ``/_mcp/``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == MOUNT:
            slashed = f"{MOUNT}/"
            scope = {**scope, "path": slashed, "raw_path": slashed.encode()}
        await self.app(scope, receive, send)
