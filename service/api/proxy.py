"""Requests that are not hopsearch's own, passed on to Elasticsearch unchanged and streamed both ways.

- Allow-list: ``proxy_allow`` holds ``METHOD /path`` patterns (``*`` one path segment, ``**`` any
  rest); anything else is refused with 403 in Elasticsearch's envelope (``security_exception``).
- Credentials: the caller's own ``Authorization`` header goes through; the service's Elasticsearch
  credentials never do (the proxy has none). A hopsearch API key is not an Elasticsearch credential: an
  ``Authorization`` header that carries one is dropped, as is ``X-Hopsearch-Key``.
- Status, body and headers (``X-Elastic-Product`` included) come back as the node sent them; only the
  hop-by-hop headers are dropped. The 8.x clients' ``compatible-with=8`` media types become plain JSON
  for a 7.x node (which refuses them).
- Several ``es_url``: the next is tried when one refuses the connection before the body was sent.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import httpx
from starlette.types import Message, Receive, Scope, Send

from hopsearch.service.errors import AuthorizationError, StoreUnavailable
from hopsearch.service.esclient import _verify
from hopsearch.service.settings import Settings

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
_COMPAT = re.compile(rb"application/vnd\.elasticsearch\+(json|x-ndjson)\s*;\s*compatible-with=\d+")


def _pattern(text: str) -> re.Pattern[str]:
    method, _, path = text.strip().partition(" ")
    parts = []
    for piece in re.split(r"(\*\*|\*)", path.strip()):
        parts.append(".*" if piece == "**" else "[^/]*" if piece == "*" else re.escape(piece))
    return re.compile(rf"^{re.escape(method.upper())} {''.join(parts)}$")


@dataclass(frozen=True, slots=True)
class AllowList:
    """Which proxied requests may pass (``METHOD /path``, the query string not counted)."""

    patterns: tuple[re.Pattern[str], ...]

    @classmethod
    def of(cls, patterns: Sequence[str]) -> AllowList:
        return cls(tuple(_pattern(p) for p in patterns if p.strip()))

    def allows(self, method: str, path: str) -> bool:
        line = f"{method.upper()} {path}"
        return any(p.match(line) for p in self.patterns)


def is_key(token: bytes, keys: Sequence[bytes]) -> bool:
    accepted = False
    for key in keys:
        accepted |= hmac.compare_digest(token, key)
    return accepted


def bearer_token(header: bytes) -> bytes | None:
    """The token of an ``ApiKey``/``Bearer`` Authorization header (the schemes hopsearch keys use)."""
    scheme, _, token = header.partition(b" ")
    return token.strip() if scheme.lower() in (b"apikey", b"bearer") else None


def upstream_headers(scope: Scope, keys: Sequence[bytes], node_major: int) -> list[tuple[bytes, bytes]]:
    """The caller's headers as they go to Elasticsearch."""
    out = []
    for name, value in scope["headers"]:
        lowered = name.lower()
        if lowered in HOP_BY_HOP or lowered == KEY_HEADER:
            continue
        if lowered == b"authorization":
            token = bearer_token(value)
            if token is not None and is_key(token, keys):
                continue  # a hopsearch key is not an Elasticsearch credential
        if lowered in (b"accept", b"content-type") and node_major < 8:
            value = _COMPAT.sub(lambda m: b"application/" + m.group(1), value)
        out.append((lowered, value))
    return out


class Forwarder:
    """Streams one request to Elasticsearch and its answer back to the caller."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.allow = AllowList.of(settings.proxy_allow)
        self.urls = [str(httpx.URL(u).copy_with(username=None, password=None)).rstrip("/") for u in settings.es_url]
        self._client: httpx.AsyncClient | None = None

    def check(self, method: str, path: str) -> None:
        if not self.allow.allows(method, path):
            raise AuthorizationError(
                f"action [{method} {path}] is not allowed through hopsearch (not in proxy_allow)",
                details={"index": path.strip("/").split("/")[0] or None},
            )

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            timeout = httpx.Timeout(self.settings.es_request_timeout, connect=10.0)
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
            self._client = httpx.AsyncClient(verify=_verify(self.settings), timeout=timeout, limits=limits)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def forward(self, scope: Scope, receive: Receive, send: Send, headers: list[tuple[bytes, bytes]]) -> int:
        """Send the request on; stream the answer back. Returns the status sent to the caller."""
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
        target = scope.get("raw_path") or scope["path"].encode()
        method = scope["method"]
        has_body = any(name == b"content-length" and value != b"0" for name, value in headers) or any(
            name == b"transfer-encoding" for name, _ in scope["headers"]
        )
        last: Exception | None = None
        for base in self.urls:
            url = base + target.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")
            request = self.client().build_request(method, url, headers=headers, content=body() if has_body else None)
            try:
                response = await self.client().send(request, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                last = exc
                if started:
                    break
                continue
            except httpx.HTTPError as exc:
                raise StoreUnavailable(f"Elasticsearch did not answer: {type(exc).__name__}") from exc
            try:
                out = [(k.lower(), v) for k, v in response.headers.raw if k.lower() not in HOP_BY_HOP]
                await send({"type": "http.response.start", "status": response.status_code, "headers": out})
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                await response.aclose()
            return response.status_code
        raise StoreUnavailable(f"no Elasticsearch node reachable: {type(last).__name__}") from last
