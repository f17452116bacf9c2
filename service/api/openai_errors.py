"""OpenAI's error shape for the routes under ``/v1`` (:mod:`.openai_chat`): ``{"error": {"message", "type",
"param", "code"}}`` with the statuses the OpenAI SDKs map to their exceptions — 400 ``BadRequestError``,
401 ``AuthenticationError`` (no key, or a key or token that is not accepted, revoked or expired), 403
``PermissionDeniedError`` (the key may not ask, or not that index), 404 ``NotFoundError`` (no such model),
413, 429 ``RateLimitError`` (with ``Retry-After``), 5xx ``InternalServerError``. ``code`` is OpenAI's where
one fits (``invalid_api_key``, ``model_not_found``, ``rate_limit_exceeded``), else hopsearch's error type
(``security_exception``, ``llm_unavailable_exception``, ...); ``param`` names the field of a 400."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hopsearch.service.api.responses import OrjsonResponse, Redactor, status_of
from hopsearch.service.errors import HopsearchError

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
    """The status of ``exc`` on OpenAI's face: a refused credential is a 401 (OpenAI's invalid key)."""
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
