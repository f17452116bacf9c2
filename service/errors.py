"""Every error hopsearch raises on purpose. One hierarchy, one module.

    HopsearchError                    base; ``str()`` is a message meant for a person
    ├── ConfigError                   bad settings or a missing local resource (model file, ES_HOME)
    ├── InputError                    bad input: names the file, line or field (``source``, ``position``)
    ├── StoreError                    Elasticsearch said no or could not be reached
    │   ├── StoreUnavailable          connection refused / timed out (retryable)
    │   ├── IndexMissing              the index or alias does not exist
│   ├── VersionConflict           409: a concurrent writer changed the document first (optimistic concurrency)
    │   └── EmbedderMismatch          vectors from another embedder than the index ``_meta`` names
    │       └── NoVectors             a dense search over an index that holds no vectors (BM25 only)
    ├── NodeError                     starting or stopping a local Elasticsearch / LLM server failed
    ├── EmbedderError                 the embedding model failed
    │   └── RerankError               the reranker failed (unreachable, error status, wrong shape)
    ├── LLMError                      the language model failed
    │   ├── LLMUnavailable            connect errors, 429 and 5xx after every retry
    │   ├── LLMTimeout                the deadline passed
    │   └── LLMOutputError            the model's output could not be parsed (after the repair retry)
    ├── StrategyError                 a strategy could not finish (budget exhausted, no answer); 400
    └── ApiError                      the HTTP service refuses a request
        ├── RequestInvalid            400 a field out of bounds or of the wrong shape (names the field)
        ├── AuthenticationError       401 no API key (security_exception)
        ├── AuthorizationError        403 an API key that is not accepted (security_exception)
        ├── AlreadyExists             400 a name in use (an API key's)
        ├── NotFound                  404 no such route, trace or outline
        ├── MethodNotAllowed          405 the route exists, the method does not
        ├── RequestTooLarge           413 the body is over the limit
        ├── TooManyRequests           429 too many questions at once (es_rejected_execution_exception)
        └── ClientGone                499 the client closed the connection; its work was cancelled

Library errors are wrapped with ``raise ... from exc`` so the cause stays in the traceback. Errors
carry data (``status``, ``source``, ``position``, ``details``) for the HTTP layer and the CLI; their
messages never include credentials.
"""

from __future__ import annotations

from typing import Any


class HopsearchError(Exception):
    """Base of all hopsearch errors."""

    #: Elasticsearch-style error type reported by the HTTP service.
    error_type = "hopsearch_exception"
    #: HTTP status the service answers with.
    status = 500

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})


class ConfigError(HopsearchError):
    error_type = "settings_exception"
    status = 400


class InputError(HopsearchError):
    """Bad input. ``source`` is the file or field, ``position`` the line, row or byte offset."""

    error_type = "parse_exception"
    status = 400

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        position: int | str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        where = ""
        if source is not None:
            where = f"{source}"
            if position is not None:
                where += f":{position}"
            where += ": "
        super().__init__(where + message, details=details)
        self.source = source
        self.position = position
        self.reason = message


class StoreError(HopsearchError):
    error_type = "store_exception"
    status = 502


class StoreUnavailable(StoreError):
    error_type = "connect_exception"
    status = 503


class IndexMissing(StoreError):
    error_type = "index_not_found_exception"
    status = 404


class VersionConflict(StoreError):
    """409 from Elasticsearch: the document changed (or already exists) since it was read. Callers that
    read-merge-write re-read and retry; one raised past their retries says how often they tried."""

    error_type = "version_conflict_engine_exception"
    status = 409


class EmbedderMismatch(StoreError):
    error_type = "illegal_argument_exception"
    status = 400


class NoVectors(EmbedderMismatch):
    """A dense or hybrid search over an index without vectors (an attached BM25-only index among them)."""


class NodeError(HopsearchError):
    error_type = "node_exception"


class EmbedderError(HopsearchError):
    error_type = "embedder_exception"
    status = 502


class RerankError(EmbedderError):
    error_type = "rerank_exception"
    status = 502


class LLMError(HopsearchError):
    error_type = "llm_exception"
    status = 502


class LLMUnavailable(LLMError):
    error_type = "llm_unavailable_exception"
    status = 503


class LLMTimeout(LLMError):
    error_type = "llm_timeout_exception"
    status = 504


class LLMOutputError(LLMError):
    error_type = "llm_output_exception"
    status = 502


class StrategyError(HopsearchError):
    """The run hit a limit the request set (its budget): a client error, like ES's result window."""

    error_type = "strategy_exception"
    status = 400


class ApiError(HopsearchError):
    error_type = "illegal_argument_exception"
    status = 400


class RequestInvalid(ApiError):
    """A request field is invalid; ``field`` names it (``body.k``, ``query.stream``)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(f"[{field}] {message}" if field else message, details={"field": field})
        self.field = field


class AuthenticationError(ApiError):
    error_type = "security_exception"
    status = 401


class AuthorizationError(ApiError):
    error_type = "security_exception"
    status = 403


class AlreadyExists(ApiError):
    error_type = "resource_already_exists_exception"
    status = 400


class NotFound(ApiError):
    error_type = "resource_not_found_exception"
    status = 404


class MethodNotAllowed(ApiError):
    error_type = "method_not_allowed_exception"
    status = 405


class RequestTooLarge(ApiError):
    error_type = "content_too_long_exception"
    status = 413


class RequestTimeout(ApiError):
    """The request's body did not arrive in time (``api_body_timeout_s``)."""

    error_type = "request_timeout_exception"
    status = 408


class TooManyRequests(ApiError):
    error_type = "es_rejected_execution_exception"
    status = 429


class ClientGone(ApiError):
    """Nobody reads this response: the client disconnected and its question was cancelled."""

    error_type = "client_closed_request"
    status = 499


class ServiceStopping(ApiError):
    """The service is stopping (``serve`` got SIGTERM or SIGINT): a question still running is cut short, its
    stream ends with this failure, and the client may ask again (another process, or once it is back)."""

    error_type = "service_stopping_exception"
    status = 503
