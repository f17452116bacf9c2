"""The ASGI app: routes, the gate (API keys, body limit, metrics), ES-style errors, OpenAPI.

Every error is an Elasticsearch-style envelope — unknown routes (404), wrong methods (405),
validation failures (400, naming the field) included. The OpenAPI document is at ``/_openapi.json``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from hopsearch.service.api.dify import routes as dify
from hopsearch.service.api.es import ask, keys, routes, ui
from hopsearch.service.api.mcp import tools as mcp_tools
from hopsearch.service.api.middleware.fast_retrieve import FastRetrieve
from hopsearch.service.api.middleware.gate import OPEN_PATHS, Gate
from hopsearch.service.api.middleware.mcp_path import MOUNT, McpPath, McpPostOnly
from hopsearch.service.api.models import ErrorEnvelope
from hopsearch.service.api.openai import chat as openai_chat
from hopsearch.service.api.openai.models import OpenAIErrorEnvelope
from hopsearch.service.api.proxy import front
from hopsearch.service.api.responses import (
    OrjsonResponse,
    error_body,
    error_renderer,
    is_dify,
    is_openai,
    limit_message,
    openai_error,
    retry_headers,
)
from hopsearch.service.api.searchr1 import routes as searchr1
from hopsearch.service.api.state import VERSION, ApiState
from hopsearch.service.api.stopping import stop_on_signals
from hopsearch.service.app.runtime import STRATEGIES, Runtime
from hopsearch.service.config.settings import Settings, load_settings
from hopsearch.service.errors import HopsearchError, InputError, MethodNotAllowed, NotFound, RequestInvalid

log = logging.getLogger(__name__)
OPENAPI_PATH = "/_openapi.json"
ERROR_STATUSES = {
    "400": "Invalid request (the field is named)",
    "401": "Missing API key, an expired key, a refused end-user token",
    "403": "API key not accepted or revoked, or the key's actions or index patterns do not cover the request",
    "404": "No such index, route, trace or outline",
    "405": "Method not allowed",
    "408": "The request body did not arrive in time",
    "413": "Body over the limit",
    "429": "Too many questions at once, or over the key's limits (see Retry-After)",
    "500": "Internal error",
    "502": "Elasticsearch or the LLM failed",
    "503": "Elasticsearch or the LLM unreachable",
    "504": "Deadline passed",
}

#: Dify's error shape on ``/retrieval`` (:func:`~hopsearch.service.api.responses.dify_error_response`).
DIFY_ERROR_ENVELOPE = {
    "type": "object",
    "title": "DifyErrorEnvelope",
    "properties": {"error_code": {"type": "integer"}, "error_msg": {"type": "string"}},
    "required": ["error_code", "error_msg"],
}


def create_app(settings: Settings, *, runtime: Runtime | None = None) -> FastAPI:
    """Return the app over ``settings``; a given ``runtime`` is used (and not closed) instead of opening one."""
    state = ApiState(settings, runtime)
    tools = mcp_tools.build_server(state)
    mcp_app = tools.streamable_http_app(
        streamable_http_path="/", stateless_http=True, json_response=True, host=settings.api_host
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            await state.runtime()
        except HopsearchError as exc:
            log.warning("Elasticsearch not reachable yet (%s); connecting on first request", exc.error_type)
        await _say_whether_open(state)
        try:
            with stop_on_signals(state):
                async with tools.session_manager.run():  # the MCP tools at /_mcp
                    yield
        finally:
            await state.close()

    app = FastAPI(
        title="hopsearch",
        version=VERSION,
        description="Multi-hop question answering over Elasticsearch, in Elasticsearch's dialect.",
        openapi_url=OPENAPI_PATH,
        docs_url=None,
        redoc_url=None,
        default_response_class=OrjsonResponse,
        lifespan=lifespan,
    )
    app.state.api = state
    app.include_router(front.router)
    app.include_router(routes.router)
    app.include_router(ask.router)
    app.include_router(searchr1.router)
    app.include_router(dify.router)
    app.include_router(openai_chat.router)
    app.include_router(ui.router)
    app.include_router(keys.router)
    app.mount(MOUNT, McpPostOnly(mcp_app, state))
    _install_handlers(app, state)
    app.add_middleware(FastRetrieve, state=state, routes=app.router.routes)  # inside the gate
    app.add_middleware(Gate, state=state, routes=app.router.routes)
    app.add_middleware(front.Front, state=state, routes=app.router.routes)
    app.add_middleware(McpPath)  # outermost: /_mcp is /_mcp/, never a 307
    app.openapi = lambda: _openapi(app, settings)  # type: ignore[method-assign]
    return app


async def _say_whether_open(state: ApiState) -> None:
    """Warn at start where no request will need a key: no flat key, no IdP and no key stored in
    ``<prefix>-keys`` (what the gate decides on, :func:`~.middleware.gate.open_service_check`)."""
    settings = state.settings
    if settings.api_keys or settings.idp_issuer:
        return
    index = settings.keys_index
    try:
        stored = await (await state.key_store()).any_keys()
    except HopsearchError:
        log.warning(
            "no API keys configured (HOPSEARCH_API_KEYS) and [%s] could not be read yet: while it holds none, "
            "authentication is off and only loopback Host names are served",
            index,
        )
        return
    if stored:
        log.info("API keys are stored in [%s]: every request needs a key", index)
        return
    log.warning(
        "no API keys: none configured (HOPSEARCH_API_KEYS) and none stored in [%s] (hopsearch keys create): "
        "authentication is off and only loopback Host names are served",
        index,
    )


def app_from_settings() -> FastAPI:
    """Return the app over the settings of the environment: the factory each ``hopsearch serve --workers N``
    process builds its own app with (nothing is shared between them but Elasticsearch)."""
    return create_app(load_settings())


def _install_handlers(app: FastAPI, state: ApiState) -> None:
    def render(request: Request, error: HopsearchError, headers: Mapping[str, str] | None = None) -> Response:
        """Elasticsearch's error shape; OpenAI's under ``/v1``; Dify's on ``/retrieval``."""
        return error_renderer(request.url.path)(error, state.redact, headers)

    async def hopsearch_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HopsearchError)
        return render(request, exc, retry_headers(exc, state.settings))

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first: dict[str, Any] = dict(exc.errors()[0]) if exc.errors() else {}
        field = ".".join(str(part) for part in first.get("loc", ()))
        limits = {"body.k": "api_max_k", "body.options.k": "api_max_k", "body.size": "api_max_k"}
        if first.get("type") == "json_invalid":
            error: HopsearchError = InputError(f"request body is not valid JSON: {first.get('ctx', {}).get('error')}")
        elif first.get("type") == "less_than_equal" and field in limits:  # the schema's bound is not the limit
            error = RequestInvalid(limit_message(state.settings, limits[field]), field=field)
        else:
            error = RequestInvalid(str(first.get("msg", "invalid request")), field=field or None)
        return render(request, error)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if isinstance(exc.__cause__, HopsearchError):
            return render(request, exc.__cause__)
        where = f"uri [{request.url.path}] and method [{request.method}]"
        if exc.status_code == 404:
            return render(request, NotFound(f"no handler found for {where}"))
        if exc.status_code == 405:
            allow = (exc.headers or {}).get("Allow", "")
            error = MethodNotAllowed(f"incorrect HTTP method for {where}, allowed: [{allow}]")
            return render(request, error, {"Allow": allow} if allow else None)
        reason = state.redact(str(exc.detail))
        if is_dify(request.url.path):
            return OrjsonResponse({"error_code": exc.status_code, "error_msg": reason}, status_code=exc.status_code)
        if is_openai(request.url.path):
            body = openai_error(reason, exc.status_code, "http_exception")
        else:
            body = error_body("http_exception", reason, exc.status_code)
        return OrjsonResponse(body, status_code=exc.status_code, headers=exc.headers)

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.error("unhandled error on %s %s: %s", request.method, request.url.path, type(exc).__name__)
        internal = HopsearchError("internal error; see the service log")
        internal.error_type = "exception"
        return render(request, internal)

    app.add_exception_handler(HopsearchError, hopsearch_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


def _openapi(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """FastAPI's document with ES-style error responses, API-key security and the configured limits."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    from fastapi.openapi.utils import get_openapi

    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for model in (ErrorEnvelope, OpenAIErrorEnvelope):  # OpenAI's shape under /v1
        envelope = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(envelope.pop("$defs", {}))
        schemas[model.__name__] = envelope
    components["securitySchemes"] = {
        "ApiKey": {"type": "apiKey", "in": "header", "name": "Authorization", "description": "`ApiKey <key>`"},
        "Bearer": {"type": "http", "scheme": "bearer"},
    }
    schemas["DifyErrorEnvelope"] = DIFY_ERROR_ENVELOPE
    for path, operations in doc.get("paths", {}).items():
        name = "DifyErrorEnvelope" if is_dify(path) else "OpenAIErrorEnvelope" if is_openai(path) else "ErrorEnvelope"
        ref = {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            for response in responses.values():  # FastAPI adds "type": "string" beside a model's $ref
                for media in response.get("content", {}).values():
                    if "$ref" in media.get("schema", {}):
                        media["schema"].pop("type", None)
            for status, text in ERROR_STATUSES.items():
                if status not in responses:
                    responses[status] = {"description": text, "content": ref}
            if path not in OPEN_PATHS:  # flat or stored keys (these may be made at any time)
                operation["security"] = [{"ApiKey": []}, {"Bearer": []}]
    for name, field, bound in (
        ("RetrieveRequest", "k", settings.api_max_k),
        ("RetrieveRequest", "query", settings.api_max_question_chars),
        ("AskRequest", "question", settings.api_max_question_chars),
        ("AskOptionsModel", "k", settings.api_max_k),
        ("OutlineSearchRequest", "size", settings.api_max_k),
    ):
        prop = schemas.get(name, {}).get("properties", {}).get(field)
        if prop is not None:
            prop["maximum" if "maximum" in prop else "maxLength"] = bound
    strategy = schemas.get("AskRequest", {}).get("properties", {}).get("strategy")
    if strategy is not None:
        strategy["enum"] = sorted(STRATEGIES)
    app.openapi_schema = doc
    return doc
