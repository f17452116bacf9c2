"""JSON replies from chat models: schema-constrained where the server can, tolerant parsing, and
exactly one repair retry that shows the model its parse error. Never loops.

Constraints sent per engine: vLLM and OpenAI take ``response_format`` ``{"type": "json_schema"}``;
llama.cpp's server (llama-cpp-python) takes ``{"type": "json_object", "schema": ...}`` and compiles
the schema to a grammar.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from hopsearch.service.errors import LLMOutputError
from hopsearch.service.llm.client import LLMClient, Message
from hopsearch.service.llm.types import Engine, JsonReply

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def response_format(engine: Engine, schema: Mapping[str, Any], name: str = "reply") -> dict[str, Any]:
    """Return the request fields that constrain the reply to ``schema`` on ``engine``."""
    if engine == "llamacpp":
        return {"response_format": {"type": "json_object", "schema": dict(schema)}}
    return {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": dict(schema), "strict": True},
        }
    }


def _first_object(text: str) -> str | None:
    """Return the first balanced ``{...}`` block, respecting strings and escapes."""
    start = text.find("{")
    while start >= 0:
        depth, in_string, escaped = 0, False, False
        for index in range(start, len(text)):
            char = text[index]
            if in_string:
                if escaped:
                    escaped = False
                elif char == "\\":
                    escaped = True
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
            elif char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    return text[start : index + 1]
        start = text.find("{", start + 1)
    return None


def parse_json_object(text: str, schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Parse a model's JSON object tolerantly: code fences stripped, else the first ``{...}`` block.

    Raises ``ValueError`` with a message fit to show the model (used by the repair retry).
    """
    candidates: list[str] = [text.strip()]
    candidates += [match.group(1).strip() for match in _FENCE.finditer(text)]
    block = _first_object(text)
    if block is not None:
        candidates.append(block)
    error = "no JSON object found"
    for candidate in candidates:
        try:
            value = json.loads(candidate, strict=False)  # tolerate raw newlines and tabs inside strings
        except json.JSONDecodeError as exc:
            error = f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            continue
        if not isinstance(value, dict):
            error = f"expected a JSON object, got {type(value).__name__}"
            continue
        missing = [key for key in (schema or {}).get("required", []) if key not in value]
        if missing:
            raise ValueError(f"the object lacks the required key(s): {', '.join(missing)}")
        return value
    raise ValueError(error)


async def chat_json(
    client: LLMClient,
    messages: Sequence[Message],
    schema: Mapping[str, Any],
    *,
    name: str = "reply",
    max_tokens: int = 512,
    deadline: float | None = None,
) -> JsonReply:
    """Ask for a JSON object matching ``schema``; one repair retry, then :class:`LLMOutputError`."""
    engine = await client.engine()
    extra = response_format(engine, schema, name)
    first = await client.chat(messages, max_tokens=max_tokens, deadline=deadline, extra=extra)
    try:
        return JsonReply(parse_json_object(first.text, schema), (first,), repaired=False, constrained=True)
    except ValueError as exc:
        problem = str(exc)
    repair = [
        *messages,
        {"role": "assistant", "content": first.text},
        {
            "role": "user",
            "content": f"Your reply could not be used: {problem}. Reply again with only one JSON "
            f"object that matches this schema, no other text:\n{json.dumps(schema)}",
        },
    ]
    second = await client.chat(repair, max_tokens=max_tokens, deadline=deadline, extra=extra)
    try:
        value = parse_json_object(second.text, schema)
    except ValueError as exc:
        raise LLMOutputError(
            f"the model's reply is not the JSON asked for after one repair: {exc}",
            details={"outputs": [first.text, second.text], "errors": [problem, str(exc)]},
        ) from exc
    return JsonReply(value, (first, second), repaired=True, constrained=True)
