"""Scripted "models" for the chat strategies (DualRAG, iterative, HyDE): each reads the prompt like the
real model would, tells the role apart, and answers from a per-role queue.

A reply is a dict (sent as JSON) or a string (sent as is: malformed JSON, prose). When a queue runs
dry the role's default answers. The repair message of ``chat_json`` goes to the role it repairs.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tests.scripted_llm import ScriptRequest

Reply = Mapping[str, Any] | str

ROLE_MARKERS = (
    ("reasoner", "You answer a multi-hop question one reasoning step at a time."),
    ("identifier", "Find the entities (people, works, places, organisations)"),
    ("summarizer", "In one to three sentences, write what these passages say about"),
    ("assess", "Judge whether the passages found so far answer the question."),
    ("decompose", "Split the question into the smallest set of self-contained sub-questions"),
    ("hyde", "Write a short encyclopedia-style passage that answers this question"),
    ("answer", "Answer:"),
)
_ENTITY = re.compile(r"Passages about (.+?):\n")


def role_of(prompt: str) -> str:
    for role, marker in ROLE_MARKERS:
        if marker in prompt:
            return role
    return "unknown"


class ChatModel:
    """Answers each role from its queue; records the roles asked, in order."""

    def __init__(
        self,
        queues: Mapping[str, Sequence[Reply]] | None = None,
        *,
        summaries: Mapping[str, str] | Callable[[str, str], str] | None = None,
        answer: str = "unknown",
        defaults: Mapping[str, Reply] | None = None,
    ) -> None:
        self.queues: dict[str, list[Reply]] = {role: list(items) for role, items in (queues or {}).items()}
        self.summaries = summaries or {}
        self.answer = answer
        self.defaults: dict[str, Reply] = {
            "reasoner": {"thought": "I can answer now.", "need_retrieve": False},
            "identifier": {"entities": []},
            "assess": {"confidence": 0.9, "reasoning": "enough", "missing_info": "", "next_query": ""},
            "decompose": {"sub_queries": []},
        }
        self.defaults.update(defaults or {})
        self.roles: list[str] = []
        self.prompts: Counter[str] = Counter()
        self._last = "unknown"

    def summary(self, entity: str, prompt: str) -> str:
        if callable(self.summaries):
            return self.summaries(entity, prompt)
        return self.summaries.get(entity, "None")

    def __call__(self, request: ScriptRequest) -> str:
        prompt = request.prompt
        role = self._last if prompt.startswith("Your reply could not be used") else role_of(prompt)
        self._last = role
        self.roles.append(role)
        queue = self.queues.get(role)
        if queue:
            reply: Reply = queue.pop(0)
        elif role == "summarizer":
            match = _ENTITY.search(prompt)
            reply = self.summary(match.group(1) if match else "", prompt)
        elif role == "hyde":
            question = prompt.rsplit("Question:", 1)[-1].strip().splitlines()[0]
            reply = f"A passage about {question}"
        elif role == "answer":
            reply = f" {self.answer}\nand some rambling"
        else:
            reply = self.defaults.get(role, "")
        return reply if isinstance(reply, str) else json.dumps(reply)


def reason(thought: str, need: bool) -> dict[str, Any]:
    return {"thought": thought, "need_retrieve": need}


def entities(*items: tuple[str, Sequence[str]] | tuple[str, Sequence[str], str]) -> dict[str, Any]:
    out = []
    for item in items:
        same_as = item[2] if len(item) == 3 else ""
        out.append({"entity": item[0], "keywords": list(item[1]), "same_as": same_as})
    return {"entities": out}


def deep_and_dual_model(fallback: Callable[[ScriptRequest], str]) -> Callable[[ScriptRequest], str]:
    """One script for every strategy where DualRAG really retrieves (once, two entities, outlines
    written): its reasoner, identifier and summarizer roles answer from a :class:`ChatModel`, every
    other request (DeepRAG's format, the JSON roles of the others, the final answers) from ``fallback``."""
    chat = ChatModel(
        {
            "reasoner": [reason("Find who directed Lethal Weapon.", True)],
            "identifier": [
                entities(("Lethal Weapon", ["Lethal Weapon director"]), ("Richard Donner", ["Richard Donner"]))
            ],
        },
        summaries={
            "Lethal Weapon": "Lethal Weapon (1987) was directed by Richard Donner.",
            "Richard Donner": "Richard Donner (1930-2021) was an American film director.",
        },
    )

    def script(request: ScriptRequest) -> str:
        prompt = request.prompt
        if prompt.startswith("Your reply could not be used") or role_of(prompt) in (
            "reasoner",
            "identifier",
            "summarizer",
        ):
            return chat(request)
        return fallback(request)

    return script
