"""JSON replies: tolerant parsing, the schema sent per engine, exactly one repair retry."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopsearch.service.errors import LLMOutputError
from hopsearch.service.llm import chat_json, parse_json_object
from hopsearch.service.llm.client import LLMClient
from tests.llm_fixtures import settings_for
from tests.scripted_llm import ScriptedLLM, ScriptRequest

SCHEMA = {
    "type": "object",
    "properties": {"thought": {"type": "string"}, "need_retrieve": {"type": "boolean"}},
    "required": ["thought", "need_retrieve"],
}
MESSAGES = [{"role": "user", "content": "Think, then say whether to retrieve."}]


def test_tolerant_parsing() -> None:
    assert parse_json_object('{"a": 1}') == {"a": 1}
    assert parse_json_object('Sure!\n```json\n{"a": [1, 2]}\n```\nDone.') == {"a": [1, 2]}
    assert parse_json_object('Here: {"a": "}{", "b": {"c": "\\"}"}} trailing {"x": 2}') == {
        "a": "}{",
        "b": {"c": '"}'},
    }
    with pytest.raises(ValueError, match="expected a JSON object"):
        parse_json_object("[1, 2]")
    with pytest.raises(ValueError, match=r"no JSON object|invalid JSON"):
        parse_json_object("no json here")
    with pytest.raises(ValueError, match="need_retrieve"):
        parse_json_object('{"thought": "x"}', SCHEMA)


@given(st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=12)), max_size=4))
def test_any_object_survives_prose_and_fences(value: dict[str, object]) -> None:
    import json

    wrapped = f"Answer follows.\n```json\n{json.dumps(value)}\n```\nThanks"
    assert parse_json_object(wrapped) == value


def replies(*texts: str) -> ScriptedLLM:
    queue = list(texts)

    def script(request: ScriptRequest) -> str:
        return queue.pop(0)

    return ScriptedLLM(script)


@pytest.mark.parametrize(
    ("vllm", "expected"),
    [(True, "json_schema"), (False, "json_object")],
)
async def test_constrained_reply_first_time(vllm: bool, expected: str) -> None:
    with ScriptedLLM(lambda r: '{"thought": "ok", "need_retrieve": true}', report_stop_reason=vllm) as server:
        async with LLMClient(settings_for(server)) as llm:
            reply = await chat_json(llm, MESSAGES, SCHEMA)
    assert reply.value == {"thought": "ok", "need_retrieve": True} and not reply.repaired
    fmt = server.requests[0]["response_format"]
    assert fmt["type"] == expected
    schema = fmt["json_schema"]["schema"] if expected == "json_schema" else fmt["schema"]
    assert schema == SCHEMA


async def test_one_repair_retry_shows_the_parse_error() -> None:
    with replies('{"thought": "half', 'ok: {"thought": "t", "need_retrieve": false}') as server:
        async with LLMClient(settings_for(server)) as llm:
            reply = await chat_json(llm, MESSAGES, SCHEMA)
    assert reply.repaired and reply.value["need_retrieve"] is False
    assert len(server.requests) == 2 and len(reply.completions) == 2
    repair = server.requests[1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": '{"thought": "half'}
    assert "invalid JSON" in repair[-1]["content"] or "no JSON object" in repair[-1]["content"]
    assert reply.usage.completion_tokens == sum(c.usage.completion_tokens for c in reply.completions)


async def test_bad_output_twice_raises_after_exactly_two_calls() -> None:
    with replies("not json", '{"thought": "no flag"}', '{"thought": "t", "need_retrieve": true}') as server:
        async with LLMClient(settings_for(server)) as llm:
            with pytest.raises(LLMOutputError) as caught:
                await chat_json(llm, MESSAGES, SCHEMA)
    assert len(server.requests) == 2
    assert caught.value.details["outputs"] == ["not json", '{"thought": "no flag"}']
    assert "need_retrieve" in caught.value.details["errors"][1]


def test_raw_control_characters_inside_strings_are_tolerated() -> None:
    # A small model (seen with Gemma 270M under a llama.cpp grammar) writes a raw newline inside a string.
    value = parse_json_object('{"reasoning": "line one\nline two\tend", "confidence": 0.5}')
    assert value == {"reasoning": "line one\nline two\tend", "confidence": 0.5}
