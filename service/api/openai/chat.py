"""OpenAI's face: ``POST /v1/chat/completions`` and ``GET /v1/models[/{model}]``, for the OpenAI SDKs and
chat front ends (Open WebUI, LibreChat, ...). A chat completion is ``_ask`` (:meth:`~.state.ApiState.question_of`, the
one ``ask`` use case, the same slots and limits): the model names the strategy and index
(:mod:`.openai_models`), the conversation becomes the question (:mod:`.openai_conversation`), the answer
comes back in OpenAI's shapes (:mod:`.openai_render`) with the trace id in ``X-Hopsearch-Trace-Id`` and in
``hopsearch.trace_id``; errors take OpenAI's shape (:mod:`~hopsearch.service.api.responses`). ``stream: true`` sends the
steps as ``reasoning_content`` deltas as they happen, ``: keep-alive`` comments in long silences, the
answer as ``content``, then ``data: [DONE]``."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path, Request
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from hopsearch.service.access import Caller
from hopsearch.service.api.models import AskOptionsModel, AskRequest
from hopsearch.service.api.openai.conversation import Conversation, condense, is_task, task_reply
from hopsearch.service.api.openai.models import (
    ChatCompletion,
    ChatRequest,
    ModelList,
    ModelObject,
    model_id,
    model_missing,
    parse_model,
)
from hopsearch.service.api.openai.render import chunk, completion, content_of, location, step_line, usage_of
from hopsearch.service.api.responses import OrjsonResponse, openai_error
from hopsearch.service.api.state import ApiState, AskSlot, caller_of, state_of
from hopsearch.service.api.streaming import SSE, STREAM_HEADERS, Failure, answer_in_slot, run_events
from hopsearch.service.app import usecases
from hopsearch.service.app.usecases import check_index
from hopsearch.service.errors import AuthorizationError, IndexMissing, StoreError
from hopsearch.service.requests import AskRequest as Question
from hopsearch.service.requests import Fields
from hopsearch.service.retrieval.readers import passages_by_id, shown_hits
from hopsearch.service.strategies import STRATEGIES, Answer
from hopsearch.service.traces.recorder import Step
from hopsearch.service.types import Hit

router = APIRouter()
TRACE_HEADER = "X-Hopsearch-Trace-Id"
CHAT_FIELDS = Fields("messages", "hopsearch.k", "hopsearch.filters", "model")
_OWN_FIELDS = ("title", "text", "path", "url", "doc_id", "chunk", "source", "lang", "metadata", "acl")


@dataclass(frozen=True, slots=True)
class Reply:
    """What every part of one chat's answer names: its id, time, model, and what was not followed."""

    ident: str
    created: int
    model: str
    ignored: tuple[str, ...]
    notes: tuple[str, ...]

    def completion(self, message: dict[str, Any], usage: dict[str, int], extension: Any) -> dict[str, Any]:
        return completion(self.ident, self.created, self.model, message, usage, extension)

    def chunk(self, delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return chunk(self.ident, self.created, self.model, delta, finish, **extra)


@router.get("/v1/models", response_model=None, responses={200: {"model": ModelList}})
async def list_models(request: Request) -> OrjsonResponse:
    """Return the models the caller's key may ask: every strategy over the passages alias and each attached index
    its index patterns cover."""
    names = await _models(state_of(request), caller_of(request.scope))
    return OrjsonResponse({"object": "list", "data": [_model(name) for name in names]})


@router.get("/v1/models/{model}", response_model=None, responses={200: {"model": ModelObject}})
async def get_model(request: Request, model: Annotated[str, Path(min_length=1, max_length=320)]) -> OrjsonResponse:
    """One model the caller's key may ask: every name chat takes (``hopsearch-<strategy>`` over the alias,
    ``@passages``, ``@<the alias>``, ``@<one of its versions>``, ``@<an attached index>``), resolved as chat
    resolves it; 403 naming the key's index patterns for a model over an index outside them (whether or not
    it exists, as ``_ask`` answers), 404 ``model_not_found`` else."""
    state = state_of(request)
    caller = caller_of(request.scope)
    index = parse_model(model)[1]
    _check_model_index(state, caller, index)
    runtime = await state.runtime()
    try:
        await runtime.store.require_passages(await usecases.passages_index(runtime, caller, index))
    except IndexMissing as exc:
        raise model_missing(model) from exc
    return OrjsonResponse(_model(model))


def _check_model_index(state: ApiState, caller: Caller, index: str) -> None:
    """:func:`~hopsearch.service.app.usecases.check_index` on a model's index (``passages``: the alias), its 403
    naming the model as the field sent."""
    try:
        check_index(caller, state.settings.passages_alias if index == "passages" else index)
    except AuthorizationError as exc:
        exc.details["field"] = "model"
        raise


def _model(name: str) -> dict[str, Any]:
    strategy, _ = parse_model(name)
    return {"id": name, "object": "model", "created": 0, "owned_by": "hopsearch", "hopsearch": {"strategy": strategy}}


async def _models(state: ApiState, caller: Caller) -> list[str]:
    indices: list[str | None] = [None] if caller.may_use(state.settings.passages_alias) else []
    runtime = await state.runtime()
    indices += [a.index for a in await runtime.store.attachments() if caller.may_use(a.index)]
    return [model_id(strategy, index) for index in indices for strategy in sorted(STRATEGIES)]


@router.post(
    "/v1/chat/completions",
    response_model=None,
    responses={200: {"model": ChatCompletion, "content": {SSE: {"schema": {"type": "string"}}}}},
)
async def chat_completions(request: Request, body: ChatRequest) -> Response:
    """Answer the conversation's last user message with the model's strategy (see the module docstring)."""
    state = state_of(request)
    strategy, index = parse_model(body.model)
    _check_model_index(state, caller_of(request.scope), index)
    conversation = condense(body.messages, state.settings.api_max_question_chars)
    reply = _reply(body, f"chatcmpl-{uuid.uuid4().hex}")
    if is_task(conversation.message):
        return _task(body, reply, task_reply(conversation.message))
    question = await _question(state, caller_of(request.scope), body, strategy, index, conversation)
    reply = replace(reply, ident=f"chatcmpl-{question.trace_id}")
    headers = {TRACE_HEADER: str(question.trace_id)}
    slot = state.admit_question(question.scope.caller)
    if body.stream:
        chunks = _chunks(state, slot, question, reply, body.include_usage())
        headers |= STREAM_HEADERS
        return StreamingResponse(chunks, media_type=SSE, headers=headers, background=BackgroundTask(slot.release))
    answer = await answer_in_slot(request, state, slot, question)
    failure = usecases.failure_of(answer)
    if failure is not None:
        raise failure
    cited = await cited_passages(state, question, answer)
    message = {"role": "assistant", "content": content_of(answer.text, cited), "reasoning_content": _reasoning(answer)}
    body_out = completion(
        reply.ident,
        reply.created,
        reply.model,
        message,
        usage_of(answer.trace.totals()),
        _extension(answer, cited, reply),
    )
    return OrjsonResponse(body_out, headers=headers)


def _reply(body: ChatRequest, ident: str) -> Reply:
    ignored = body.ignored()
    notes = []
    if "temperature" in ignored:
        notes.append("temperature ignored: the strategies decode greedily (temperature 0)")
    if "user" in ignored:
        notes.append("user ignored: who asks is the API key's or the end-user token's caller")
    capped = body.budget()[1]
    if capped:
        notes.append(capped)
    return Reply(ident, int(time.time()), body.model, tuple(ignored), tuple(notes))


async def _question(
    state: ApiState, caller: Caller, body: ChatRequest, strategy: str, index: str, conversation: Conversation
) -> Question:
    """Return the question of a chat, built as ``_ask`` builds its body's: the extension's options, the chat's
    token budget over them."""
    options = body.hopsearch or AskOptionsModel.model_validate({})
    tokens = body.budget()[0]
    if tokens is not None:
        options = options.model_copy(update={"max_tokens": tokens})
    asked = AskRequest(question=conversation.question, strategy=strategy, options=options, stream=False)
    try:
        question = await state.question_of(caller, index, asked, CHAT_FIELDS)
    except IndexMissing as exc:
        raise model_missing(body.model) from exc
    return replace(question, trace_id=uuid.uuid4().hex, conversation=conversation.to_trace())


async def cited_passages(state: ApiState, question: Question, answer: Answer) -> list[dict[str, Any]]:
    """Return the answer's citations with what ``_retrieve`` shows of their passages (read again through the access
    filter, then :func:`~hopsearch.service.retrieval.readers.shown_hits` and the service's hit sources);
    a citation whose passage cannot be read now keeps its title only."""
    if not answer.citations:
        return []
    runtime = await state.runtime()
    scope = question.scope
    attachment = await runtime.store.attachment(scope.index)
    fmap = attachment.fields if attachment is not None else None
    names = [n for n in (fmap.title, fmap.text, fmap.url, fmap.id, fmap.lang, fmap.acl) if n] if fmap else _OWN_FIELDS
    try:
        found = await passages_by_id(runtime.store, scope, [c.id for c in answer.citations], list(names))
    except StoreError:
        found = {}
    hits = [Hit(c.id, c.score, c.title, "", found.get(c.id, {})) for c in answer.citations]
    cited = []
    for citation, hit in zip(answer.citations, shown_hits(scope, hits), strict=True):
        source = state.hit_sources(hit.source)
        where = location(source, fmap.url if fmap else "url")
        cited.append(
            {"_id": citation.id, "_score": citation.score, "title": citation.title, "location": where}
            | {"_index": scope.index, "_shown_score": hit.score, "_source": source}
        )
    return cited


def _extension(answer: Answer, cited: Sequence[dict[str, Any]], reply: Reply) -> dict[str, Any]:
    trace = answer.trace
    body: dict[str, Any] = {
        "trace_id": trace.trace_id,
        "trace_stored": answer.trace_not_stored is None,
        "strategy": trace.strategy,
        "index": trace.scope.get("index"),
        "citations": [{k: c[k] for k in ("_id", "_score", "title", "location")} for c in cited],
        "passages": [
            {"_index": c["_index"], "_id": c["_id"], "_score": c["_shown_score"], "_source": c["_source"]}
            for c in cited
        ],
        "totals": trace.totals(),
        "ignored": list(reply.ignored),
        "notes": list(reply.notes),
    }
    if answer.trace_not_stored is not None:
        body["warning"] = answer.trace_not_stored
    return body


def _passage(cited: dict[str, Any]) -> dict[str, Any]:
    """Return a cited passage as a ``_retrieve`` hit (its score as the caller's score policy shows it)."""
    return {
        "_index": cited["_index"],
        "_id": cited["_id"],
        "_score": cited["_shown_score"],
        "_source": cited["_source"],
    }


def _reasoning(answer: Answer) -> str:
    return "".join(step_line(step, index) for index, step in enumerate(answer.trace.steps))


def _task(body: ChatRequest, reply: Reply, text: str) -> Response:
    """Answer a front end's auxiliary task without a strategy, an LLM call or a trace."""
    extension = {"task": True, "trace_id": None, "ignored": list(reply.ignored), "notes": list(reply.notes)}
    headers = {"X-Hopsearch-Task": "answered-without-strategy"}
    if not body.stream:
        message = {"role": "assistant", "content": text}
        return OrjsonResponse(
            completion(reply.ident, reply.created, reply.model, message, usage_of({}), extension), headers=headers
        )

    async def chunks() -> AsyncIterator[bytes]:
        yield _data(reply.chunk({"role": "assistant", "content": text}))
        yield _data(reply.chunk({}, "stop", hopsearch=extension))
        yield b"data: [DONE]\n\n"

    return StreamingResponse(chunks(), media_type=SSE, headers=headers | STREAM_HEADERS)


def _data(body: dict[str, Any], state: ApiState | None = None) -> bytes:
    text = orjson.dumps(body).decode()
    return f"data: {state.redact(text) if state is not None else text}\n\n".encode()


async def _chunks(
    state: ApiState, slot: AskSlot, question: Question, reply: Reply, include_usage: bool
) -> AsyncIterator[bytes]:
    yield _data(reply.chunk({"role": "assistant", "content": ""}), state)
    index = 0
    events = run_events(state, slot, question, state.settings.api_sse_heartbeat_s)
    async with contextlib.aclosing(events):  # a client gone: the run is cancelled now
        async for event in events:
            if event is None:
                yield b": keep-alive\n\n"
            elif isinstance(event, Step):
                yield _data(reply.chunk({"reasoning_content": step_line(event, index)}), state)
                index += 1
            elif isinstance(event, Failure):
                extra = {"trace_id": event.trace_id} if event.trace_id else {}
                yield _data(openai_error(event.reason, event.status, event.error_type, **extra), state)
            else:
                for part in await _answer_chunks(state, question, event, reply, include_usage):
                    yield part
    yield b"data: [DONE]\n\n"


async def _answer_chunks(
    state: ApiState, question: Question, answer: Answer, reply: Reply, include_usage: bool
) -> list[bytes]:
    cited = await cited_passages(state, question, answer)
    parts = [
        _data(reply.chunk({"content": content_of(answer.text, cited)}), state),
        _data(reply.chunk({}, "stop", hopsearch=_extension(answer, cited, reply)), state),
    ]
    if include_usage:
        parts.append(_data(reply.chunk(None, usage=usage_of(answer.trace.totals())), state))
    return parts
