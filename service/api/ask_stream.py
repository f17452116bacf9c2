"""One question's run as a stream of events, for every streaming front end (``_ask``'s Server-Sent
Events, ``/v1/chat/completions``' chunks): each :class:`~hopsearch.service.traces.recorder.Step` as the
strategy records it, ``None`` after ``heartbeat`` seconds of silence (a keep-alive: proxies close idle
streams), then the :class:`~hopsearch.service.strategies.Answer` or a :class:`Failure`. The run holds its
slot until the stream ends; a stream closed early cancels it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from hopsearch.service.api.responses import status_of
from hopsearch.service.api.state import ApiState, AskSlot
from hopsearch.service.errors import HopsearchError
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


async def run_events(
    state: ApiState, slot: AskSlot, question: AskRequest, heartbeat: float
) -> AsyncGenerator[StreamEvent]:
    """The events of ``question``'s run (see the module docstring); the last is an answer or a failure."""
    queue: asyncio.Queue[Step] = asyncio.Queue()
    task = asyncio.create_task(state.answer(question, slot=slot, on_step=queue.put_nowait))
    try:
        while True:
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({getter, task}, timeout=heartbeat, return_when=asyncio.FIRST_COMPLETED)
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
        yield _outcome(task, question)
    finally:
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
