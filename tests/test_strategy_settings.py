"""Strategies read no settings through their LLM client: what they need is passed in (the registry
passes the ``answer_type_model`` setting to every strategy it builds)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hopsearch.service.config.settings import Settings
from hopsearch.service.llm import LLMClient
from hopsearch.service.strategies.base import RecordedStrategy
from hopsearch.service.strategies.registry import STRATEGIES, build_strategy
from hopsearch.service.types import Hit, RetrievalQuery, SearchResult

STRATEGIES_DIR = Path(__file__).resolve().parents[1] / "service" / "strategies"


def settings_reads(path: Path) -> list[str]:
    """Every ``<x>.settings`` read in ``path`` (``llm.settings``, ``self.llm.settings``, ``context.llm.settings``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr == "settings":
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_strategy_reads_settings_through_the_llm_client() -> None:
    files = sorted(STRATEGIES_DIR.glob("*.py"))
    assert len(files) > 5  # the folder is found
    assert [hit for f in files for hit in settings_reads(f)] == []


class NoSearch:
    def bind(self, scope: object) -> NoSearch:
        return self

    async def search(self, queries: tuple[RetrievalQuery, ...]) -> tuple[SearchResult, ...]:
        return ()

    async def retrieve(self, query: RetrievalQuery) -> tuple[Hit, ...]:
        return ()


@pytest.mark.parametrize("typed", [True, False])
async def test_the_registry_passes_answer_type_model_to_every_strategy(typed: bool) -> None:
    settings = Settings(answer_type_model=typed, llm_base_url="http://127.0.0.1:9/v1")
    async with LLMClient(settings) as llm:
        for name in STRATEGIES:
            strategy = build_strategy(name, llm=llm, retriever=NoSearch(), sink=None, settings=settings)  # type: ignore[arg-type]
            assert isinstance(strategy, RecordedStrategy) and strategy.answer_type_model is typed, name
