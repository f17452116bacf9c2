"""Test helpers for the LLM and strategy tests: scripted DeepRAG "models", a small in-memory
retriever (for tests that do not need Elasticsearch) and settings pointing at a scripted server."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from hopsearch.service.access import Scope
from hopsearch.service.config.settings import Settings, load_settings
from hopsearch.service.llm import StopFallback
from hopsearch.service.types import Hit, RetrievalQuery, SearchResult
from tests.scripted_llm import ScriptedLLM, ScriptRequest

#: Server flavours the strategy tests run over: vLLM-like (``stop_reason``) and llama.cpp-like
#: (no ``stop_reason``) with each fallback.
FLAVOURS = ["vllm", "llamacpp-stream", "llamacpp-followup", "llamacpp-cut"]
EXPECTED_METHOD = {
    "vllm": "stop_reason",
    "llamacpp-stream": "fallback-stream",
    "llamacpp-followup": "fallback-followup",
    "llamacpp-cut": "fallback-cut",
}


@dataclass(frozen=True)
class PlanStep:
    sub_query: str
    action: Literal["search", "intermediate"]
    answer: str


class DeepRAGModel:
    """A scripted model that writes the DeepRAG format, one plan step per follow-up.

    It reads the transcript like the real model would: after ``Intermediate answer:`` it writes the
    current step's answer; after ``So the final answer is:`` the final answer; after a bare
    ``Follow up:`` line (a stop follow-up) the marker of that step; otherwise the next follow-up and
    its marker — or the final marker once the plan is done. ``endless`` keeps asking follow-ups.
    Every output rambles on past the point where a stop string should cut it.
    """

    def __init__(self, plan: Sequence[PlanStep], final: str, *, endless: bool = False) -> None:
        self.plan = list(plan)
        self.final = final
        self.endless = endless

    def step(self, number: int) -> PlanStep | None:
        if number < len(self.plan):
            return self.plan[number]
        if self.endless:
            return PlanStep(f"endless sub-question {number}", "search", f"answer {number}")
        return None

    @staticmethod
    def marker(step: PlanStep) -> str:
        if step.action == "search":
            return "Let's search the question in Wikipedia."
        return f"Intermediate answer: {step.answer}"

    def __call__(self, request: ScriptRequest) -> str:
        prompt = request.prompt
        asked = prompt.count("\nFollow up:")
        if prompt.endswith("So the final answer is:"):
            return f" {self.final}\nQuestion: something else entirely"
        if prompt.endswith("Intermediate answer:"):
            current = self.step(asked - 1)
            return f" {current.answer if current else 'unknown'}\nFollow up: rambling on"
        if prompt.rsplit("\n", 1)[-1].startswith("Follow up:"):
            current = self.step(asked - 1)
            return "\n" + (self.marker(current) if current else "So the final answer is: x") + " and more"
        upcoming = self.step(asked)
        if upcoming is None:
            return f"\nSo the final answer is: {self.final}\nQuestion: next"
        return f"\nFollow up: {upcoming.sub_query}\n{self.marker(upcoming)} and then more text"


_WORD = re.compile(r"\w+")


class ListRetriever:
    """A small term-overlap retriever over a list of passages (a real ``Retriever``, no ES)."""

    def __init__(self, passages: Sequence[tuple[str, str, str]]) -> None:
        self.passages = [Hit(id=i, score=0.0, title=t, text=x) for i, t, x in passages]
        self.queries: list[str] = []
        #: The scope of every run bound to this retriever (what the run's request named).
        self.scopes: list[Scope] = []

    def bind(self, scope: Scope) -> ListRetriever:
        self.scopes.append(scope)
        return self

    async def search_many(self, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        started = time.monotonic()
        results = []
        for query in queries:
            self.queries.append(query.text)
            words = {w.lower() for w in _WORD.findall(query.text)}
            scored = []
            for hit in self.passages:
                overlap = len(words & {w.lower() for w in _WORD.findall(hit.title + " " + hit.text)})
                scored.append(Hit(hit.id, float(overlap), hit.title, hit.text))
            scored.sort(key=lambda h: -h.score)
            took = (time.monotonic() - started) * 1000
            results.append(SearchResult(query, tuple(scored[: query.k]), "bm25", "none", took))
        return results


PASSAGES = [
    ("p-jaws", "Jaws (film)", "Jaws is a 1975 American thriller film directed by Steven Spielberg."),
    ("p-spielberg", "Steven Spielberg", "Steven Allan Spielberg (born December 18, 1946) is a filmmaker."),
    ("p-lethal", "Lethal Weapon", "Lethal Weapon is a 1987 action film directed by Richard Donner."),
    ("p-donner", "Richard Donner", "Richard Donner (1930-2021) was an American film director."),
    ("p-lethal2", "Lethal Weapon 2", "Lethal Weapon 2 is a 1989 sequel, again directed by Richard Donner."),
]


def server_for(flavour: str, script: Any, **faults: Any) -> ScriptedLLM:
    return ScriptedLLM(script, report_stop_reason=flavour == "vllm", **faults)


def fallback_for(flavour: str) -> StopFallback:
    """The stop-string fallback a flavour's strategies are built with (as the registry does from settings)."""
    return flavour.rsplit("-", 1)[-1] if flavour.startswith("llamacpp-") else "stream"  # type: ignore[return-value]


def settings_for(server: ScriptedLLM | Sequence[ScriptedLLM], flavour: str = "vllm", **overrides: Any) -> Settings:
    servers = [server] if isinstance(server, ScriptedLLM) else list(server)
    values: dict[str, Any] = {
        "llm_base_url": [s.base_url for s in servers],
        "llm_model": "scripted",
        "llm_engine": "auto",
        "llm_timeout": 5.0,
        "llm_retries": 3,
        "llm_backoff_base": 0.01,
        "llm_backoff_max": 0.05,
        "llm_stop_fallback": fallback_for(flavour),
        "state_dir": Path("/nonexistent-state"),
        "seed": False,  # the strategies' own loops; seeded runs have their tests (test_seed_es.py)
    }
    values.update(overrides)
    return load_settings(**values)
