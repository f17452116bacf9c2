"""OpenAI's chat request as the SDKs and chat front ends send it, and the model names of hopsearch.

A model names a strategy over an index: ``hopsearch-<strategy>`` asks the passages alias,
``hopsearch-<strategy>@<index>`` an attached index (or a version of the alias); ``hopsearch`` alone is the
default strategy. The index follows ``_ask``'s rule (:meth:`ApiState.index_name`): a model over an index
outside the key's patterns is 403 naming them (``PermissionDeniedError``, ``param`` ``model``) whether or
not the index exists; one inside them that does not exist is 404 ``model_not_found``.

Fields: ``model``, ``messages`` (:mod:`.openai_conversation`), ``stream`` and ``stream_options.include_usage``,
``max_tokens`` / ``max_completion_tokens`` (the per-generation budget, ``_ask``'s ``options.max_tokens``,
capped at its 4096), ``hopsearch`` (the extension: ``_ask``'s ``options`` object, every option of it).
``n`` above 1 is refused (400 naming it: one answer per question). Every other field (``temperature``,
``top_p``, ``stop``, ``tools``, ``user``, ``seed``, ``response_format``, …) is accepted and ignored, each
named in the answer's ``hopsearch.ignored``; ``user`` is never an owner or a principal.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hopsearch.service.api.models import MAX_ANSWER_TOKENS, MAX_TEXT, AskOptionsModel, _check_text
from hopsearch.service.errors import NotFound
from hopsearch.service.requests import DEFAULT_STRATEGY
from hopsearch.service.strategies import STRATEGIES

PREFIX = "hopsearch"
#: ``_ask``'s bound of ``options.max_tokens``: a chat's larger budget is capped there (and noted).
MAX_TOKENS = MAX_ANSWER_TOKENS
#: Fields read; every other one is ignored (and named in the answer).
READ = frozenset({"model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "n"})
EXTENSION = "hopsearch"


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    role: str = Field(min_length=1, max_length=64)
    content: str | list[Any] | None = None


class ChatRequest(BaseModel):
    """The body of ``POST /v1/chat/completions`` (see the module docstring)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    model: str = Field(min_length=1, max_length=320, description="`hopsearch-<strategy>[@<index>]` (`/v1/models`).")
    messages: list[ChatMessage] = Field(min_length=1, max_length=10_000)
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int | None = Field(None, ge=1, le=1, description="One answer per question: only 1.")
    hopsearch: AskOptionsModel | None = Field(None, description="`_ask`'s options (the extension).")

    @model_validator(mode="before")
    @classmethod
    def _unicode(cls, data: Any) -> Any:
        _check_text(data, "")
        return data

    def ignored(self) -> list[str]:
        """Return the fields sent that nothing reads."""
        return sorted(set(self.model_fields_set | set(self.model_extra or {})) - READ - {EXTENSION})

    def budget(self) -> tuple[int | None, str]:
        """Return the per-generation token budget the chat asks for (None: ``_ask``'s default) and a note where it
        is capped."""
        asked = self.max_completion_tokens or self.max_tokens
        if asked is not None and asked > MAX_TOKENS:
            return MAX_TOKENS, f"max_tokens {asked} capped at {MAX_TOKENS} per generation"
        return asked, ""

    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


def model_id(strategy: str, index: str | None = None) -> str:
    return f"{PREFIX}-{strategy}" + (f"@{index}" if index else "")


def parse_model(name: str) -> tuple[str, str]:
    """(strategy, index name as a URL would give it) of a model name; 404 ``model_not_found`` else."""
    head, _, index = name.partition("@")
    strategy = head[len(PREFIX) + 1 :] if head.startswith(PREFIX + "-") else DEFAULT_STRATEGY if head == PREFIX else ""
    if strategy not in STRATEGIES or (index == "" and "@" in name) or len(index) > MAX_TEXT:
        raise model_missing(name)
    return strategy, index or "passages"


def model_missing(name: str) -> NotFound:
    why = f"the model [{name[:300]}] does not exist or you do not have access to it (GET /v1/models lists them)"
    return NotFound(why, details={"field": "model", "openai_code": "model_not_found"})


# --- responses (documentation; the handlers build plain dicts) ---------------------------------------
class ModelObject(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    hopsearch: dict[str, Any] | None = None


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelObject]


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[dict[str, Any]]
    usage: dict[str, int]
    hopsearch: dict[str, Any] = Field(
        description="The extension: trace_id, strategy, index, citations, passages (as `_retrieve` shows "
        "them), totals, ignored fields, notes; `task: true` for a front end's task answered without a strategy."
    )


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorEnvelope(BaseModel):
    error: OpenAIErrorDetail
