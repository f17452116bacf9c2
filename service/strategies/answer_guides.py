"""Final answers constrained to the question's type where the type allows it (issue 19).

:func:`guide_for` turns an :class:`~hopsearch.service.strategies.answer_types.AnswerShape` into a
:class:`~hopsearch.service.llm.guided.Guide`: a ``choice`` is one of the named candidates, ``yes_no``
is yes / no (はい / いいえ for a Japanese question), a ``date`` and a ``number`` follow a pattern
(English only: see :func:`guide_for`); ``text`` has none. Patterns are built once as small
expressions rendered both as a regular expression (vLLM) and as GBNF (llama.cpp), so both servers get
the same language. A leading space is allowed: after ``Answer:`` a model's likeliest first token starts
with one.

:func:`guided_answer` runs a strategy's final-answer call under the guide (vLLM guided decoding,
a llama.cpp grammar), or where the server has neither, picks the likeliest candidate of a choice or
yes/no from the server's logprobs (:func:`~hopsearch.service.llm.guided.score_candidates`); where
that fails too, the call runs as before and the post-hoc fit (:func:`match_shape`) applies. What was
done is returned for the trace (``details.constrained``: structured_outputs, guided, grammar,
logprobs, none; ``free`` for a choice the unconstrained reply already named).

A ``choice`` is first generated freely and constrained only where the reply names neither candidate: a
grammar commits to a candidate by its first token, and the 270M model then picks the first-named one
more often than its free reply does. A ``date`` that asks for a day (not "what year") is a choice among
the dates to the day that the passages hold (:func:`context_dates`): 2WikiMultihopQA's gold dates are
such dates, and the pattern alone let the model write a bare year.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from hopsearch.service.llm import Completion, LLMClient
from hopsearch.service.llm.guided import VLLM_METHODS, Guide, check_obeyed, guided_fields, score_candidates
from hopsearch.service.strategies.answer_compare import compare_answer, comparison_parts
from hopsearch.service.strategies.answer_types import AnswerShape, answer_shape, clean_answer, match_shape
from hopsearch.service.text.lang import detect_lang

MONTHS = "January February March April May June July August September October November December".split()  # noqa: SIM905
NUMBER_WORDS = "one two three four five six seven eight nine ten eleven twelve".split()  # noqa: SIM905


@dataclass(frozen=True, slots=True)
class Pattern:
    """One expression in both notations: ``regex`` (Python / vLLM) and ``gbnf`` (llama.cpp)."""

    regex: str
    gbnf: str


_REGEX_SPECIAL = re.compile(r"([.^$*+?{}\[\]\\|()])")


def lit(text: str) -> Pattern:
    """Return a literal: regex metacharacters escaped (nothing else: regex engines differ on other escapes)."""
    quoted = text.replace("\\", "\\\\").replace('"', '\\"')
    return Pattern(_REGEX_SPECIAL.sub(r"\\\1", text), f'"{quoted}"')


def alt(*parts: Pattern) -> Pattern:
    return Pattern("(" + "|".join(p.regex for p in parts) + ")", "(" + " | ".join(p.gbnf for p in parts) + ")")


def seq(*parts: Pattern) -> Pattern:
    return Pattern("".join(p.regex for p in parts), " ".join(p.gbnf for p in parts))


def opt(part: Pattern) -> Pattern:
    return Pattern(f"({part.regex})?", f"({part.gbnf})?")


def digits(low: int, high: int) -> Pattern:
    """``low`` to ``high`` digits (GBNF spelled out: older llama.cpp grammars have no ``{m,n}``)."""
    return Pattern(f"[0-9]{{{low},{high}}}", " ".join(["[0-9]"] * low + ["[0-9]?"] * (high - low)))


def any_of(characters: str) -> Pattern:
    """Zero or more of the characters of a class such as ``0-9,``."""
    return Pattern(f"[{characters}]*", f"[{characters}]*")


_SPACE = opt(lit(" "))
_MONTH = alt(*(lit(m) for m in MONTHS))
#: "1939", "June 1939", "17 June 1939", "June 17, 1939" — the forms of 2WikiMultihopQA's dates.
_DAY_MONTH = seq(opt(seq(digits(1, 2), lit(" "))), _MONTH, lit(" "), opt(seq(digits(1, 2), lit(", "))))
EN_DATE = seq(opt(_DAY_MONTH), digits(3, 4))
EN_NUMBER = alt(seq(digits(1, 1), any_of("0-9,")), *(lit(w) for w in NUMBER_WORDS))


_MONTH_NAMES = "|".join(MONTHS)
#: A date to the day as English passages write it: "17 June 1939", "June 17, 1939".
_FULL_DATE = re.compile(rf"\b(?:\d{{1,2}} (?:{_MONTH_NAMES}) \d{{3,4}}|(?:{_MONTH_NAMES}) \d{{1,2}}, \d{{3,4}})\b")
#: A question that asks for a year (or coarser), not a day.
_COARSE_DATE = re.compile(r"\b(?:year|decade|century)\b", re.IGNORECASE)
#: At most this many context dates are offered (the first seen).
MAX_DATES = 16


def context_dates(evidence: str, question: str) -> tuple[str, ...]:
    """Return the dates to the day in ``evidence`` (the passages an answer comes from), first seen first, without those
    the question itself names; none for a question that asks for a year, decade or century."""
    if _COARSE_DATE.search(question):
        return ()
    asked = set(_FULL_DATE.findall(question))
    found = dict.fromkeys(date for date in _FULL_DATE.findall(evidence) if date not in asked)
    return tuple(found)[:MAX_DATES]


def names_candidate(text: str, shape: AnswerShape, question: str) -> bool:
    """Whether a reply's first line, cleaned, names exactly one of a choice's candidates."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    return match_shape(clean_answer(first, question), shape, question) in shape.candidates


