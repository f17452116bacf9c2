"""The steps every strategy shares — one place for each, so changing one changes it for all.

Text: :func:`context_line` (the passages as one ``Context: [1] Title: … Text: …`` line),
:func:`single_prompt` (question + context → ``Answer:``), :func:`in_question_language` (the note that
makes a Japanese question answered in Japanese), :func:`text_of` and :func:`distinct_texts`
(tolerant readers of model JSON), :func:`answer_line` (the answer read from a completion).

Calls, one call one trace step:

:func:`ask_json` asks for a JSON object under a schema — constrained by the server where it can
(``response_format``: vLLM guided decoding, llama.cpp grammars), one repair retry, then a clean
:class:`~hopsearch.service.errors.LLMOutputError` — and records the step even when it fails, with
both outputs and both parse errors, so the trace shows why the run stopped. :func:`ask_text` is a
plain chat call recorded the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from hopsearch.service.errors import LLMOutputError
from hopsearch.service.llm import Completion, Engine, JsonReply, chat_json
from hopsearch.service.strategies.answer_guides import guided_answer
from hopsearch.service.strategies.answer_types import AnswerShape, typed_answer
from hopsearch.service.strategies.base import RunContext
from hopsearch.service.text.lang import detect_lang
from hopsearch.service.traces.recorder import Step, StepKind
from hopsearch.service.types import Hit

T = TypeVar("T")
_NON_WORD = re.compile(r"[^\w\s]")

#: Schema keywords OpenAI's strict structured outputs refuse; vLLM and llama.cpp honour them.
_BOUNDS = frozenset({"maxLength", "minLength", "maxItems", "minItems", "minimum", "maximum"})


INSTRUCTION = "Answer the question using the context. Reply with a short answer only."
#: Put before a prompt whose question is Japanese: the answer comes back in the question's language.
JAPANESE_NOTE = (
    "The question is in Japanese: write the answer, and any thought, keyword, search query or passage, "
    "in Japanese (日本語で答えてください)."
)


def in_question_language(question: str, prompt: str) -> str:
    """``prompt`` with :data:`JAPANESE_NOTE` in front when ``question`` is Japanese, else unchanged."""
    return f"{JAPANESE_NOTE}\n\n{prompt}" if detect_lang(question) == "ja" else prompt


def context_line(hits: Sequence[Hit]) -> str:
    """``Context: [1] Title: … Text: … [2] …`` on one line."""
    parts = [
        f"[{number}] Title: {' '.join(hit.title.split())} Text: {' '.join(hit.text.split())}"
        for number, hit in enumerate(hits, start=1)
    ]
    return "Context: " + " ".join(parts)


def single_prompt(question: str, context: str) -> str:
    """Return the answer prompt over one context line: instruction, context, question, ``Answer:``."""
    return in_question_language(question, f"{INSTRUCTION}\n{context}\nQuestion: {' '.join(question.split())}\nAnswer:")


def text_of(value: Any) -> str:
    """Return a reply string with whitespace collapsed; "" for a placeholder a small model copied from the instructions
    ("...", "…", "-": no letter or digit in it)."""
    text = " ".join(str(value or "").split())
    return text if any(char.isalnum() for char in text) else ""


def distinct_texts(raw: Any) -> list[str]:
    """Return the texts of a reply value that is one string or a list of them: placeholders dropped, repeats
    (case-insensitive) kept once, in order; [] for anything else."""
    items = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    found: list[str] = []
    for item in items:
        text = text_of(item)
        if text and text.casefold() not in {f.casefold() for f in found}:
            found.append(text)
    return found


def normalise_query(query: str) -> str:
    """Return a query's identity for the repeat guard: case, punctuation and spacing ignored."""
    return " ".join(_NON_WORD.sub(" ", query.casefold()).split())


def answer_line(text: str) -> str:
    """Return the first non-empty line, without an "Answer:" prefix."""
    for line in text.splitlines():
        line = line.strip()
        if line.casefold().startswith("answer:"):
            line = line[len("answer:") :].strip()
        if line:
            return line
    return ""


