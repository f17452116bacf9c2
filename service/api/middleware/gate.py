"""A pure ASGI middleware in front of every route: API keys, the body-size limit, metrics.

- API keys: ``Authorization: ApiKey <key>`` or ``Bearer <key>`` on every route but ``/_health`` and ``/_health/live``;
  no header → 401, a key that is not configured → 403 (compared in constant time). With no keys
  configured authentication is off.
- Body size: a ``Content-Length`` over the limit → 413 before the body is read; a chunked body is
  counted as it arrives and cut off with 413 as soon as it passes the limit.
- Body depth: arrays and objects nested deeper than :data:`~hopsearch.service.api.json_depth.MAX_JSON_DEPTH`
  → 400 naming the field, before any parser or validator recurses into the body. The body is read
  here, whole, and given to the route again: a refusal raised while a route reads its body comes too
  late for a mounted app (the MCP tools answer 500 first).
- Metrics: one count and one latency observation per request, labelled with the route template (refused requests too).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Sequence

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hopsearch.service.api.json_depth import too_deep
from hopsearch.service.api.responses import error_response
from hopsearch.service.api.state import ApiState
from hopsearch.service.errors import (
    ApiError,
    AuthenticationError,
    AuthorizationError,
    RequestInvalid,
    RequestTooLarge,
)

OPEN_PATHS = frozenset({"/_health", "/_health/live"})
_SCHEMES = (b"apikey ", b"bearer ")


def check_key(state: ApiState, header: bytes | None) -> None:
    if not state.keys:
        return
    if not header:
        raise AuthenticationError("missing authentication credentials for REST request")
    lowered = header[:7].lower()
    token = b""
    for scheme in _SCHEMES:
        if lowered.startswith(scheme):
            token = header[len(scheme) :].strip()
            break
    else:
        raise AuthenticationError("unsupported authentication scheme (use `ApiKey <key>` or `Bearer <key>`)")
    accepted = False
    for key in state.keys:
        accepted |= hmac.compare_digest(token, key)
    if not accepted:
        raise AuthorizationError("the API key is not accepted")


def leaf_routes(routes: Sequence[BaseRoute]) -> list[BaseRoute]:
    """The routes themselves, inside included routers (FastAPI wraps each in an object whose match
    says nothing of the route); a mount stays one route, labelled with its prefix."""
    leaves: list[BaseRoute] = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        leaves += leaf_routes(inner.routes) if inner is not None else [route]
    return leaves


def route_template(routes: Sequence[BaseRoute], scope: Scope) -> str:
    """The template of the route ``scope`` goes to (a refused request never reached the router, and
    plain Starlette routes such as the OpenAPI document do not record themselves); else ``unmatched``."""
    partial = None
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return str(getattr(route, "path", "unmatched"))
        if match is Match.PARTIAL and partial is None:
            partial = str(getattr(route, "path", "unmatched"))
    return partial or "unmatched"


class Gate:
    def __init__(self, app: ASGIApp, state: ApiState, routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.state = state
        self._routes = routes
        self._leaves: list[BaseRoute] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            refused = self._refuse(scope)
            if refused is None:
                receive, refused = await self._read_body(receive)
            if refused is not None:
                headers = {"WWW-Authenticate": 'ApiKey, Bearer realm="hopsearch"'} if refused.status == 401 else None
                await error_response(refused, self.state.redact, headers)(scope, receive, send_status)
                return
            await self.app(scope, receive, send_status)
        finally:
            template = getattr(scope.get("route"), "path", None) or route_template(self._leaf_routes(), scope)
            self.state.metrics.request(scope["method"], template, status, time.perf_counter() - started)

    def _leaf_routes(self) -> list[BaseRoute]:
        if self._leaves is None:  # every route is registered before the first request
            self._leaves = leaf_routes(self._routes)
        return self._leaves

    def _refuse(self, scope: Scope) -> ApiError | None:
        headers: dict[bytes, bytes] = dict(scope["headers"])
        try:
            if scope["path"] not in OPEN_PATHS:
                check_key(self.state, headers.get(b"authorization"))
            length = headers.get(b"content-length")
            if length is not None:
                limit = self.state.settings.api_max_body_bytes
                if not length.isdigit():
                    raise RequestInvalid("Content-Length is not a number", field="header.content-length")
                if int(length) > limit:
                    raise RequestTooLarge(f"request body of {int(length)} bytes is over the limit of {limit}")
        except ApiError as exc:
            return exc
        return None

    async def _read_body(self, receive: Receive) -> tuple[Receive, ApiError | None]:
        """The body read whole (cut off past the size limit) and checked for depth; a ``receive`` that
        gives its messages again, then the connection's own."""
        limit = self.state.settings.api_max_body_bytes
        messages: list[Message] = []
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > limit:
                return receive, RequestTooLarge(f"request body is over the limit of {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        refused = too_deep(chunks[0] if len(chunks) == 1 else b"".join(chunks))

        async def replayed() -> Message:
            return messages.pop(0) if messages else await receive()

        return replayed, refused
