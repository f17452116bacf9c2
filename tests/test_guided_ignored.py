"""A vLLM that ignores the guided-decoding field hopsearch sends (it answers 200 and only logs unknown
fields, as vLLM 0.32 does for the removed ``guided_*``) is a clear error naming the field and the release,
never an unconstrained answer that silently changes the decision (issue 54)."""

from __future__ import annotations

import pytest

from hopsearch.service.errors import LLMError
from hopsearch.service.llm import LLMClient
from hopsearch.service.llm.guided import Guide, parse_version, vllm_fields
from hopsearch.service.strategies import AskOptions, SingleRetrieval
from hopsearch.service.traces.recorder import MemoryTraceSink
from tests.llm_fixtures import PASSAGES, ListRetriever, settings_for
from tests.scopes import asking
from tests.scripted_llm import ScriptedLLM, ScriptRequest

#: question -> the scripted (unconstrained) reply: a regex guide (a date) and a choice guide.
CASES = {
    "When was Steven Spielberg born?": " He was born on December 18, 1946 in Ohio.",
    "Which film came out first, Jaws or Star Wars?": " 1. Jaws, not Star Wars (1977).",
}


async def ask(question: str, *, vllm: bool, constrain: bool) -> tuple[object, dict[str, object]]:
    def script(request: ScriptRequest) -> str:
        return CASES[question]

    sink = MemoryTraceSink()
    server = ScriptedLLM(script, report_stop_reason=vllm, vllm_version="0.32.0", constrain=constrain)
    with server:
        async with LLMClient(settings_for(server, "vllm" if vllm else "llamacpp-stream")) as llm:
            answer = await SingleRetrieval(llm, ListRetriever(PASSAGES), sink).answer(asking(question, AskOptions()))
    return answer, dict(sink.documents[answer.trace.trace_id])


@pytest.mark.parametrize("question", sorted(CASES))
async def test_a_vllm_that_ignores_structured_outputs_is_a_clear_error(question: str) -> None:
    answer, doc = await ask(question, vllm=True, constrain=False)
    error = answer.error  # type: ignore[attr-defined]
    assert isinstance(error, LLMError) and answer.text is None  # type: ignore[attr-defined]
    assert "vLLM 0.32.0 answered" in str(error) and "outside the structured_outputs constraint" in str(error)
    assert doc["status"] == "error" and doc["engine"] == {"name": "vllm", "version": "0.32.0"}


@pytest.mark.parametrize("question", sorted(CASES))
async def test_a_vllm_that_honours_it_answers(question: str) -> None:
    answer, doc = await ask(question, vllm=True, constrain=True)
    answer.raise_for_error()  # type: ignore[attr-defined]
    assert doc["steps"][-1]["details"]["constrained"] == "structured_outputs"  # type: ignore[index]


def test_vllm_0_32_gets_structured_outputs_only() -> None:
    fields, method = vllm_fields(Guide("root ::= x", choice=("yes", "no")), parse_version("0.32.0"))
    assert (fields, method) == ({"structured_outputs": {"choice": ["yes", "no"]}}, "structured_outputs")