def _guide(pattern: Pattern, choice: tuple[str, ...] = ()) -> Guide:
    whole = seq(_SPACE, pattern)
    return Guide(grammar=f"root ::= {whole.gbnf}\n", choice=choice, regex=None if choice else whole.regex)


def guide_for(shape: AnswerShape, question: str, evidence: str = "") -> Guide | None:
    """Return the constraint of a final answer of ``shape``; None for free text. ``evidence``: the passages the answer
    comes from (a date is one of theirs where they hold dates to the day)."""
    japanese = detect_lang(question) == "ja"
    dates = context_dates(evidence, question) if shape.type == "date" and not japanese else ()
    if shape.type == "choice" and shape.candidates:
        choice = tuple(shape.candidates)
    elif shape.type == "yes_no":
        choice = ("はい", "いいえ") if japanese else ("yes", "no", "Yes", "No")
    elif japanese:
        # Japanese documents write 三十キログラム, ２０２６年２月, 毎月末日, 週四日: a digits pattern would
        # rule out the answer as written (tests/data/ja_questions.jsonl), so a date or number stays free.
        return None
    elif dates:
        choice = dates
    elif shape.type == "date":
        return _guide(EN_DATE)
    elif shape.type == "number":
        return _guide(EN_NUMBER)
    else:
        return None
    return _guide(alt(*(lit(c) for c in choice)), choice)


#: ``generate(extra)``: the strategy's own final-answer call with ``extra`` request fields added.
Generate = Callable[[Mapping[str, Any]], Awaitable[Completion]]


