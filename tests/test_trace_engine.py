"""The trace names the LLM server (kind and release) and, per generation step, how its stop string was
read (``stop_method``: vLLM's ``stop_reason`` or a fallback); where DeepRAG's repeat guard overrides a
decision, the step keeps the model's own decision beside the guard's (issue 54)."""

from __future__ import annotations

import json

import pytest

from hopsearch.service.llm import LLMClient
from hopsearch.service.strategies import AskOptions, Budget, DeepRAG
from hopsearch.service.traces.recorder import MemoryTraceSink
from tests.llm_fixtures import EXPECTED_METHOD, PASSAGES, ListRetriever, fallback_for, server_for, settings_for
from tests.packaging import ROOT
from tests.scopes import asking
from tests.test_deeprag_scripted import JAWS, QUESTION
from tests.test_speed_guards import RepeatingModel

ENGINES = {"vllm": {"name": "vllm", "version": "0.11.0"}, "llamacpp-stream": {"name": "llamacpp", "version": None}}


@pytest.mark.parametrize("flavour", sorted(ENGINES))
async def test_trace_names_the_engine_and_how_each_stop_was_read(flavour: str) -> None:
    sink = MemoryTraceSink()
    with server_for(flavour, JAWS) as server:
        async with LLMClient(settings_for(server, flavour)) as llm:
            answer = await DeepRAG(llm, ListRetriever(PASSAGES), sink, stop_fallback=fallback_for(flavour)).answer(
                asking(QUESTION, AskOptions())
            )
    answer.raise_for_error()
    doc = sink.documents[answer.trace.trace_id]
    assert doc["engine"] == ENGINES[flavour]
    generate = [s for s in doc["steps"] if s["kind"] == "generate"]
    assert [(s["stop_method"], s["decided_by"]) for s in generate] == [(EXPECTED_METHOD[flavour],) * 2] * 3
    final = doc["steps"][-1]
    assert final["kind"] == "answer" and final["stop_method"] is not None
    assert all(s["model_decision"] is None and s["model_decided_by"] is None for s in doc["steps"])


@pytest.mark.parametrize("flavour", sorted(ENGINES))
async def test_the_repeat_guard_keeps_the_models_own_decision(flavour: str) -> None:
    sink = MemoryTraceSink()
    options = AskOptions(max_depth=4, budget=Budget(max_llm_calls=100))
    with server_for(flavour, RepeatingModel()) as server:
        async with LLMClient(settings_for(server, flavour)) as llm:
            answer = await DeepRAG(llm, ListRetriever(PASSAGES), sink).answer(asking("Who directed Jaws?", options))
    answer.raise_for_error()
    generate = [s for s in sink.documents[answer.trace.trace_id]["steps"] if s["kind"] == "generate"]
    first, repeat = generate
    method = EXPECTED_METHOD[flavour]
    assert (first["decision"], first["decided_by"], first["model_decision"]) == ("retrieve", method, None)
    assert (repeat["decision"], repeat["decided_by"]) == ("repeat", "repeat-of-depth-1")
    assert (repeat["model_decision"], repeat["model_decided_by"], repeat["stop_method"]) == ("retrieve", method, method)


def test_the_traces_template_maps_the_new_fields() -> None:
    template = json.loads((ROOT / "es_mappings" / "traces.json").read_text())
    properties = template["mappings"]["properties"]
    assert template["mappings"]["_meta"]["schema_version"] == 4
    assert properties["engine"]["properties"] == {"name": {"type": "keyword"}, "version": {"type": "keyword"}}
    steps = properties["steps"]["properties"]
    assert {name: steps[name] for name in ("stop_method", "model_decision", "model_decided_by")} == {
        name: {"type": "keyword"} for name in ("stop_method", "model_decision", "model_decided_by")
    }
