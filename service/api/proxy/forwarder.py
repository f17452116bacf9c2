"""Requests that are not hopsearch's own, passed on to Elasticsearch and streamed both ways.

- The path: checked and parsed first (:func:`~hopsearch.service.api.proxy.espath.parse_request`: no dot or
  empty segments, no encoded separators, 400 otherwise); every decision below is made on those
  segments, and the cluster is sent the path built from them (:attr:`EsRequest.target`), never the raw one.
- Allow-list: ``proxy_allow`` holds ``METHOD /path`` patterns matched against the decoded segments
  (``*`` within one segment, ``**`` any rest, ``{index}`` one segment that is an index expression and
  not an endpoint such as ``_cluster``; ``GET|POST`` for several methods); anything else is refused
  with 403 in Elasticsearch's envelope (``security_exception``). It is one :class:`ProxyPolicy`, on
  the path alone, for every caller; the policy on the indices a non-admin's request names
  (:mod:`~hopsearch.service.api.proxy.managed`) reads the body too and comes after it.
- Credentials: the caller's own ``Authorization`` header goes through; the service's Elasticsearch
  credentials never do (the proxy has none). A hopsearch credential is not an Elasticsearch one:
  ``X-Hopsearch-Key`` is dropped, and so is an ``Authorization`` (or ``es-secondary-authorization``)
  header that carries a hopsearch key in any spelling (``ApiKey``/``Bearer``, any case, any
  whitespace) or that is the very credential hopsearch authenticated the request with (a stored key,
  an end-user token sent as ``Bearer``).
- Status, body and headers (``X-Elastic-Product`` included) come back as the node sent them; only the
  hop-by-hop headers are dropped. The 8.x clients' ``compatible-with=8`` media types become plain JSON
  for a 7.x node (which refuses them).
- Compression: the caller's ``Accept-Encoding`` goes to the node as sent, and none when it sent none
  (the HTTP client adds no default of its own), so the node compresses only for a caller that asked;
  an answer in an encoding the caller did not accept is decoded on the way.
- Several ``es_url``: the next is tried when one refuses the connection before the body was sent.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import httpx
from starlette.types import Message, Receive, Scope, Send

from hopsearch.service.api.proxy.espath import EsRequest
from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import AuthorizationError, ConfigError, StoreUnavailable
from hopsearch.service.store.esclient import _verify

#: Hop-by-hop headers (RFC 9110 §7.6.1) and those the proxy sets itself.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"host",
    }
)
KEY_HEADER = b"x-hopsearch-key"
#: Headers Elasticsearch reads credentials from (``es-secondary-authorization``: a second user some
#: APIs run as).
#: How a stored key's secret begins (:data:`hopsearch.service.auth.keys.SECRET_PREFIX`).
STORED_KEY_PREFIX = b"hs_"
CREDENTIAL_HEADERS = frozenset({b"authorization", b"es-secondary-authorization"})
_WORDS = re.compile(rb"[\s,]+")
_COMPAT = re.compile(rb"application/vnd\.elasticsearch\+(json|x-ndjson)\s*;\s*compatible-with=\d+")
#: ``{index}`` in a pattern: one segment of index names (``a``, ``a,b``, ``logs-*``, ``_all``), never an
#: endpoint (``_cluster``, ``_nodes``: Elasticsearch's endpoints start with ``_``, its index names never).
_INDEX_PART = r"(?:_all|[^_/,][^/,]*)"
_TOKENS = re.compile(r"(\*\*|\*|\{index\})")
_METHOD = re.compile(r"^[A-Z]+(\|[A-Z]+)*$")


def _pattern(text: str) -> re.Pattern[str]:
    method, _, path = text.strip().partition(" ")
    method, path = method.upper(), path.strip()
    if not _METHOD.match(method) or not path.startswith("/"):
        raise ConfigError(f"proxy_allow pattern {text!r} is not `METHOD /path` (say `GET /{{index}}/_search`)")
    parts = []
    for piece in _TOKENS.split(path):
        if piece == "**":
            parts.append(".*")
        elif piece == "*":
            parts.append("[^/]*")
        elif piece == "{index}":
            parts.append(f"{_INDEX_PART}(?:,{_INDEX_PART})*")
        else:
            parts.append(re.escape(piece))
    methods = "|".join(re.escape(m) for m in method.split("|"))
    return re.compile(rf"^(?:{methods}) {''.join(parts)}$")


class ProxyPolicy(Protocol):
    """One decision on a proxied request, made on its checked path before anything reaches the cluster;
    raises an :class:`~hopsearch.service.errors.ApiError` to refuse. The allow-list is one; the policy on
    the indices a request names, which needs the caller, the query string and the body too, is
    :class:`~hopsearch.service.api.proxy.managed.ManagedIndices` (the front calls it after these)."""

    def check(self, request: EsRequest) -> None: ...


@dataclass(frozen=True, slots=True)
class AllowList:
    """Which proxied requests may pass (``METHOD /path`` on the decoded segments, the query string not counted)."""

    patterns: tuple[re.Pattern[str], ...]

    @classmethod
    def of(cls, patterns: Sequence[str]) -> AllowList:
        return cls(tuple(_pattern(p) for p in patterns if p.strip()))

    def allows(self, request: EsRequest) -> bool:
        line = f"{request.method} {request.path}"
        return any(p.match(line) for p in self.patterns)

    def check(self, request: EsRequest) -> None:
        if not self.allows(request):
            raise AuthorizationError(
                f"action [{request.method} {request.path}] is not allowed through hopsearch (not in proxy_allow)",
                details={"index": request.index},
            )


def is_key(token: bytes, keys: Sequence[bytes]) -> bool:
    accepted = False
    for key in keys:
        accepted |= hmac.compare_digest(token, key)
    return accepted


def bearer_token(header: bytes) -> bytes | None:
    """Return the token of an ``ApiKey``/``Bearer`` Authorization header (the schemes hopsearch keys use),
    split on any whitespace as a lenient server would split it."""
    parts = header.split(None, 1)
    return parts[1].strip() if len(parts) == 2 and parts[0].lower() in (b"apikey", b"bearer") else None


def carries_key(header: bytes, keys: Sequence[bytes]) -> bool:
    """Whether a credentials header holds a hopsearch key: a flat key or a stored key's secret (``hs_…``),
    as its token or as any word of it."""
    token = bearer_token(header)
    words = [token] if token is not None else []
    candidates = [word for word in [*words, *_WORDS.split(header)] if word]
    return any(is_key(word, keys) or word.startswith(STORED_KEY_PREFIX) for word in candidates)


def upstream_headers(
    scope: Scope, keys: Sequence[bytes], node_major: int, authenticated_with: bytes | None = None
) -> list[tuple[bytes, bytes]]:
    """Return the caller's headers as they go to Elasticsearch; ``authenticated_with`` is the ``Authorization``
    value hopsearch authenticated the request with (None when that was ``X-Hopsearch-Key``, or nothing)."""
    out = []
    for name, value in scope["headers"]:
        lowered = name.lower()
        if lowered in HOP_BY_HOP or lowered == KEY_HEADER:
            continue
        if lowered in CREDENTIAL_HEADERS and (value == authenticated_with or carries_key(value, keys)):
            continue  # a hopsearch credential is not an Elasticsearch one
        if lowered in (b"accept", b"content-type") and node_major < 8:
            value = _COMPAT.sub(lambda m: b"application/" + m.group(1), value)
        out.append((lowered, value))
    return out


def accepts(accept_encoding: bytes | None, content_encoding: bytes) -> bool:
    """Whether a caller that sent ``accept_encoding`` (``None``: no header) takes a body in
    ``content_encoding`` (RFC 9110 §12.5.3: ``q=0`` refuses, ``*`` stands for any other coding)."""
    wanted: dict[bytes, float] = {}
    for item in (accept_encoding or b"").split(b","):
        coding, _, params = item.strip().partition(b";")
        q = 1.0
        name, _, value = params.strip().partition(b"=")
        if name.strip().lower() == b"q":
            try:
                q = float(value.strip())
            except ValueError:
                q = 0.0
        if coding.strip():
            wanted[coding.strip().lower()] = q
    for coding in (c.strip().lower() for c in content_encoding.split(b",")):
        if coding in (b"", b"identity"):
            continue
        if wanted.get(coding, wanted.get(b"*", 0.0)) <= 0.0:
            return False
    return True


class Forwarder:
    """Streams one request to Elasticsearch and its answer back to the caller."""

    def __init__(self, settings: Settings, policies: Sequence[ProxyPolicy] = ()) -> None:
        self.settings = settings
        self.allow = AllowList.of(settings.proxy_allow)
        #: Every decision on a request, the allow-list first.
        self.policies: tuple[ProxyPolicy, ...] = (self.allow, *policies)
        self.urls = [str(httpx.URL(u).copy_with(username=None, password=None)).rstrip("/") for u in settings.es_url]
        self._client: httpx.AsyncClient | None = None

    def check(self, request: EsRequest) -> None:
        for policy in self.policies:
            policy.check(request)

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            timeout = httpx.Timeout(self.settings.es_request_timeout, connect=10.0)
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
            self._client = httpx.AsyncClient(verify=_verify(self.settings), timeout=timeout, limits=limits)
            # httpx's own defaults would stand in for headers the caller did not send: an
            # ``Accept-Encoding: gzip`` the caller never asked for came back as a gzip body it could not read.
            for name in ("accept", "accept-encoding", "user-agent"):
                del self._client.headers[name]
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        request: EsRequest,
        headers: list[tuple[bytes, bytes]],
        body_read: bytes | None = None,
    ) -> int:
        """Send ``request`` on (its checked :attr:`~EsRequest.target`, the caller's query string and
        body: streamed from ``receive``, or ``body_read`` when a policy read it whole already); stream the
        answer back. Returns the status sent to the caller."""
        started = False

        async def body() -> AsyncIterator[bytes]:
            nonlocal started
            started = True
            while True:
                message: Message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                if chunk:
                    yield chunk
                if not message.get("more_body", False):
                    return

        query = scope.get("query_string", b"")
        target = request.target
        accept_encoding = next((value for name, value in headers if name == b"accept-encoding"), None)
        has_body = any(name == b"content-length" and value != b"0" for name, value in headers) or any(
            name == b"transfer-encoding" for name, _ in scope["headers"]
        )
        last: Exception | None = None
        for base in self.urls:
            url = base + target + (f"?{query.decode('latin-1')}" if query else "")
            content = (body_read or None) if body_read is not None else body() if has_body else None
            upstream = self.client().build_request(request.method, url, headers=headers, content=content)
            sent_path = upstream.url.raw_path.split(b"?", 1)[0]
            if not sent_path.endswith(target.encode()):  # the checked path, not one the URL parser rewrote
                raise AuthorizationError(f"path [{request.path}] would not reach Elasticsearch as it was checked")
            try:
                response = await self.client().send(upstream, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                last = exc
                if started:
                    break
                continue
            except httpx.HTTPError as exc:
                raise StoreUnavailable(f"Elasticsearch did not answer: {type(exc).__name__}") from exc
            try:
                await self._answer(response, accept_encoding, send)
            finally:
                await response.aclose()
            return response.status_code
        raise StoreUnavailable(f"no Elasticsearch node reachable: {type(last).__name__}") from last

    @staticmethod
    async def _answer(response: httpx.Response, accept_encoding: bytes | None, send: Send) -> None:
        """Send the node's answer as it came, or decoded when its encoding is one the caller did not accept."""
        encoding = response.headers.get("content-encoding", "").encode("latin-1")
        decode = bool(encoding) and not accepts(accept_encoding, encoding)
        dropped = HOP_BY_HOP | {b"content-encoding", b"content-length"} if decode else HOP_BY_HOP
        out = [(k.lower(), v) for k, v in response.headers.raw if k.lower() not in dropped]
        await send({"type": "http.response.start", "status": response.status_code, "headers": out})
        chunks = response.aiter_bytes() if decode else response.aiter_raw()
        async for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
