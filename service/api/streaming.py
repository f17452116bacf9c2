"""One question's run as a stream of events, for every streaming front end (``_ask``'s Server-Sent
Events, ``/v1/chat/completions``' chunks): each :class:`~hopsearch.service.traces.recorder.Step` as the
strategy records it, ``None`` after ``heartbeat`` seconds of silence (a keep-alive: proxies close idle
streams), then the :class:`~hopsearch.service.strategies.Answer` or a :class:`Failure`. The run holds its
slot until the stream ends; a stream closed early cancels it. When the service stops (SIGTERM, SIGINT:
:meth:`~hopsearch.service.api.state.ApiState.stopping`), a run still going is cancelled and its stream ends
at once, cleanly, with a :class:`Failure` (503 ``service_stopping_exception``), so ``serve`` exits without
waiting for it (or for its graceful timeout)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Coroutine
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from hopsearch.service.api.responses import status_of
from hopsearch.service.api.state import ApiState, AskSlot
from hopsearch.service.errors import ClientGone, HopsearchError, ServiceStopping
from hopsearch.service.requests import AskRequest
from hopsearch.service.strategies import Answer
from hopsearch.service.traces.recorder import Step

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Failure:
    """How a streamed run failed (its trace, where one was written)."""

    error_type: str
    reason: str
    status: int
    trace_id: str | None = None

    @classmethod
    def of(cls, error: HopsearchError, trace_id: str | None = None) -> Failure:
        return cls(error.error_type, str(error), status_of(error), trace_id)


#: What an unexpected exception says to the client (the service log holds the rest).
INTERNAL = Failure("exception", "internal error; see the service log", 500)
StreamEvent = Step | Answer | Failure | None
#: How a run still going ends when the service stops.
STOPPING = Failure.of(ServiceStopping("the service is stopping; the question was cancelled: ask it again"))


async def run_events(
    state: ApiState, slot: AskSlot, question: AskRequest, heartbeat: float
) -> AsyncGenerator[StreamEvent]:
    """Yield the events of ``question``'s run (see the module docstring); the last is an answer or a failure."""
    queue: asyncio.Queue[Step] = asyncio.Queue()
    task = asyncio.create_task(state.answer(question, slot=slot, on_step=queue.put_nowait))
    stopping = asyncio.ensure_future(state.stopping().wait())
    try:
        while True:
            getter = asyncio.ensure_future(queue.get())
            waited = {getter, task, stopping}
            done, _ = await asyncio.wait(waited, timeout=heartbeat, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                getter.cancel()
                yield None
                continue
            if not getter.done():
                getter.cancel()
                break
            yield getter.result()
        while not queue.empty():
            yield queue.get_nowait()
        yield STOPPING if stopping.done() and not task.done() else _outcome(task, question)
    finally:
        stopping.cancel()
        if not task.done():
            task.cancel()
        slot.release()


def _outcome(task: asyncio.Task[Answer], question: AskRequest) -> Answer | Failure:
    try:
        answer = task.result()
    except HopsearchError as exc:
        return Failure.of(exc)
    except Exception:
        log.exception("strategy %s failed", question.strategy)
        return INTERNAL
    if answer.error is not None:
        return Failure.of(answer.error, answer.trace.trace_id)
    return answer


SSE = "text/event-stream"
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def answer_in_slot(request: Request, state: ApiState, slot: AskSlot, question: AskRequest) -> Answer:
    """Return the answer of an admitted question; the slot is released however it ends (a client that goes away
    cancels the work: :class:`ClientGone`)."""
    try:
        return await _unless_disconnected(request, state, state.answer(question, slot=slot))
    finally:
        slot.release()  # also where the work was cancelled before it began


async def _unless_disconnected(request: Request, state: ApiState, work: Coroutine[Any, Any, Answer]) -> Answer:
    """Run ``work`` until it ends, the client goes away or the service stops; then it is cancelled (its LLM
    and Elasticsearch requests with it) and :class:`ClientGone` (or :class:`ServiceStopping`) is raised. The
    body is read already, so the next ASGI message is the disconnect."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    stopping = asyncio.ensure_future(state.stopping().wait())
    try:
        await asyncio.wait({task, watcher, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        stopping.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    if task.cancelled() and state.stopping().is_set():
        raise ServiceStopping("the service is stopping; the question was cancelled: ask it again")
    if task.cancelled():
        raise ClientGone("the client closed the connection; the question was cancelled")
    return task.result()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def until_stopped(state: ApiState, work: Coroutine[Any, Any, Answer]) -> Answer:
    """Return the answer of ``work``, unless the service stops first: then it is cancelled and
    :class:`ServiceStopping` raised (the MCP ``ask`` tool, whose answer is one JSON body)."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(state.stopping().wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    if task.cancelled():
        raise ServiceStopping("the service is stopping; the question was cancelled: ask it again")
    return task.result()
