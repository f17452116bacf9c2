"""The front the official Elasticsearch clients accept: hopsearch's own routes, everything else proxied.

A pure ASGI middleware, outermost. For each request it decides whether a hopsearch route answers it
(any route whose path matches) or Elasticsearch does:

- Own routes: ``X-Elastic-Product: Elasticsearch`` on every answer (the 8.x clients check it on each
  response); a hopsearch key may come in ``X-Hopsearch-Key`` so that ``Authorization`` stays free for
  the caller's Elasticsearch credentials. ``GET /`` (:func:`root`) is Elasticsearch's own root body,
  with hopsearch's version and capabilities under ``hopsearch``.
- Under hopsearch's own prefixes (each route's first segment, ``/{index}/_retrieve``'s and ``_ask``'s
  endpoint, and :data:`RESERVED` for routes to come) nothing is proxied: a path there that no route
  matches (``/_ui/traces/a%2Fb``, ``/_traces/..%2F..``) is hopsearch's own 404.
- Proxied: the hopsearch key is checked (``X-Hopsearch-Key`` or ``Authorization``: a flat key, a stored
  key or an end-user token, :func:`~hopsearch.service.api.middleware.gate.authenticate`; a non-admin's
  key needs the ``search`` action and index patterns covering every index named), then the path
  (:func:`~hopsearch.service.api.proxy.espath.parse_request`, 400), then the allow-list (403); for
  a caller that is not an admin the body is read whole (up to ``api_max_body_bytes``, 413) and every
  index the request names is decided on
  (:class:`~hopsearch.service.api.proxy.managed.ManagedIndices`, 403: hopsearch's own indices
  are for admins). Then :class:`~hopsearch.service.api.proxy.forwarder.Forwarder` passes the checked
  path on with the caller's own ``Authorization`` (the cluster decides what those credentials may do),
  never a hopsearch credential.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hopsearch.service.api.middleware.gate import (
    authenticate,
    authentication_on,
    leaf_routes,
    refuse_query_credentials,
    refused,
)
from hopsearch.service.api.models import RootResponse
from hopsearch.service.api.proxy.esnames import ProxiedCall
from hopsearch.service.api.proxy.espath import parse_request
from hopsearch.service.api.proxy.forwarder import KEY_HEADER, Forwarder, upstream_headers
from hopsearch.service.api.proxy.managed import EsResolver, ManagedIndices, PrefixIndices, WithAttached
from hopsearch.service.api.responses import OrjsonResponse, error_response, retry_headers
from hopsearch.service.api.state import VERSION, ApiState, caller_of
from hopsearch.service.app.runtime import STRATEGIES
from hopsearch.service.errors import AuthorizationError, HopsearchError, RequestTooLarge
from hopsearch.service.requests import HOPS

router = APIRouter()
PRODUCT = (b"x-elastic-product", b"Elasticsearch")
#: Paths whose route decision :class:`Front` remembers (the memory is emptied when full).
OWN_CACHE = 4096
#: First segments hopsearch keeps for routes it adds later (never passed to the cluster meanwhile).
RESERVED = frozenset({"_keys", "_groups"})


@router.head("/", response_model=None)
async def ping(request: Request) -> Response:
    """Answer the clients' ping: 200 when the service and its cluster answer."""
    state: ApiState = request.app.state.api
    runtime = await state.runtime()
    await runtime.store.cluster_health()
    return Response(status_code=200, media_type="application/json")


@router.get("/", response_model=None, responses={200: {"model": RootResponse}})
async def root(request: Request) -> OrjsonResponse:
    """Elasticsearch's root (name, cluster, version, tagline), with hopsearch's own under ``hopsearch``."""
    state: ApiState = request.app.state.api
    runtime = await state.runtime()
    body = await runtime.store.cluster_root()
    es = runtime.store.info.to_dict()
    body["hopsearch"] = {
        "version": {"number": VERSION, "api": "es-dialect-1"},
        "elasticsearch": {"version": es["version"], "flavor": es["flavor"], "modules": es["modules"]},
        "capabilities": {
            **es["capabilities"],
            "retrieval_modes": ["bm25", "dense", "hybrid"] if runtime.embedder else ["bm25"],
            "hops": list(HOPS),
            "embedder": runtime.embedder.model_id if runtime.embedder else None,
            "strategies": sorted(STRATEGIES),
            "streaming": True,
            "passages_index": state.settings.passages_alias,
        },
    }
    return OrjsonResponse(body)


