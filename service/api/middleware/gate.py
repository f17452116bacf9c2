"""A pure ASGI middleware in front of every route: who asks, what it may do, the body-size limit, metrics.

- Credentials: ``Authorization: ApiKey <key>`` or ``Bearer <key>`` on every route but ``/_health`` and
  ``/_health/live`` (:func:`authenticate`): a flat ``HOPSEARCH_API_KEYS`` key (compared in constant time)
  is an admin; else a stored key (``<prefix>-keys``, found by the hash of its secret) makes its
  :meth:`~hopsearch.service.auth.records.KeyRecord.caller`, put under
  :data:`~hopsearch.service.api.state.CALLER_KEY` in the ASGI scope (every route reads it there); a
  ``Bearer`` JWT goes to the end-user token verifier (``state.tokens``). No header → 401, a key that is
  not accepted → 403, an expired key 401 and a revoked one 403, saying so. Credentials in a query string
  (``?api_key=``, ``?access_token=``) → 400, whatever else the request holds.
- Open service: with no flat key, no stored key and no token verifier, every request is an admin's, as
  long as its ``Host`` (and ``Origin``, where sent) is a loopback name — anything else is 403 (a page
  of another site reaching a local service through DNS rebinding).
- Scopes: a key's actions per route (:func:`route_action`; 403 naming the action), ``/_metrics`` and
  ``/_keys`` for admins only; its requests per minute, and its user's (an IdP user's, a back end's end
  user's: :func:`~hopsearch.service.api.limits.accounts_of`), 429 with ``Retry-After``. ``/v1`` (OpenAI's face)
  needs ``ask``; its refusals take OpenAI's error shape (:mod:`~hopsearch.service.api.openai.errors`).
- Body size: a ``Content-Length`` over the limit → 413 before the body is read; a chunked body is
  counted as it arrives and cut off with 413 as soon as it passes the limit. A body that has not all
  arrived within ``api_body_timeout_s`` of the headers → 408 (a client that sends headers and stalls
  holds no connection without end).
- Body depth: arrays and objects nested deeper than :data:`~hopsearch.service.api.json_depth.MAX_JSON_DEPTH`
  → 400 naming the field, before any parser or validator recurses into the body. The body is read
  here, whole, and given to the route again: a refusal raised while a route reads its body comes too
  late for a mounted app (the MCP tools answer 500 first).
- Metrics: one count and one latency observation per request, labelled with the route template (refused
  requests too); each refusal of credentials or scope is an audit event (a log line of
  ``hopsearch.audit`` and ``hopsearch_audit_events_total{event}``).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from urllib.parse import parse_qsl

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hopsearch.service.access import Caller
from hopsearch.service.api.json_depth import too_deep
from hopsearch.service.api.middleware.hosts import loopback_host, loopback_origin, only_one
from hopsearch.service.api.middleware.viewer import NOBODY, is_code_exchange, viewer_session
from hopsearch.service.api.responses import (
    CREDENTIAL_FORMAT,
    error_renderer,
    is_openai,
    openai_status,
    retry_headers,
)
from hopsearch.service.api.state import CALLER_KEY, CREDENTIAL_UNTIL_KEY, ApiState, caller_of
from hopsearch.service.auth.claims import expiry_of
from hopsearch.service.auth.keys import REFUSED_CREDENTIAL, key_refusal
from hopsearch.service.auth.records import KeyLimits, KeyRecord
from hopsearch.service.auth.user_header import header_user, vouched_caller
from hopsearch.service.errors import (
    ApiError,
    AuthenticationError,
    AuthorizationError,
    HopsearchError,
    RequestInvalid,
    RequestTimeout,
    RequestTooLarge,
    TooManyRequests,
)

audit = logging.getLogger("hopsearch.audit")
OPEN_PATHS = frozenset({"/_health", "/_health/live"})
_SCHEMES = (b"apikey ", b"bearer ")
#: Query parameters that carry credentials: never accepted (URLs end up in logs, histories, referrers).
QUERY_CREDENTIALS = frozenset({"api_key", "apikey", "access_token", "bearer", "id_token"})
_JWT = re.compile(rb"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")
#: Routes whose first segment says what they do (the rest: ``/{index}/_retrieve``, ``/{index}/_ask``).
_FIRST_ACTIONS = {
    "_keys": "admin",
    "_metrics": "admin",
    "_outlines": "outlines",
    "_traces": "traces",
    "retrieve": "search",
    "retrieval": "search",  # Dify's External Knowledge API
    "v1": "ask",  # OpenAI's face: chat completions and the models a key may ask
}
_ENDPOINT_ACTIONS = {"_retrieve": "search", "_ask": "ask"}


def route_action(path: str) -> str | None:
    """Return the action a route needs (``search``, ``ask``, ``outlines``, ``traces``, ``admin``); None for the
    routes any caller may use (``/``, the MCP mount, whose tools check their own)."""
    segments = [s for s in path.split("/") if s]
    if not segments:
        return None
    if segments[0] == "_ui":
        return "traces" if len(segments) > 1 and segments[1] == "traces" else None
    if segments[0] in _FIRST_ACTIONS:
        return _FIRST_ACTIONS[segments[0]]
    if len(segments) > 1 and segments[1] in _ENDPOINT_ACTIONS:
        return _ENDPOINT_ACTIONS[segments[1]]
    return None


def open_service_check(state: ApiState, headers: Sequence[tuple[bytes, bytes]]) -> None:
    """Refuse a request to an open service (no keys) unless it has one ``Host``, a loopback name read
    strictly (:mod:`~.hosts`), and at most one ``Origin``, loopback too."""
    hosts, host = only_one(headers, b"host")
    origins, origin = only_one(headers, b"origin")
    if hosts != 1 or origins > 1:
        which, what = ("Host", hosts) if hosts != 1 else ("Origin", origins)
        why = f"no API keys are configured, so this service answers loopback requests only; {what} {which} headers"
        raise refused(state, "host_refused", AuthorizationError(why + f" (one {which} is required)"))
    if not loopback_host(host) or (origin is not None and not loopback_origin(origin)):
        which = "Origin" if loopback_host(host) else "Host"
        shown = (origin if which == "Origin" else host) or b""
        why = (
            f"no API keys are configured, so this service answers loopback requests only; {which} "
            f"[{shown.decode('latin-1')[:100]}] is not a loopback name (configure keys to serve others)"
        )
        raise refused(state, "host_refused", AuthorizationError(why))


def refuse_query_credentials(state: ApiState, query_string: bytes) -> None:
    if not query_string:
        return
    names = {name.lower() for name, _ in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)}
    found = sorted(names & QUERY_CREDENTIALS)
    if found:
        why = f"credentials are never accepted in a query string ([{found[0]}]): send `Authorization: ApiKey <key>`"
        raise refused(state, "query_credentials", RequestInvalid(why, field=f"query.{found[0]}"))


def refused(state: ApiState, event: str, exc: HopsearchError, caller: Caller | None = None) -> HopsearchError:
    """``exc``, recorded as an audit event (a log line and a counter)."""
    state.metrics.audit(event)
    extra = {"event": event, "reason": str(exc)}
    if caller is not None:
        extra |= {"subject": caller.subject or "", "key": caller.key or "", "owner": caller.owner or ""}
    audit.info("request refused (%s): %s", event, exc, extra=extra)
    return exc


async def authentication_on(state: ApiState) -> bool:
    """Whether requests need credentials: a flat key, an IdP, or a stored key exists (back ends' tokens
    need a stored key to act for)."""
    if state.keys or state.settings.idp_issuer:
        return True
    return await (await state.key_store()).any_keys()


def _credential(header: bytes) -> tuple[bytes, bytes] | None:
    lowered = header[:7].lower()
    for scheme in _SCHEMES:
        if lowered.startswith(scheme):
            return scheme.strip(), header[len(scheme) :].strip()
    return None


async def authenticate(state: ApiState, scope: Mapping[str, object], header: bytes | None) -> Caller | None:
    """Return the caller of a request whose ``Authorization`` is ``header``: a stored key's or an end-user
    token's; None for an admin (a flat key, or an open loopback service), so a caller already in the scope
    (an embedding program's) stays. Raises the refusal, recorded as an audit event."""
    raw_headers = scope.get("headers")
    if not await authentication_on(state):
        open_service_check(state, raw_headers if isinstance(raw_headers, list) else [])
        return None
    if not header:
        why = "missing authentication credentials for REST request"
        if str(scope.get("path", "")).startswith("/_ui/"):
            why += "; a browser opens the viewer through a one-time URL: `hopsearch traces show ID --open`"
        raise refused(state, "auth_missing", AuthenticationError(why, details=dict(CREDENTIAL_FORMAT)))
    found = _credential(header)
    if found is None:
        why = "unsupported authentication scheme (use `ApiKey <key>` or `Bearer <key>`)"
        raise refused(state, "auth_scheme", AuthenticationError(why, details=dict(CREDENTIAL_FORMAT)))
    scheme, token = found
    accepted = False
    for key in state.keys:
        accepted |= hmac.compare_digest(token, key)
    if accepted:
        return None
    if scheme == b"bearer" and _JWT.match(token):
        if state.tokens is None:
            raise refused(state, "token_refused", AuthenticationError("end-user tokens are not configured"))
        try:
            caller = await state.tokens.verify(token.decode("ascii"))
        except (AuthenticationError, AuthorizationError) as exc:
            exc.details.update(REFUSED_CREDENTIAL)
            raise refused(state, "token_refused", exc) from None
        record = await (await state.key_store()).by_name(caller.key) if caller.key is not None else None
        _count(state, caller, record.limits if record is not None else None)
        return caller
    record = await (await state.key_store()).by_secret(token.decode("latin-1"))
    refusal = key_refusal(record, datetime.now(UTC))
    if refusal is not None:
        raise refused(state, *refusal)
    assert record is not None
    caller = await _key_caller(state, record, raw_headers if isinstance(raw_headers, list) else [])
    _count(state, caller, record.limits)
    return caller


async def _key_caller(state: ApiState, record: KeyRecord, headers: Sequence[tuple[bytes, bytes]]) -> Caller:
    """Return the caller a stored key makes: the key itself, or, on a key that vouches for its users by a header
    (:mod:`~hopsearch.service.auth.user_header`), the user that header names (refused without it); the
    header is read on no other key."""
    if record.user_header is None:
        return record.caller()
    try:
        user = header_user(record, headers)
    except AuthenticationError as exc:
        raise refused(state, "user_header_missing", exc) from None
    except RequestInvalid as exc:
        raise refused(state, "user_header_refused", exc) from None
    return vouched_caller(record, user, await (await state.groups()).groups_of(user))


def _count(state: ApiState, caller: Caller, limits: KeyLimits | None) -> None:
    """Count one request of ``caller`` in its accounts (its key's, with ``limits``; its owner's): the
    per-minute limits of keys and of users alike."""
    try:
        state.limiter.count(state.accounts(caller), limits)
    except TooManyRequests as exc:
        raise refused(state, "rate_limited", exc, caller) from None


def check_action(state: ApiState, caller: Caller, path: str) -> None:
    """403 where the route of ``path`` needs an action the caller's key lacks (admin routes: an admin)."""
    action = route_action(path)
    if action is None or caller.admin:
        return
    if action == "admin" or not caller.may(action):
        who = f"the API key [{caller.key}]" if caller.key else "this caller"
        allowed = ", ".join(sorted(caller.actions - {"admin"})) or "none"
        why = f"{who} may not use [{path}]: it needs the [{action}] action (the key's actions: {allowed})"
        if action == "admin":
            why = f"{who} may not use [{path}]: it is for admin keys only"
        raise refused(state, "action_refused", AuthorizationError(why), caller)


def leaf_routes(routes: Sequence[BaseRoute]) -> list[BaseRoute]:
    """Return the routes themselves, inside included routers (FastAPI wraps each in an object whose match
    says nothing of the route); a mount stays one route, labelled with its prefix."""
    leaves: list[BaseRoute] = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        leaves += leaf_routes(inner.routes) if inner is not None else [route]
    return leaves


def route_template(routes: Sequence[BaseRoute], scope: Scope) -> str:
    """Return the template of the route ``scope`` goes to (a refused request never reached the router, and
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
            refusal = await self._refuse(scope)
            if refusal is None:
                receive, refusal = await self._read_body(receive)
            if refusal is not None:
                openai = is_openai(scope["path"])
                unauthenticated = (openai_status(refusal) if openai else refusal.status) == 401
                headers = {"WWW-Authenticate": 'ApiKey, Bearer realm="hopsearch"'} if unauthenticated else None
                headers = retry_headers(refusal, self.state.settings) or headers
                render = error_renderer(scope["path"])
                await render(refusal, self.state.redact, headers)(scope, receive, send_status)
                return
            await self.app(scope, receive, send_status)
        finally:
            template = getattr(scope.get("route"), "path", None) or route_template(self._leaf_routes(), scope)
            self.state.metrics.request(scope["method"], template, status, time.perf_counter() - started)

    def _leaf_routes(self) -> list[BaseRoute]:
        if self._leaves is None:  # every route is registered before the first request
            self._leaves = leaf_routes(self._routes)
        return self._leaves

    async def _refuse(self, scope: Scope) -> HopsearchError | None:
        headers: dict[bytes, bytes] = dict(scope["headers"])
        try:
            refuse_query_credentials(self.state, scope.get("query_string", b""))
            if scope["path"] not in OPEN_PATHS:
                caller = await self._caller(scope, headers)
                if caller is not None:
                    scope[CALLER_KEY] = caller
                check_action(self.state, caller_of(scope), scope["path"])
            length = headers.get(b"content-length")
            if length is not None:
                limit = self.state.settings.api_max_body_bytes
                if not length.isdigit():
                    raise RequestInvalid("Content-Length is not a number", field="header.content-length")
                if int(length) > limit:
                    raise RequestTooLarge(f"request body of {int(length)} bytes is over the limit of {limit}")
        except ApiError as exc:
            return exc
        except HopsearchError as exc:  # the keys index unreachable: no caller can be told apart
            return exc
        return None

    async def _caller(self, scope: Scope, headers: Mapping[bytes, bytes]) -> Caller | None:
        """:func:`authenticate`'s caller; on the viewer's reads without ``Authorization``, its cookie's; on a
        one-time code's exchange, nobody (the route reads the code)."""
        session = viewer_session(scope, headers)
        if (session is not None or is_code_exchange(scope)) and await authentication_on(self.state):
            if session is None:
                return NOBODY
            try:
                caller, limits = await (await self.state.viewer_sessions()).caller(session)
            except (AuthenticationError, AuthorizationError) as exc:
                raise refused(self.state, "viewer_refused", exc) from None
            _count(self.state, caller, limits)
            return caller
        header = headers.get(b"authorization")
        made = await authenticate(self.state, scope, header)
        found = _credential(header) if made is not None and header else None
        if found is not None and found[0] == b"bearer" and _JWT.match(found[1]):
            scope[CREDENTIAL_UNTIL_KEY] = expiry_of(found[1].decode("ascii"))  # verified: its ``exp``
        return made

    async def _read_body(self, receive: Receive) -> tuple[Receive, ApiError | None]:
        """Return the body read whole (cut off past the size limit) and checked for depth; a ``receive`` that
        gives its messages again, then the connection's own."""
        limit = self.state.settings.api_max_body_bytes
        wait_s = self.state.settings.api_body_timeout_s
        messages: list[Message] = []
        chunks: list[bytes] = []
        seen = 0
        try:
            async with asyncio.timeout(wait_s):
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
        except TimeoutError:
            why = (
                f"the request body did not arrive within {wait_s:g} s ({seen} bytes came; HOPSEARCH_API_BODY_TIMEOUT_S)"
            )
            return receive, RequestTimeout(why)
        refused = too_deep(chunks[0] if len(chunks) == 1 else b"".join(chunks))

        async def replayed() -> Message:
            return messages.pop(0) if messages else await receive()

        return replayed, refused
