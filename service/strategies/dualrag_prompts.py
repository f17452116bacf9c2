"""DualRAG's four LLM roles: prompts, JSON schemas and tolerant readers of the replies.

Reasoner → ``{thought, need_retrieve}``; Entity Identifier → ``{entities: [{entity, keywords,
same_as}]}``; Knowledge Summarizer → free text, or exactly "None" when the passages say nothing
relevant; the final answer → one short line. The schemas carry length bounds so a small model under a
grammar cannot ramble past ``max_tokens`` (they are dropped for OpenAI, see ``steps.schema_for``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hopsearch.service.errors import LLMOutputError
from hopsearch.service.strategies.steps import distinct_texts, in_question_language, text_of
from hopsearch.service.types import Hit

MAX_ENTITIES = 4
MAX_KEYWORDS = 3
#: What the prompts themselves say, which a small model copies as a value instead of thinking of one:
#: the reply's keys, the identifier's kinds of entity, the fillers of an empty outline, reasoning or
#: entity list (``(none yet)``). With them, the one-letter stand-ins it writes for "1 to 3" things
#: (the local model searched "a | b | c"). An entity or keyword that is only these is dropped.
PROMPT_WORDS = frozenset(
    {
        "thought", "need_retrieve", "entity", "entities", "keyword", "keywords", "same_as",
        "people", "person", "works", "work", "places", "place", "organisations", "organisation",
        "organizations", "organization", "name", "search query", "search queries", "short search queries",
        "query", "queries", "none", "none yet", "nothing known yet", "known entities", "known entity",
    }
)  # fmt: skip
_PARTS = re.compile(r"[|,;/]")

REASONER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "thought": {"type": "string", "maxLength": 300},
        "need_retrieve": {"type": "boolean"},
    },
    "required": ["thought", "need_retrieve"],
    "additionalProperties": False,
}

IDENTIFIER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "entities": {
            "type": "array",
            "maxItems": MAX_ENTITIES,
            "items": {
                "type": "object",
                "properties": {
                    "entity": {"type": "string", "maxLength": 80},
                    "keywords": {
                        "type": "array",
                        "maxItems": MAX_KEYWORDS,
                        "items": {"type": "string", "maxLength": 80},
                    },
                    "same_as": {"type": "string", "maxLength": 80},
                },
                "required": ["entity", "keywords", "same_as"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["entities"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class Reasoning:
    thought: str
    need_retrieve: bool


@dataclass(frozen=True, slots=True)
class EntityQuery:
    """An entity the missing knowledge is about, the searches for it, and the known entity it is."""

    entity: str
    keywords: tuple[str, ...]
    same_as: str | None = None


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return bool(value)
    text = str(value).strip().casefold()
    if text in ("true", "yes", "1"):
        return True
    if text in ("false", "no", "0", ""):
        return False
    raise LLMOutputError(f"need_retrieve must be true or false, got {value!r}", details={"value": value})


def read_reasoning(value: Mapping[str, Any]) -> Reasoning:
    return Reasoning(text_of(value.get("thought")), _flag(value.get("need_retrieve")))


def copied_from_prompt(text: str) -> bool:
    """Whether ``text`` is only words of the prompt itself (:data:`PROMPT_WORDS`) or one-letter stand-ins."""
    parts = [part.strip(" \"'()[]{}.:`") for part in _PARTS.split(text.casefold())]
    parts = [part for part in parts if part]
    return not parts or all(part in PROMPT_WORDS or (len(part) == 1 and part.isascii()) for part in parts)


def prompt_copies(value: Mapping[str, Any]) -> list[str]:
    """Return the entity names and keywords of an identifier reply that :func:`read_entities` drops as copied from the
    prompt (the step lists them)."""
    raw = value.get("entities")
    copies: list[str] = []
    for item in raw[:MAX_ENTITIES] if isinstance(raw, list) else []:
        if isinstance(item, str):
            item = {"entity": item}
        if not isinstance(item, Mapping):
            continue
        name = text_of(item.get("entity"))
        for text in [name, *distinct_texts(item.get("keywords"))] if name else []:
            if copied_from_prompt(text) and text not in copies:
                copies.append(text)
    return copies


def read_entities(value: Mapping[str, Any]) -> list[EntityQuery]:
    """Return the identified entities (empty names dropped, keywords de-duplicated and capped; names and keywords copied
    from the prompt dropped: an entity without keywords of its own searches its name)."""
    raw = value.get("entities")
    if not isinstance(raw, list):
        raise LLMOutputError("entities must be a list", details={"value": dict(value)})
    found: list[EntityQuery] = []
    for item in raw[:MAX_ENTITIES]:
        if isinstance(item, str):
            item = {"entity": item, "keywords": []}
        if not isinstance(item, Mapping):
            continue
        name = text_of(item.get("entity"))
        if not name or copied_from_prompt(name):
            continue
        keywords = [word for word in distinct_texts(item.get("keywords")) if not copied_from_prompt(word)]
        same_as = text_of(item.get("same_as")) or None
        same_as = None if same_as is None or copied_from_prompt(same_as) else same_as
        found.append(EntityQuery(name, tuple(keywords[:MAX_KEYWORDS]) or (name,), same_as))
    return found


def is_none(summary: str) -> bool:
    """Tell whether the summary is exactly "None": case-insensitive, surrounding whitespace and trailing periods ignored
    ("None.", " none " → True; "Nonetheless, …", "None of the passages" → False)."""
    return summary.strip().rstrip(".").strip().casefold() == "none"


def _thoughts(thoughts: Sequence[str]) -> str:
    if not thoughts:
        return "(none yet)"
    return "\n".join(f"{number}. {thought}" for number, thought in enumerate(thoughts, start=1))


def _outline(outline: str) -> str:
    return outline or "(nothing known yet)"


def _found(passages: Sequence[Hit]) -> str:
    """Return the passages of the question's own retrieval (a seeded run), as a block before the outline."""
    return f"Passages found for the question:\n{passages_block(passages)}\n\n" if passages else ""