def schema_for(engine: Engine, schema: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``schema`` as sent to ``engine``: length and range bounds (which keep a small model's constrained output
    short) are dropped for OpenAI, whose strict mode rejects them."""

    def strip(node: Any) -> Any:
        if isinstance(node, Mapping):
            return {k: strip(v) for k, v in node.items() if k not in _BOUNDS}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(schema) if engine == "openai" else dict(schema)


def user(prompt: str) -> list[dict[str, str]]:
    """Return a one-message chat (no system turn: some chat templates, Gemma's among them, have none)."""
    return [{"role": "user", "content": prompt}]


def _completion_fields(completions: Sequence[Completion]) -> dict[str, Any]:
    return {
        "output": completions[-1].text if completions else "",
        "finish_reason": completions[-1].finish_reason if completions else None,
        "latency_ms": round(sum(c.latency_ms for c in completions), 3),
        "tokens_in": sum(c.usage.prompt_tokens for c in completions),
        "tokens_out": sum(c.usage.completion_tokens for c in completions),
        "llm_calls": sum(c.calls for c in completions),
        "attempts": tuple(a for c in completions for a in c.attempts),
    }


async def ask_json(
    context: RunContext,
    kind: StepKind,
    prompt: str,
    schema: Mapping[str, Any],
    *,
    name: str,
    depth: int = 0,
    max_tokens: int = 256,
) -> JsonReply:
    """One JSON role call. A reply that cannot be parsed after the repair retry records a step
    with both outputs and raises :class:`LLMOutputError`."""
    context.check_llm_budget()
    engine = await context.llm.engine()
    try:
        return await chat_json(
            context.llm,
            user(prompt),
            schema_for(engine, schema),
            name=name,
            max_tokens=max_tokens,
            deadline=context.deadline,
        )
    except LLMOutputError as exc:
        outputs = [str(o) for o in exc.details.get("outputs", [])]
        context.recorder.add(
            Step(
                kind=kind,
                depth=depth,
                prompt_chars=len(prompt),
                output="\n---\n".join(outputs),
                llm_calls=len(outputs),
                error=str(exc),
                details={"role": name, "errors": list(exc.details.get("errors", [])), "repaired": True},
            )
        )
        raise


def json_step(kind: StepKind, reply: JsonReply, prompt: str, *, name: str, depth: int = 0, **fields: Any) -> Step:
    """Return the trace step of a successful :func:`ask_json` call."""
    details: dict[str, Any] = {"role": name, "repaired": reply.repaired, "value": dict(reply.value)}
    details.update(fields.pop("details", None) or {})
    return Step(
        kind=kind,
        depth=depth,
        prompt_chars=len(prompt),
        details=details,
        **_completion_fields(reply.completions),
        **fields,
    )


async def ask_text(
    context: RunContext,
    prompt: str,
    *,
    max_tokens: int,
    stop: Sequence[str] = (),
) -> Completion:
    """One plain chat call (the caller records the step with :func:`text_step`)."""
    context.check_llm_budget()
    return await context.llm.chat(user(prompt), stop=stop, max_tokens=max_tokens, deadline=context.deadline)


async def ask_answer(
    context: RunContext, prompt: str, *, max_tokens: int, extra: Mapping[str, Any] | None = None
) -> Completion:
    """Ask for the final answer: a plain completion of a prompt that ends in ``Answer:``; the caller keeps its first
    non-empty line (:func:`answer_line`). Base models continue such a prompt, where in a chat turn a small one tends to
    echo the instruction. No newline stop: a model that starts with a line break would answer ""."""
    context.check_llm_budget()
    return await context.llm.complete(
        prompt, stop=("\n\n\n",), max_tokens=max_tokens, deadline=context.deadline, extra=extra
    )


def text_step(kind: StepKind, completion: Completion, prompt: str, **fields: Any) -> Step:
    return Step.from_completion(kind, completion, prompt_chars=len(prompt), **fields)


def typed_final(question: str, line: str, details: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """Clean the final answer line and fit it to the question's type
    (:func:`~hopsearch.service.strategies.answer_types.typed_answer`; the type the model chose where ``details`` carries
    one, ``answer_type_by: model``), and return it with the step fields that record it: ``answer_type``, and in
    ``details`` the candidates of a choice and the raw line where it changed."""
    merged = dict(details) if details is not None else {}
    chosen = merged.get("model_answer_type")
    shape = AnswerShape(chosen) if chosen in {"date", "number", "yes_no"} else None
    answer, shape = typed_answer(line, question, shape)
    if shape.candidates:
        merged["candidates"] = list(shape.candidates)
    if answer != line:
        merged["raw_answer"] = line
    return answer, {"answer_type": shape.type, "details": merged or None}


async def final_answer(
    context: RunContext,
    prompt: str,
    *,
    depth: int,
    decided_by: str,
    details: Mapping[str, Any] | None = None,
) -> str:
    """Make the final answer call (:func:`ask_answer`, constrained to the question's type where the server allows it:
    :func:`~hopsearch.service.strategies.answer_guides.guided_answer`), recorded as the ``answer`` step; return its
    :func:`answer_line` cleaned and fitted to the question's type (:func:`typed_final`)."""
    question = context.recorder.question

    async def generate(extra: Mapping[str, Any]) -> Completion:
        return await ask_answer(context, prompt, max_tokens=context.options.max_tokens, extra=extra)

    done, how = await guided_answer(
        context.llm, question, generate, prompt=prompt, deadline=context.deadline, model_types=context.answer_type_model
    )
    answer, fields = typed_final(question, answer_line(done.text), {**(details or {}), **how})
    step = text_step("answer", done, prompt, depth=depth, decision="final", decided_by=decided_by, **fields)
    context.recorder.add(step)
    return answer


def read_reply(
    context: RunContext,
    kind: StepKind,
    reply: JsonReply,
    prompt: str,
    reader: Callable[[Mapping[str, Any]], T],
    *,
    name: str,
    depth: int = 0,
) -> T:
    """``reader(reply.value)``; a value that parses as JSON but cannot be used (a wrong type) is
    recorded as the role's failed step before the :class:`LLMOutputError` propagates."""
    try:
        return reader(reply.value)
    except LLMOutputError as exc:
        context.recorder.add(json_step(kind, reply, prompt, name=name, depth=depth, error=str(exc)))
        raise
