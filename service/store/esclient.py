"""Talk to Elasticsearch: read the server version once, pick the client, detect capabilities.

``elasticsearch7`` serves 7.x servers; ``elasticsearch`` 8.19.x serves 8.x and 9.x (9.x servers accept
its compatibility header). Both are driven with plain-dict ``body=`` requests, so one code path fits both.
Errors of either library are translated into :mod:`hopsearch.service.errors`.
"""

from __future__ import annotations

import base64
import logging
import ssl
import warnings
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import IndexMissing, StoreError, StoreUnavailable, VersionConflict
from hopsearch.service.types import DenseMethod

log = logging.getLogger(__name__)
T = TypeVar("T")
#: Answers the client retries on the next node of its pool (as it does connection errors and timeouts).
RETRY_ON_STATUS = (429, 502, 503, 504)


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What the cluster is and what it can do."""

    number: str
    modules: frozenset[str]
    flavor: str = "default"

    @property
    def major(self) -> int:
        return int(self.number.split(".")[0])

    @property
    def version(self) -> tuple[int, int]:
        major, minor = self.number.split(".")[:2]
        return int(major), int(minor)

    @property
    def analysis_common(self) -> bool:
        return "analysis-common" in self.modules

    @property
    def painless(self) -> bool:
        return "lang-painless" in self.modules

    @property
    def dense_vector(self) -> bool:
        return self.major >= 8 or any("vectors" in m for m in self.modules)

    @property
    def knn(self) -> bool:
        return self.version >= (8, 4)

    @property
    def dense_method(self) -> DenseMethod:
        """How dense retrieval runs here: ``knn``, ``script_score`` or ``rerank`` (client-side). The JSON
        key is ``vector_mode`` (capabilities, the index ``_meta``), as stored indices already have it."""
        if self.knn:
            return "knn"
        if self.dense_vector and self.painless:
            return "script_score"
        return "rerank"

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.number,
            "flavor": self.flavor,
            "modules": sorted(self.modules),
            "capabilities": {
                "analysis_common": self.analysis_common,
                "painless": self.painless,
                "dense_vector": self.dense_vector,
                "knn": self.knn,
                "vector_mode": self.dense_method,
            },
        }


def _auth_headers(settings: Settings) -> dict[str, str]:
    if settings.es_api_key is not None:
        return {"Authorization": f"ApiKey {settings.es_api_key.get_secret_value()}"}
    if settings.es_username and settings.es_password is not None:
        token = f"{settings.es_username}:{settings.es_password.get_secret_value()}".encode()
        return {"Authorization": f"Basic {base64.b64encode(token).decode()}"}
    return {}


def _verify(settings: Settings) -> ssl.SSLContext | bool:
    if not settings.es_verify_certs:
        return False
    if settings.es_ca_file is not None:
        return ssl.create_default_context(cafile=str(settings.es_ca_file))
    return True


async def probe(settings: Settings) -> ServerInfo:
    """Version and modules from ``GET _nodes/_local/plugins`` (``GET /`` where that is not allowed)."""
    last: Exception | None = None
    async with httpx.AsyncClient(
        headers=_auth_headers(settings), verify=_verify(settings), timeout=settings.es_request_timeout
    ) as http:
        for given in settings.es_url:
            # user:password@ in a URL goes into the auth header, never into logged URLs or messages.
            parsed = httpx.URL(given)
            auth = (parsed.username, parsed.password) if parsed.username else None
            url = str(parsed.copy_with(username=None, password=None)).rstrip("/")
            try:
                response = await http.get(
                    f"{url}/_nodes/_local/plugins",
                    params={"filter_path": "nodes.*.version,nodes.*.modules.name,nodes.*.plugins.name"},
                    auth=auth or httpx.USE_CLIENT_DEFAULT,
                )
                if response.status_code == 200:
                    nodes = list(response.json().get("nodes", {}).values())
                    if nodes:
                        node = nodes[0]
                        names = {m["name"] for m in node.get("modules", [])}
                        names |= {p["name"] for p in node.get("plugins", [])}
                        return ServerInfo(number=str(node["version"]), modules=frozenset(names))
                if response.status_code in (401, 403):
                    root = await http.get(f"{url}/", auth=auth or httpx.USE_CLIENT_DEFAULT)
                    if root.status_code == 200:
                        version = root.json()["version"]
                        return ServerInfo(
                            number=str(version["number"]),
                            modules=frozenset(),
                            flavor=str(version.get("build_flavor", "default")),
                        )
                    raise StoreError(f"Elasticsearch at {url} refused the credentials (HTTP {root.status_code})")
                last = StoreError(f"Elasticsearch at {url} answered HTTP {response.status_code}")
            except httpx.HTTPError as exc:
                last = exc
    where = ", ".join(str(httpx.URL(url).copy_with(username=None, password=None)) for url in settings.es_url)
    raise StoreUnavailable(f"Elasticsearch is not reachable at {where}: {last}") from last


def make_client(settings: Settings, info: ServerInfo) -> Any:
    """Return the async client of the library that matches the server's major version, over every URL of
    ``es_url`` (the library's node pool: a node that refuses or times out is marked dead for a while and
    the request retried on the next one, ``es_max_retries`` times; ``es_sniff`` adds the nodes the
    cluster reports). Retried writes are safe: loads, outlines and traces write by id."""
    # Bodies are plain dicts on purpose (one code path for both clients): silence that deprecation.
    warnings.filterwarnings("ignore", message="The 'body' parameter is deprecated", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message="Elasticsearch built-in security features are not enabled")
    kwargs: dict[str, Any] = {"verify_certs": settings.es_verify_certs}
    # A timeout is retried on another node only where there is one (the same busy node would time out again).
    several = len(settings.es_url) > 1 or settings.es_sniff
    if settings.es_ca_file is not None:
        kwargs["ca_certs"] = str(settings.es_ca_file)
    if settings.es_api_key is not None:
        kwargs["api_key"] = settings.es_api_key.get_secret_value()
    if info.major >= 8:
        from elasticsearch import AsyncElasticsearch

        if settings.es_username and settings.es_password is not None:
            kwargs["basic_auth"] = (settings.es_username, settings.es_password.get_secret_value())
        from elasticsearch.serializer import NdjsonSerializer, OrjsonSerializer

        class ReadyNdjsonSerializer(NdjsonSerializer):
            """Sends a ready NDJSON body (bytes ending in a newline) as it is; the library's own
            serializer copies a body twice (megabytes per loader batch)."""

            def dumps(self, data: Any) -> bytes:
                if isinstance(data, bytes) and data.endswith(b"\n"):
                    return data
                return super().dumps(data)

        # orjson parses bulk and _msearch answers several times faster than the standard library.
        if settings.es_sniff:
            kwargs |= {"sniff_on_start": True, "sniff_on_node_failure": True, "min_delay_between_sniffing": 60}
        return AsyncElasticsearch(
            list(settings.es_url),
            connections_per_node=settings.es_connections_per_node,
            request_timeout=settings.es_request_timeout,
            max_retries=settings.es_max_retries,
            retry_on_status=RETRY_ON_STATUS,
            retry_on_timeout=several,
            serializers={"application/json": OrjsonSerializer(), "application/x-ndjson": ReadyNdjsonSerializer()},
            **kwargs,
        )
    from elasticsearch7 import AsyncElasticsearch as AsyncElasticsearch7

    if settings.es_username and settings.es_password is not None:
        kwargs["http_auth"] = (settings.es_username, settings.es_password.get_secret_value())
    if settings.es_sniff:
        kwargs |= {"sniff_on_start": True, "sniff_on_connection_fail": True, "sniffer_timeout": 60}
    return AsyncElasticsearch7(
        list(settings.es_url),
        maxsize=settings.es_connections_per_node,
        timeout=settings.es_request_timeout,
        max_retries=settings.es_max_retries,
        retry_on_status=RETRY_ON_STATUS,
        retry_on_timeout=several,
        **kwargs,
    )


#: The 8.x client's compatibility media types (what its own API methods send for an NDJSON request).
_NDJSON_COMPAT = {
    "accept": "application/vnd.elasticsearch+json; compatible-with=8",
    "content-type": "application/vnd.elasticsearch+x-ndjson; compatible-with=8",
}


class NdjsonPoster:
    """``POST`` of a ready NDJSON body (``_msearch``) straight through the 8.x client's transport: its node
    pool, retries on the next node (the same ``es_max_retries``, statuses and timeouts as the client),
    sniffing and connections, without the API layer above it (argument handling, tracing spans, header
    rewriting, response wrapping), which measured 0.2 M of the 1.7 M instructions a ``_retrieve`` costs
    the service (callgrind; the transport and its aiohttp node cost what a bare aiohttp call does).
    A refusal raises the client's own error class for the status, so :func:`translate` gives the same
    :class:`~hopsearch.service.errors.StoreError` as before."""

    def __init__(self, client: Any, settings: Settings) -> None:
        self.transport = client.transport
        self.headers = client._headers.copy()  # the client's defaults: credentials, user agent
        self.headers.update(_NDJSON_COMPAT)
        self.options: dict[str, Any] = {
            "request_timeout": settings.es_request_timeout,
            "max_retries": settings.es_max_retries,
            "retry_on_status": RETRY_ON_STATUS,
            "retry_on_timeout": len(settings.es_url) > 1 or settings.es_sniff,
        }

    async def post(self, path: str, body: bytes, what: str) -> dict[str, Any]:
        with translated(what):
            meta, answer = await self.transport.perform_request(
                "POST", path, headers=self.headers, body=body, **self.options
            )
            if not 200 <= meta.status < 300:
                from elasticsearch.exceptions import HTTP_EXCEPTIONS, ApiError

                message: Any = str(answer)
                if isinstance(answer, dict):  # as the client words it: the error's type
                    error = answer.get("error", message)
                    message = error["type"] if isinstance(error, dict) and "type" in error else error
                raise HTTP_EXCEPTIONS.get(meta.status, ApiError)(message=message, meta=meta, body=answer)
        return answer if isinstance(answer, dict) else {}


def _status(exc: Exception) -> int | None:
    status = getattr(exc, "status_code", None)  # elasticsearch7
    if isinstance(status, int):
        return status
    meta = getattr(exc, "meta", None)  # elasticsearch 8
    status = getattr(meta, "status", None)
    return status if isinstance(status, int) else None


def error_reason(err: Any) -> str:
    """``type: reason`` of an Elasticsearch error, with the shard's own cause where the top level
    only says ``all shards failed`` (that cause names the bad value)."""
    if not isinstance(err, dict):
        return str(err)
    reason = f"{err.get('type')}: {err.get('reason')}"
    for shard in err.get("failed_shards") or []:
        cause = (shard.get("reason") or {}) if isinstance(shard, dict) else {}
        cause = cause.get("caused_by") or cause
        if isinstance(cause, dict) and cause.get("reason"):
            return f"{reason} ({cause.get('type')}: {cause.get('reason')})"
    return reason


def failed(what: str, reason: str) -> str:
    """Return the message of a refused request: what hopsearch was doing, in words (``what``: ``counting the
    documents of [x]``), and Elasticsearch's reason; never an operation's internal name."""
    return f"{what[:1].upper()}{what[1:]} failed: {reason}"


def translate(exc: Exception, what: str) -> StoreError:
    """Return an error of either client library as a hopsearch store error (no credentials in the text); ``what``
    says in words what was being done (``searching [x]``)."""
    import elasticsearch
    import elasticsearch7

    connection_errors: tuple[type[Exception], ...] = (
        elasticsearch.ConnectionError,
        elasticsearch.ConnectionTimeout,
        elasticsearch7.ConnectionError,
        elasticsearch7.ConnectionTimeout,
    )
    if isinstance(exc, connection_errors):
        timed_out = isinstance(exc, elasticsearch.ConnectionTimeout | elasticsearch7.ConnectionTimeout)
        return StoreUnavailable(
            f"Elasticsearch is unreachable ({type(exc).__name__}) while {what}",
            details={"timeout": True} if timed_out else None,
        )
    status = _status(exc)
    info = getattr(exc, "info", None) or getattr(exc, "body", None)
    reason = str(exc)
    if isinstance(info, dict) and isinstance(info.get("error"), dict):
        reason = error_reason(info["error"])
    if status == 404:
        return IndexMissing(failed(what, reason), details={"status": 404})
    if status == 409:
        return VersionConflict(failed(what, reason), details={"status": 409})
    error = StoreError(failed(what, reason), details={"status": status})
    if status is not None and 400 <= status < 500:
        error.status = 400 if status != 429 else 429
    return error


@contextmanager
def translated(what: str) -> Iterator[None]:
    """Errors of either client library raised inside become hopsearch store errors saying ``what`` was
    being done (a phrase in words: ``writing a batch of documents``); others pass."""
    try:
        yield
    except Exception as exc:
        if type(exc).__module__.startswith(("elasticsearch", "elastic_transport")):
            raise translate(exc, what) from exc
        raise


async def call(awaitable: Awaitable[T], what: str) -> T:
    """Await a client call, translating its library errors (``what``: what it does, in words)."""
    with translated(what):
        return await awaitable


def body_of(response: Any) -> dict[str, Any]:
    """Return the JSON body of a response of either client (8.x wraps it in ``ObjectApiResponse``)."""
    body = getattr(response, "body", response)
    return dict(body) if body is not None else {}
