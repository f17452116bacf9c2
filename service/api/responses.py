"""Responses in Elasticsearch's dialect and OpenAI's: orjson bodies and error envelopes, redacted.

An error renders as ``{"error": {"root_cause": [{type, reason}], "type", "reason", ...}, "status"}``
with the HTTP status of the :class:`~hopsearch.service.errors.HopsearchError` subclass. Every reason
passes through a :class:`Redactor` first: configured secrets and URL user-info never leave the service.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
from starlette.responses import Response

from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import HopsearchError, StoreError

_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")
#: Details of an error that are safe (and useful) to show to a client.
_PUBLIC_DETAILS = ("field", "trace_id", "index")


class OrjsonResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS)
        except TypeError:  # text that is not valid Unicode (echoed from a URL): escape it
            return json.dumps(content, ensure_ascii=True, default=str).encode()


class Redactor:
    """Removes secret values and ``user:password@`` parts of URLs from text."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    @classmethod
    def for_settings(cls, settings: Settings) -> Redactor:
        values = [key.get_secret_value() for key in settings.api_keys]
        for secret in (
            settings.es_api_key,
            settings.es_password,
            settings.llm_api_key,
            settings.embed_api_key,
            settings.rerank_api_key,
        ):
            if secret is not None:
                values.append(secret.get_secret_value())
        return cls(values)

    def __call__(self, text: str) -> str:
        text = _USERINFO.sub("", text)
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "[redacted]")
        return text


def limit_message(settings: Settings, name: str) -> str:
    """``must be at most 100 (HOPSEARCH_API_MAX_K)``: the configured limit and where it is set."""
    return f"must be at most {getattr(settings, name)} (HOPSEARCH_{name.upper()})"


def status_of(exc: HopsearchError) -> int:
    """Return the HTTP status of an error; a store error Elasticsearch itself refused as a bad request
    (say, a filter value of the wrong type) keeps Elasticsearch's 4xx instead of becoming a 502."""
    if isinstance(exc, StoreError) and exc.status >= 500:
        upstream = exc.details.get("status")
        if isinstance(upstream, int) and 400 <= upstream < 500 and upstream != 404:
            return upstream
    return exc.status


def retry_headers(exc: HopsearchError, settings: Settings) -> dict[str, str] | None:
    """``Retry-After`` of a 429: the seconds the refusal named (a key's window), else ``api_retry_after_s``."""
    if status_of(exc) != 429:
        return None
    wait = exc.details.get("retry_after")
    return {"Retry-After": str(wait if isinstance(wait, int) else settings.api_retry_after_s)}


def error_body(error_type: str, reason: str, status: int, **extra: Any) -> dict[str, Any]:
    cause = {"type": error_type, "reason": reason}
    return {"error": {"root_cause": [cause], **cause, **extra}, "status": status}


def error_response(exc: HopsearchError, redact: Redactor, headers: Mapping[str, str] | None = None) -> OrjsonResponse:
    status = status_of(exc)
    extra = {key: exc.details[key] for key in _PUBLIC_DETAILS if exc.details.get(key) is not None}
    error_type = exc.error_type if status == exc.status else "search_phase_execution_exception"
    body = error_body(error_type, redact(str(exc)), status, **extra)
    return OrjsonResponse(body, status_code=status, headers=dict(headers or {}))


# OpenAI's error shape, for the routes under ``/v1``: ``{"error": {"message", "type",
# "param", "code"}}`` with the statuses the OpenAI SDKs map to their exceptions — 400 ``BadRequestError``,
# 401 ``AuthenticationError`` (no key, or a key or token that is not accepted, revoked or expired), 403
# ``PermissionDeniedError`` (the key may not ask, or not that index), 404 ``NotFoundError`` (no such model),
# 413, 429 ``RateLimitError`` (with ``Retry-After``), 5xx ``InternalServerError``. ``code`` is OpenAI's where
# one fits (``invalid_api_key``, ``model_not_found``, ``rate_limit_exceeded``), else hopsearch's error type
# (``security_exception``, ``llm_unavailable_exception``, ...); ``param`` names the field of a 400.
PREFIX = "/v1"
_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
}


def is_openai(path: str) -> bool:
    """Whether ``path`` is one of OpenAI's face's (its errors take OpenAI's shape)."""
    return path == PREFIX or path.startswith(PREFIX + "/")


def openai_status(exc: HopsearchError) -> int:
    """Return the status of ``exc`` on OpenAI's face: a refused credential is a 401 (OpenAI's invalid key)."""
    return 401 if exc.details.get("credential") else status_of(exc)


def openai_error(message: str, status: int, code: str | None, param: str | None = None, **extra: Any) -> dict[str, Any]:
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code, **extra}}


def openai_error_body(exc: HopsearchError, redact: Redactor) -> dict[str, Any]:
    status = openai_status(exc)
    code = exc.details.get("openai_code") or _code(status, exc)
    extra = {"trace_id": exc.details["trace_id"]} if exc.details.get("trace_id") else {}
    field = exc.details.get("field")
    param = str(field).removeprefix("body.") if field else None  # OpenAI names a body's fields bare
    return openai_error(redact(str(exc)), status, str(code), param, **extra)


def _code(status: int, exc: HopsearchError) -> str:
    if status == 401:
        return "invalid_api_key"
    if status == 429:
        return "rate_limit_exceeded"
    return exc.error_type


def openai_error_response(
    exc: HopsearchError, redact: Redactor, headers: Mapping[str, str] | None = None
) -> OrjsonResponse:
    return OrjsonResponse(openai_error_body(exc, redact), status_code=openai_status(exc), headers=dict(headers or {}))


# Dify's External Knowledge API (``POST /retrieval``): ``{"error_code", "error_msg"}``, with the codes of
# Dify's specification — 1001 no or a malformed ``Authorization`` header (403), 1002 a key that is not
# accepted or may not search (403), 2001 a knowledge id that is no index the key may read (404) — and, for
# any other error, its HTTP status as the code (a 429 keeps its ``Retry-After``).
DIFY_PATH = "/retrieval"
#: The detail of a refusal of the ``Authorization`` header's format (missing, another scheme).
CREDENTIAL_FORMAT = {"credential_format": True}


def is_dify(path: str) -> bool:
    """Whether ``path`` is Dify's External Knowledge API's (its errors take Dify's shape)."""
    return path == DIFY_PATH


def dify_code(exc: HopsearchError) -> tuple[int, int]:
    """Dify's ``error_code`` of ``exc`` and the HTTP status it is answered with."""
    code = exc.details.get("dify_code")
    if isinstance(code, int):
        return code, 404
    if exc.details.get("credential_format"):
        return 1001, 403
    status = status_of(exc)
    if status in (401, 403):
        return 1002, 403
    return status, status


def dify_error_response(
    exc: HopsearchError, redact: Redactor, headers: Mapping[str, str] | None = None
) -> OrjsonResponse:
    code, status = dify_code(exc)
    body = {"error_code": code, "error_msg": redact(str(exc))}
    return OrjsonResponse(body, status_code=status, headers=dict(headers or {}))


#: How an error is rendered: ``(error, redactor, headers)`` → a response.
ErrorRenderer = Callable[[HopsearchError, Redactor, Mapping[str, str] | None], OrjsonResponse]


def error_renderer(path: str) -> ErrorRenderer:
    """Return the error shape of ``path``: Dify's on ``/retrieval``, OpenAI's under ``/v1``, else Elasticsearch's."""
    if is_dify(path):
        return dify_error_response
    return openai_error_response if is_openai(path) else error_response