class Front:
    def __init__(self, app: ASGIApp, state: ApiState, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.state = state
        self._routes = routes
        self._leaves: list[BaseRoute] | None = None
        self._prefixes: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
        self._own_paths: dict[tuple[str, str], bool] = {}
        self.forwarder = Forwarder(state.settings)
        protected = WithAttached(PrefixIndices(state.settings.index_prefix), self._attached)
        self.managed = ManagedIndices(protected, EsResolver(self._resolve))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._closing(send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._own(scope):
            await self.app(self._own_scope(scope), receive, _product(send))
            return
        started = time.perf_counter()
        status = 500
        try:
            status = await self._proxy(scope, receive, send)
        finally:
            self.state.metrics.request(scope["method"], "proxy", status, time.perf_counter() - started)

    def _own(self, scope: Scope) -> bool:
        """Whether hopsearch answers ``scope``'s path (any method): a route matches it, or it lies under
        one of hopsearch's prefixes; remembered per path (the same few paths come again and again:
        matching every route costs more than the rest of a ``_retrieve``'s routing), up to
        :data:`OWN_CACHE` paths."""
        key = (scope["path"], scope.get("root_path", ""))
        own = self._own_paths.get(key)
        if own is None:
            if self._leaves is None:  # every route is registered before the first request
                self._leaves = leaf_routes(self._routes)
                self._prefixes = own_prefixes(self._leaves)
            own = any(route.matches(scope)[0] != Match.NONE for route in self._leaves) or under_prefixes(
                _route_path(scope), *self._prefixes
            )
            if len(self._own_paths) >= OWN_CACHE:
                self._own_paths.clear()
            self._own_paths[key] = own
        return own

    def _own_scope(self, scope: Scope) -> Scope:
        """Return ``scope`` as the service reads it: a key in ``X-Hopsearch-Key`` is the one the gate checks
        (``Authorization`` is then ES's); a body sent as ``application/octet-stream`` or untyped (the 7.x async
        client) is JSON, as the cluster reads it."""
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        key = next((value for name, value in headers if name == KEY_HEADER), None)
        kind = next((value for name, value in headers if name == b"content-type"), None)
        untyped = kind is None or kind.startswith(b"application/octet-stream")
        if key is None and not untyped:
            return scope
        kept = [(n, v) for n, v in headers if n not in (KEY_HEADER, b"content-type")]
        if key is not None:
            kept = [(n, v) for n, v in kept if n != b"authorization"] + [(b"authorization", b"ApiKey " + key.strip())]
        kept.append((b"content-type", b"application/json" if untyped else kind or b""))
        return {**scope, "headers": kept}

    async def _proxy(self, scope: Scope, receive: Receive, send: Send) -> int:
        try:
            headers = dict(scope["headers"])
            key = headers.get(KEY_HEADER)
            refuse_query_credentials(self.state, scope.get("query_string", b""))
            credential = b"ApiKey " + key.strip() if key is not None else headers.get(b"authorization")
            caller = await authenticate(self.state, scope, credential) or caller_of(scope)
            # with keys on and no X-Hopsearch-Key, Authorization was hopsearch's credential: never passed on
            on = await authentication_on(self.state)
            authenticated_with = headers.get(b"authorization") if key is None and on else None
            if not caller.admin and not caller.may("search"):
                why = f"the API key [{caller.key}] may not search indices through the proxy (it lacks [search])"
                raise refused(self.state, "action_refused", AuthorizationError(why), caller)
            # the path as the caller sent it: every check, and the cluster, see the same segments
            request = parse_request(scope["method"], scope.get("raw_path") or quote(scope["path"]).encode())
            self.forwarder.check(request)
            body = None
            if not caller.admin:
                body = await read_body(receive, self.state.settings.api_max_body_bytes)
                call = ProxiedCall(request, scope.get("query_string", b""), headers, body)
                try:
                    await self.managed.check(call, caller)
                except AuthorizationError:
                    self.state.metrics.audit("proxy_refused")
                    raise
            runtime = await self.state.runtime()
            upstream = upstream_headers(scope, self.state.keys, runtime.store.info.major, authenticated_with)
            return await self.forwarder.forward(scope, receive, send, request, upstream, body)
        except HopsearchError as exc:
            extra = {"WWW-Authenticate": 'ApiKey, Bearer realm="hopsearch"'} if exc.status == 401 else None
            extra = retry_headers(exc, self.state.settings) or extra
            response = error_response(exc, self.state.redact, extra)
            response.headers.append("X-Elastic-Product", "Elasticsearch")
            await response(scope, receive, send)
            return response.status_code

    async def _attached(self) -> list[str]:
        runtime = await self.state.runtime()
        return [attachment.index for attachment in await runtime.store.attachments()]

    async def _resolve(self, expression: str) -> dict[str, Any]:
        runtime = await self.state.runtime()
        return await runtime.store.resolve_index(expression)

    def _closing(self, send: Send) -> Send:
        async def closing(message: Message) -> None:
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                await self.forwarder.close()
            await send(message)

        return closing


async def read_body(receive: Receive, limit: int) -> bytes:
    """Return the request's whole body, refused (413) as soon as it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    seen = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        seen += len(chunk)
        if seen > limit:
            raise RequestTooLarge(f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def own_prefixes(routes: Sequence[BaseRoute]) -> tuple[frozenset[str], frozenset[str]]:
    """hopsearch's first segments (``_ui``, ``_traces``, ``retrieve``, the ``_mcp`` mount, ...) and the
    endpoints it serves after an index (``_retrieve``, ``_ask``), read from the routes themselves."""
    firsts, endpoints = set(RESERVED), set()
    for route in routes:
        segments = [s for s in str(getattr(route, "path", "")).split("/") if s]
        if not segments:
            continue
        if not segments[0].startswith("{"):
            firsts.add(segments[0])
        elif len(segments) > 1 and not segments[1].startswith("{"):
            endpoints.add(segments[1])
    return frozenset(firsts), frozenset(endpoints)


def under_prefixes(path: str, firsts: frozenset[str], endpoints: frozenset[str]) -> bool:
    """Whether the decoded ``path`` lies under one of hopsearch's prefixes (empty segments skipped, as
    a lenient router would skip them; an endpoint counts in the first place too: ``/_retrieve``)."""
    segments = [s for s in path.split("/") if s]
    if not segments:
        return False
    return segments[0] in firsts or segments[0] in endpoints or (len(segments) > 1 and segments[1] in endpoints)


def _route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _product(send: Send) -> Send:
    async def with_product(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers: list[Any] = list(message.get("headers", []))
            if not any(name.lower() == PRODUCT[0] for name, _ in headers):
                headers.append(PRODUCT)
            message = {**message, "headers": headers}
        await send(message)

    return with_product
