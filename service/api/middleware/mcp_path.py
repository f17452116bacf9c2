"""``/_mcp`` answered as the documented ``/_mcp/`` mount, without a redirect: Starlette's mount answers
the bare path with a 307 to the slashed one, and some MCP clients do not follow a redirect on POST. The
path is rewritten before anything else sees it (the gate checks the request as made to ``/_mcp/``).

The tools are served stateless, each call's answer a JSON body (no session, no server-initiated messages),
so the SDK's ``GET`` stream would carry nothing and never end (each one a connection and memory held, and
``serve`` unable to stop while one is open): :class:`McpPostOnly` answers any method but ``POST`` with 405
at once, as the MCP transport allows a server that offers no stream (``Allow: POST``)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from hopsearch.service.api.responses import error_response
from hopsearch.service.api.state import ApiState
from hopsearch.service.errors import MethodNotAllowed

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


class McpPostOnly:
    """The MCP app, taking ``POST`` only (see the module docstring); any other method: 405 at once."""

    def __init__(self, app: ASGIApp, state: ApiState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] != "POST":
            why = (
                f"incorrect HTTP method for uri [{MOUNT}] and method [{scope['method']}], allowed: [POST] "
                "(the tools are served stateless: no session, no stream to open)"
            )
            response = error_response(MethodNotAllowed(why), self.state.redact, {"Allow": "POST"})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