def reasoner_prompt(question: str, outline: str, thoughts: Sequence[str], passages: Sequence[Hit] = ()) -> str:
    return in_question_language(
        question,
        (
            "You answer a multi-hop question one reasoning step at a time.\n\n"
            f"Question: {question}\n\n{_found(passages)}Knowledge outline:\n{_outline(outline)}\n\n"
            f"Reasoning so far:\n{_thoughts(thoughts)}\n\n"
            'Write the next reasoning step as "thought". Set "need_retrieve" to true when knowledge needed '
            "for the answer is still missing from the outline, false when the outline and the reasoning "
            "are enough to answer.\nReply with one JSON object with the keys thought and need_retrieve."
        ),
    )


def identifier_prompt(question: str, outline: str, thoughts: Sequence[str], known: Sequence[str]) -> str:
    entities = "; ".join(known) if known else "(none)"
    return in_question_language(
        question,
        (
            "Find the entities (people, works, places, organisations) the missing knowledge is about.\n\n"
            f"Question: {question}\n\nKnowledge outline:\n{_outline(outline)}\n\n"
            f"Reasoning so far:\n{_thoughts(thoughts)}\n\nKnown entities: {entities}\n\n"
            f'For each entity give "entity" (its name), "keywords" (1 to {MAX_KEYWORDS} short search '
            'queries about it) and "same_as" (the known entity it is, when it is one under another name; '
            'otherwise "").\nReply with one JSON object with the key entities: a list of objects with the '
            "keys entity, keywords and same_as."
        ),
    )


def passages_block(hits: Sequence[Hit]) -> str:
    return "\n".join(
        f"[{number}] {' '.join(hit.title.split())}: {' '.join(hit.text.split())}"
        for number, hit in enumerate(hits, start=1)
    )


def summarizer_prompt(question: str, entity: str, outline: str, thoughts: Sequence[str], hits: Sequence[Hit]) -> str:
    return in_question_language(
        question,
        (
            f"Question: {question}\n\nKnowledge outline:\n{_outline(outline)}\n\n"
            f"Reasoning so far:\n{_thoughts(thoughts)}\n\n"
            f"Passages about {entity}:\n{passages_block(hits)}\n\n"
            f"In one to three sentences, write what these passages say about {entity} that helps answer "
            "the question. If they say nothing relevant, reply exactly: None"
        ),
    )


#: What the summarizer's prompt itself says (its headings and instructions, the Japanese note, an empty
#: outline's filler), casefolded: a summary holding one restates the prompt, it is no fact.
PROMPT_ECHOES = (
    "knowledge outline:",
    "reasoning so far:",
    "passages about ",
    "in one to three sentences",
    "reply exactly: none",
    "nothing known yet",
    "the question is in japanese",
    "日本語で答えてください",
    "question:",
)


def is_echo(summary: str, question: str) -> bool:
    """Whether ``summary`` restates the summarizer's prompt — one of its instructions or headings
    (:data:`PROMPT_ECHOES`) or the whole question — rather than saying what the passages say."""
    text = " ".join(unicodedata.normalize("NFKC", summary).casefold().split())
    asked = " ".join(unicodedata.normalize("NFKC", question).casefold().split()).rstrip("?？ ")
    return any(echo in text for echo in PROMPT_ECHOES) or (len(asked) >= 8 and asked in text)


def answer_prompt(question: str, outline: str, thoughts: Sequence[str], passages: Sequence[Hit] = ()) -> str:
    return in_question_language(
        question,
        (
            f"Question: {question}\n\n{_found(passages)}Knowledge outline:\n{_outline(outline)}\n\n"
            f"Reasoning:\n{_thoughts(thoughts)}\n\n"
            "Answer the question with a short answer only (a name, a date, yes or no), on one line.\nAnswer:"
        ),
    )
