"""``POST /{index}/_ask``: answer with a strategy, as one JSON body or as Server-Sent Events.

Streaming (``stream=true`` in the query or the body): one ``step`` event per step as the strategy
records it (the run's ``on_step`` listener), then one ``answer`` event with
the answer, citations, trace id and totals — or one ``error`` event with an ES-style error envelope.
A ``: keep-alive`` comment goes out after ``api_sse_heartbeat_s`` of silence (proxies close idle
streams). A client that disconnects from a plain (non-streaming) ask cancels the work and frees its slot.
Refusals that happen before the run (auth, validation, unknown index, 429) are plain JSON errors.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Request
from starlette.background import BackgroundTask
from starlette.responses import StreamingResponse

from hopsearch.service.api.models import AskRequest, AskResponse
from hopsearch.service.api.responses import OrjsonResponse, error_body
from hopsearch.service.api.state import ApiState, AskSlot, IndexName, caller_of, state_of
from hopsearch.service.api.streaming import SSE, STREAM_HEADERS, Failure, answer_in_slot, run_events
from hopsearch.service.app import usecases
from hopsearch.service.requests import AskRequest as Question
from hopsearch.service.strategies import Answer
from hopsearch.service.traces.recorder import Step

router = APIRouter()


def answer_body(answer: Answer, took: int, index_note: str = "") -> dict[str, Any]:
    trace = answer.trace
    body: dict[str, Any] = {
        "took": took,
        "trace_id": trace.trace_id,
        "strategy": trace.strategy,
        "answer": answer.text,
        "citations": [{"_id": c.id, "_score": c.score, "title": c.title} for c in answer.citations],
        "totals": trace.totals(),
        "trace_stored": answer.trace_not_stored is None,
    }
    if answer.trace_not_stored is not None:
        body["warning"] = answer.trace_not_stored
    if index_note:
        body["index_note"] = index_note
    return body


def _event(name: str, data: Any, state: ApiState) -> bytes:
    payload = state.redact(orjson.dumps(data).decode())
    return f"event: {name}\ndata: {payload}\n\n".encode()


def _sse_event(name: str, data: dict[str, Any]) -> dict[str, Any]:
    payload = {"type": "string", "contentMediaType": "application/json", "contentSchema": data}
    return {"type": "object", "required": ["event", "data"], "properties": {"event": {"const": name}, "data": payload}}


#: One event of the stream (OpenAPI 3.1: the schema of an event-stream describes each event).
SSE_EVENT = {
    "oneOf": [
        _sse_event("step", {"type": "object", "required": ["index", "kind"]}),
        _sse_event("answer", {"$ref": "#/components/schemas/AskResponse"}),
        _sse_event("error", {"$ref": "#/components/schemas/ErrorEnvelope"}),
    ]
}


@router.post(
    "/{index}/_ask",
    response_model=None,
    responses={200: {"model": AskResponse, "content": {SSE: {"schema": SSE_EVENT}}}},
)
async def ask(
    request: Request,
    index: IndexName,
    body: AskRequest,
    stream: Annotated[bool | None, Query(description="Server-Sent Events (overrides the body)")] = None,
) -> OrjsonResponse | StreamingResponse:
    """Answer a question with a strategy; each step is written to the trace (and streamed)."""
    started = time.perf_counter()
    state = state_of(request)
    question = await state.question_of(caller_of(request.scope), index, body)
    slot = state.admit_question(question.scope.caller)
    if stream if stream is not None else body.stream:
        events = _stream(state, slot, question, started)
        return StreamingResponse(
            events, media_type=SSE, headers=STREAM_HEADERS, background=BackgroundTask(slot.release)
        )
    answer = await answer_in_slot(request, state, slot, question)
    failure = usecases.failure_of(answer)
    if failure is not None:
        raise failure
    return OrjsonResponse(answer_body(answer, round((time.perf_counter() - started) * 1000), question.index_note))


async def _stream(state: ApiState, slot: AskSlot, question: Question, started: float) -> AsyncIterator[bytes]:
    index = 0
    events = run_events(state, slot, question, state.settings.api_sse_heartbeat_s)
    async with contextlib.aclosing(events):  # a client gone: the run is cancelled now, not when collected
        async for event in events:
            if event is None:  # a comment line: proxies see traffic and keep the stream open
                yield b": keep-alive\n\n"
            elif isinstance(event, Step):
                yield _event("step", event.to_dict(index), state)
                index += 1
            elif isinstance(event, Failure):
                extra = {"trace_id": event.trace_id} if event.trace_id else {}
                yield _event("error", error_body(event.error_type, event.reason, event.status, **extra), state)
            else:
                took = round((time.perf_counter() - started) * 1000)
                yield _event("answer", answer_body(event, took, question.index_note), state)
