"""Property-based run over the OpenAPI document: schemathesis generates requests for every operation
(valid and invalid ones, at most 25 of each per operation) against a real uvicorn on loopback, over a real
Elasticsearch (8.19) and the scripted LLM. No response may be a 5xx or break the document."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from hopsearch.service.api import create_app
from hopsearch.service.config.settings import Settings
from hopsearch.service.store import Store
from tests.api_fixtures import API_KEY, any_strategy_model, api_settings, load_passages, uvicorn_serving
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.scripted_llm import ScriptedLLM


@dataclass
class Served:
    base_url: str
    settings: Settings
    schema: schemathesis.schemas.BaseSchema
    llm: ScriptedLLM


async def _prepare(settings: Settings, drop: bool = False) -> None:
    store = await Store.connect(settings)
    try:
        if drop:
            await store.client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True)
        else:
            await load_passages(store)
    finally:
        await store.close()


@pytest.fixture(scope="module")
def served(es8_node: EsNode) -> Iterator[Served]:
    with server_for("vllm", any_strategy_model) as llm:
        config = api_settings(es8_node.url, llm, api_max_k=50, api_max_question_chars=500, llm_retries=0)
        asyncio.run(_prepare(config))
        app = create_app(config)
        try:
            with uvicorn_serving(app) as base_url:
                schema = schemathesis.openapi.from_dict(app.openapi())
                yield Served(base_url, config, schema, llm)
        finally:
            asyncio.run(_prepare(config, drop=True))


def _operations() -> list[tuple[str, str, GenerationMode]]:
    from fastapi import FastAPI

    doc = create_app(Settings(embedder="none")).openapi()
    assert isinstance(doc, dict) and not isinstance(doc, FastAPI)
    cases = []
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            cases.append((method.upper(), path, GenerationMode.POSITIVE))
            if operation.get("parameters") or operation.get("requestBody"):  # something to break
                cases.append((method.upper(), path, GenerationMode.NEGATIVE))
    return cases


CASES = _operations()


@pytest.mark.parametrize(("method", "path", "mode"), CASES, ids=[f"{m} {p} {g}" for m, p, g in CASES])
def test_no_server_errors_and_no_schema_violations(
    served: Served, method: str, path: str, mode: GenerationMode
) -> None:
    operation = served.schema[path][method]
    headers = {"Authorization": f"ApiKey {API_KEY}"}
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    calls = 0

    # Valid requests go to the real passages index (a random name is a 404 before any work is done).
    fixed = {"index": served.settings.passages_alias} if "{index}" in path and mode.is_positive else None
    before = served.llm.generation_requests

    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=fixed))
    @settings(
        max_examples=25,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: schemathesis.Case) -> None:
        nonlocal calls
        calls += 1
        case.call_and_validate(base_url=served.base_url, headers=headers, checks=checks, timeout=30)

    run()
    assert calls > 0
    if path.endswith("/_ask") and mode.is_positive:
        assert served.llm.generation_requests > before  # strategies really ran
