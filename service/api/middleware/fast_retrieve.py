"""``POST /{index}/_retrieve`` without the framework's request machinery: the hot path of the service.

A pure ASGI middleware, innermost (inside :class:`~hopsearch.service.api.middleware.gate.Gate`, so API keys,
body limits and metrics apply as to any route). For a well-formed request — a JSON object body sent as
``application/json`` that :class:`~hopsearch.service.api.models.RetrieveRequest` accepts — it parses the
body once (orjson), validates it once (pydantic) and runs the route's own code
(:func:`~hopsearch.service.api.retrieve.run_retrieve`); FastAPI's routing, dependency solving and second
response pass cost more than the rest of the request (profiled: ``docs``/the closing note of issue 20).

Anything else — another content type, an empty, non-JSON or invalid body, an unusual path — is handed to
the FastAPI route unchanged (the body already read is replayed), so every error keeps the route's exact
400 and field name; the OpenAPI document still comes from that route.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import orjson
from pydantic import ValidationError
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hopsearch.service.api.middleware.gate import leaf_routes
from hopsearch.service.api.models import RetrieveRequest
from hopsearch.service.api.responses import OrjsonResponse, error_response, retry_headers
from hopsearch.service.api.retrieve import run_retrieve
from hopsearch.service.api.state import ApiState, caller_of
from hopsearch.service.errors import HopsearchError

#: The route's path (``{index}`` matches as Starlette matches it: one segment) and bound.
_PATH = re.compile(r"^/([^/]+)/_retrieve$")
TEMPLATE = "/{index}/_retrieve"
MAX_INDEX = 255


def _json_type(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Tell whether the body is declared ``application/json`` (parameters such as ``charset`` allowed)."""
    for name, value in headers:
        if name == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == b"application/json"
    return False


def _replay(messages: list[Message], failure: BaseException | None, receive: Receive) -> Receive:
    """Return a ``receive`` that gives the messages already read again (and the error that stopped the
    reading, where one did), then the connection's own."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        if failure is not None:
            raise failure
        return await receive()

    return replayed


class FastRetrieve:
    def __init__(self, app: ASGIApp, state: ApiState, routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.state = state
        self._routes = routes
        self._route: BaseRoute | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        found = _PATH.match(scope["path"])
        if found is None or len(found.group(1)) > MAX_INDEX or not _json_type(scope["headers"]):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        failure: BaseException | None = None
        body = b""
        try:
            while True:
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request":
                    break
                body += message.get("body", b"")
                if not message.get("more_body", False):
                    break
        except Exception as exc:  # over the body limit: the route raises it again, as it would have
            failure = exc
        request = self._parse(body) if failure is None and messages[-1]["type"] == "http.request" else None
        if request is None:
            await self.app(scope, _replay(messages, failure, receive), send)
            return
        route = self._retrieve_route()
        if route is not None:
            scope["route"] = route  # the gate labels the request's metrics with it
        try:
            response = OrjsonResponse(await run_retrieve(self.state, caller_of(scope), found.group(1), request))
        except HopsearchError as exc:
            response = error_response(exc, self.state.redact, retry_headers(exc, self.state.settings))
        await response(scope, receive, send)

    @staticmethod
    def _parse(body: bytes) -> RetrieveRequest | None:
        """Return the request, or None where the route must answer (and explain) instead."""
        if not body:
            return None
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(data, dict):
            return None
        try:
            return RetrieveRequest.model_validate(data)
        except ValidationError:
            return None

    def _retrieve_route(self) -> BaseRoute | None:
        if self._route is None:
            for route in leaf_routes(self._routes):
                if getattr(route, "path", None) == TEMPLATE and "POST" in (getattr(route, "methods", None) or ()):
                    self._route = route
                    break
        return self._route
