"""A chat conversation as one question (``/v1/chat/completions``).

- The question is the **last user message**. Earlier user and assistant turns condense into it: they follow
  it as ``(earlier in this conversation: Q: …; A: …)``, the most recent turns kept first, the oldest dropped
  (the one that no longer fits cut with ``…``) so that the whole stays within ``api_max_question_chars``;
  whitespace is collapsed (one line: strategies' formats are line based). An assistant turn loses its
  ``References:`` block (the service's own). A last message over the limit is a 400 naming it.
- System and developer messages are never instructions to the strategies: they are counted and dropped,
  like tool and function messages.
- The trace records, under ``scope.conversation``, the last message as sent, how many earlier turns there
  were, how many the question kept, and how many system messages were dropped; the trace's ``question`` is
  the condensed question (what the strategy answered).
- A front end's auxiliary *task* (Open WebUI asks the chat's model for titles, tags, follow-ups and search
  queries with a prompt that starts ``### Task:``) runs no strategy and writes no trace: :func:`task_reply`
  answers it with one JSON object every such task parses (a title from the first question, no tags, no
  follow-ups, no queries).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hopsearch.service.errors import RequestInvalid

#: How Open WebUI's task prompts begin (titles, tags, follow-ups, search queries, autocompletion).
TASK_MARKERS = ("### Task:",)
#: Where an answer of this service ends its text and starts its references (dropped from earlier turns).
REFERENCES = "\n\nReferences:"
_EARLIER = " (earlier in this conversation: {})"
_HISTORY_USER = re.compile(r"^\s*USER:\s*(.+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Conversation:
    question: str
    message: str
    earlier: int = 0
    kept: int = 0
    system_ignored: int = 0

    def to_trace(self) -> dict[str, Any]:
        return {
            "interface": "openai_chat",
            "message": self.message,
            "earlier_turns": self.earlier,
            "turns_kept": self.kept,
            "system_ignored": self.system_ignored,
        }


def text_of(content: Any) -> str:
    """Return a message's text: a string, or the ``text`` of its content parts (images and audio are not read)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") in ("text", "input_text")]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def last_user(messages: Sequence[Any]) -> tuple[int, str]:
    """(position, text) of the last user message; a 400 naming ``messages`` where there is none."""
    for number in range(len(messages) - 1, -1, -1):
        if messages[number].role == "user":
            return number, text_of(messages[number].content)
    raise RequestInvalid("no user message: the last user message is the question", field="messages")


def condense(messages: Sequence[Any], limit: int) -> Conversation:
    """Return the question of ``messages`` (objects with ``role`` and ``content``) within ``limit`` characters."""
    number, text = last_user(messages)
    question = _one_line(text)
    where = f"messages.{number}.content"
    if not question:
        raise RequestInvalid("the last user message has no text", field=where)
    if len(question) > limit:
        raise RequestInvalid(f"longer than {limit} characters (HOPSEARCH_API_MAX_QUESTION_CHARS)", field=where)
    turns: list[str] = []
    for message in messages[:number]:
        if message.role in ("user", "assistant"):
            said = _one_line(text_of(message.content).split(REFERENCES, 1)[0])
            if said:
                turns.append(("Q: " if message.role == "user" else "A: ") + said)
    system = sum(1 for m in messages if m.role in ("system", "developer"))
    kept = _fit(turns, limit - len(question) - len(_EARLIER.format("")))
    condensed = question + _EARLIER.format("; ".join(kept)) if kept else question
    return Conversation(condensed, text, len(turns), len(kept), system)


def _fit(turns: Sequence[str], room: int) -> list[str]:
    """Return the most recent ``turns`` that fit ``room`` characters (joined by ``; ``), in their order; the
    oldest kept is cut with ``…`` where a part of it still fits."""
    kept: list[str] = []
    for turn in reversed(turns):
        need = len(turn) + (2 if kept else 0)
        if need <= room:
            kept.insert(0, turn)
            room -= need
            continue
        cut = room - (2 if kept else 0) - 1
        if cut >= 12:
            kept.insert(0, turn[:cut].rstrip() + "…")
        break
    return kept


def is_task(message: str) -> bool:
    """Whether a last user message is a front end's auxiliary task (see the module docstring)."""
    return message.lstrip().startswith(TASK_MARKERS)


def task_reply(message: str) -> str:
    """Return the reply to a task: ``{"title", "tags", "follow_ups", "queries"}`` (the title: the first words of the
    chat history's first user line, where the prompt holds one)."""
    found = _HISTORY_USER.search(message.split("<chat_history>", 1)[-1])
    words = found.group(1).split()[:6] if found else []
    title = " ".join(words).strip(" ?.!,") or "Question"
    return json.dumps({"title": title, "tags": [], "follow_ups": [], "queries": []}, ensure_ascii=False)