async def guided_answer(
    llm: LLMClient,
    question: str,
    generate: Generate,
    *,
    prompt: str | None,
    deadline: float | None,
    compare: bool = True,
    evidence: str | None = None,
    model_types: bool = False,
) -> tuple[Completion, dict[str, Any]]:
    """Ask for the final-answer completion, constrained to the question's type where the server allows it, and return it
    with the trace details saying how (``constrained``; ``scores`` for a logprob comparison, ``compared`` for a
    same-country / same-nationality question answered by comparing two sub-answers,
    :mod:`~hopsearch.service.strategies.answer_compare`). ``prompt``: the completion prompt a logprob comparison
    continues and the sub-questions are asked in (None where the call is a chat turn). ``evidence``: the passages the
    answer comes from (default: ``prompt``; a prompt with demonstrations passes its own passages only). ``model_types``:
    the model chooses the type the rules read as free text (the ``answer_type_model`` setting, passed in by the
    strategy)."""
    shape = answer_shape(question)
    parts = comparison_parts(question) if compare and shape.type == "yes_no" and prompt is not None else None
    if parts is not None and prompt is not None:
        compared = await compare_answer(llm, question, prompt, parts, deadline=deadline)
        if compared is not None:
            done, found = compared
            return done, {"constrained": "compare", "compared": found}
    chose: dict[str, Any] = {}
    earlier: Completion | None = None  # a call of this answer made before the last one (counted in)
    if shape.type == "text" and model_types:
        shape, chose, earlier = await model_shape(llm, question, deadline=deadline)

    async def generate_counted(extra: Mapping[str, Any]) -> Completion:
        return joined(earlier, await generate(extra))

    guide = guide_for(shape, question, (prompt or "") if evidence is None else evidence)
    if guide is None:
        return await generate_counted({}), chose
    if shape.type == "choice":
        free = await generate_counted({})
        if names_candidate(free.text, shape, question):
            return free, {**chose, "constrained": "free"}
        earlier, chose = free, {**chose, "free_output": free.text}
    fields, method = await guided_fields(llm, guide)
    if method != "none":
        done = check_obeyed(await generate_counted(fields), guide, method, await release_of(llm, method))
        return done, {**chose, "constrained": method}
    if guide.choice and prompt is not None:
        scored = await score_candidates(llm, prompt, guide.choice, deadline=deadline)
        if scored is not None:
            done, scores = scored
            rounded = {c: round(v, 4) for c, v in scores.items()}
            return joined(earlier, done), {**chose, "constrained": "logprobs", "scores": rounded}
    if shape.type == "choice" and earlier is not None:  # the free reply stands: nothing can constrain it
        return earlier, {**chose, "constrained": "none"}
    return await generate_counted({}), {**chose, "constrained": "none"}


async def release_of(llm: LLMClient, method: str) -> str | None:
    """Return the vLLM release (read once by the client) where ``method`` is vLLM's guided decoding."""
    return await llm.server_version() if method in VLLM_METHODS else None


def joined(before: Completion | None, done: Completion) -> Completion:
    """``done`` with an earlier call of the same answer counted in (its calls, tokens, attempts, time)."""
    if before is None:
        return done
    return replace(
        done,
        calls=done.calls + before.calls,
        usage=before.usage + done.usage,
        attempts=before.attempts + done.attempts,
        latency_ms=round(before.latency_ms + done.latency_ms, 3),
    )


#: The model's choice of answer type -> the type (``answer_type_model``).
TYPE_CHOICES = {"a date": "date", "a number": "number", "yes or no": "yes_no", "a name": "text"}


def type_prompt(question: str) -> str:
    return (
        f"Question: {' '.join(question.split())}\n"
        "Does the question ask for a date, a number, yes or no, or a name?\nIt asks for:"
    )


async def model_shape(
    llm: LLMClient, question: str, *, deadline: float | None
) -> tuple[AnswerShape, dict[str, Any], Completion | None]:
    """Let the model choose the answer type for a question the rules read as free text: one call constrained to the four
    kinds (on a server without constraints: no call, free text). The details record the choice (``model_answer_type``,
    ``answer_type_by: model``, the call's output); the call itself is returned to be counted with the answer."""
    guide = _guide(alt(*(lit(c) for c in TYPE_CHOICES)), tuple(TYPE_CHOICES))
    fields, method = await guided_fields(llm, guide)
    if method == "none":
        return AnswerShape("text"), {}, None
    done = await llm.complete(type_prompt(question), max_tokens=8, deadline=deadline, extra=fields)
    done = check_obeyed(done, guide, method, await release_of(llm, method))
    chosen = TYPE_CHOICES.get(done.text.strip().casefold(), "text")
    details = {"answer_type_by": "model", "model_answer_type": chosen, "type_output": done.text}
    return AnswerShape(chosen), details, done  # type: ignore[arg-type]
