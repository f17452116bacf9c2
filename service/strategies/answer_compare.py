"""Yes/no questions that compare one attribute of two named things — "Are A and B located in the same
country?", "Did A and B have the same nationality?", "Do both films A and B have the directors from
the same country?" — answered by asking for the attribute of each and comparing the two answers in
code, instead of asking the model for yes or no (issue 19).

A small model asked "yes or no?" says yes to nearly every such question (Gemma 3 270M: every one of
the shared 2Wiki questions); asked "Which country is A from?" it reads the passage. :func:`comparison_parts`
reads the question by rules (English only); :func:`compare_answer` asks the two sub-questions in the
final-answer prompt in place of the question, and says yes when the two answers name the same thing.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from hopsearch.service.llm import Completion, LLMClient, Usage
from hopsearch.service.strategies.answer_types import NO_ANSWERS, clean_answer, says_yes_or_no

_SAME = re.compile(r"\bsame\s+(?P<attr>country|nationality)\b", re.IGNORECASE)
_HEAD = re.compile(
    r"^\s*(?:are|do|did|is|were|was)\s+(?:the\s+)?(?:both\s+)?(?:the\s+)?"
    r"(?:(?:villages|movies|films|people|bands|schools)\s*[,:]?\s+)?",
    re.IGNORECASE,
)
_DIRECTORS_OF = re.compile(r"^(?:the\s+)?directors\s+of\s+films?\s+", re.IGNORECASE)
_TAIL = re.compile(
    r"[\s,]*(?:\bboth\b\s+)?(?:\bfilms?\b\s+)?(?:\blocated\b|\bfrom\b|\bhave\b|\bshare\b|\boriginate\b|\bhad\b).*$",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Comparison:
    """The two things a yes/no question compares and the sub-question asked of each."""

    first: str
    second: str
    attribute: str  # country or nationality
    located: bool = False

    def sub_question(self, thing: str) -> str:
        if self.attribute == "nationality":
            return f"What is the nationality of {thing}?"
        return f"In which country is {thing} located?" if self.located else f"Which country is {thing} from?"


def comparison_parts(question: str) -> Comparison | None:
    """Return the two things and the attribute of a same-country / same-nationality yes/no question; None for any other
    question (or where the two things cannot be told apart)."""
    text = " ".join(question.split()).rstrip("?？ ")
    same = _SAME.search(text)
    if same is None:
        return None
    head = _HEAD.match(text)
    if head is None:
        return None
    body = text[head.end() :]
    directors = bool(_DIRECTORS_OF.match(body)) or bool(re.search(r"\bdirectors?\b", body[body.find(" and ") :]))
    body = _DIRECTORS_OF.sub("", body)
    cut = _SAME.search(body)
    pair = _TAIL.sub("", body[: cut.start()] if cut else body)
    if " and " not in pair:
        return None
    first, second = (part.strip(" ,:") for part in pair.split(" and ", 1))
    if not first or not second or first.casefold() == second.casefold():
        return None
    if directors:
        first, second = (_director(part) for part in (first, second))
    located = bool(re.search(r"\blocated\b", text, re.IGNORECASE))
    return Comparison(first, second, same["attr"].casefold(), located)


def _director(thing: str) -> str:
    if thing.casefold().startswith("the director"):
        return thing
    return f"the {thing}" if thing.casefold().startswith("director") else f"the director of film {thing}"


def same_thing(a: str, b: str) -> bool:
    """Whether two short answers name the same country or nationality: case, punctuation and a leading
    "the" ignored; a place given with its region ("Khuzestan Province, Iran") counts by its last part."""

    def key(text: str) -> str:
        last = text.split(",")[-1]
        words = re.findall(r"\w+", last.casefold())
        return " ".join(words[1:] if words[:1] == ["the"] else words)

    return bool(key(a)) and key(a) == key(b)


async def compare_answer(
    llm: LLMClient,
    question: str,
    prompt: str,
    parts: Comparison,
    *,
    deadline: float | None,
    max_tokens: int = 24,
) -> tuple[Completion, dict[str, str]] | None:
    """Ask the prompt's question of each thing (the prompt with the sub-question in place of the
    question) and answer yes when both answers name the same thing, no otherwise. None when the prompt
    does not hold the question or a sub-answer is no answer or a bare yes/no (the caller asks yes/no instead)."""
    asked = " ".join(question.split())
    if asked not in prompt:
        return None
    started = time.monotonic()
    found: dict[str, str] = {}
    done: list[Completion] = []
    for thing in (parts.first, parts.second):
        sub = parts.sub_question(thing)
        reply = await llm.complete(prompt.replace(asked, sub), stop=("\n",), max_tokens=max_tokens, deadline=deadline)
        line = next((line.strip() for line in reply.text.splitlines() if line.strip()), "")
        answer = clean_answer(line, sub)
        if not answer or answer in NO_ANSWERS or says_yes_or_no(answer):  # "no" and "no" are not the same country
            return None
        found[thing] = answer
        done.append(reply)
    verdict = "yes" if same_thing(found[parts.first], found[parts.second]) else "no"
    usage = Usage()
    for reply in done:
        usage = usage + reply.usage
    attempts = tuple(a for reply in done for a in reply.attempts)
    merged = Completion.decided(
        verdict, usage=usage, attempts=attempts, started=started, model=done[-1].model, calls=sum(r.calls for r in done)
    )
    return merged, found
