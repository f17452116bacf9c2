"""Document permissions in the ask use case: every strategy × retrieval mode × caller (admin, group:hr,
public only), over real Elasticsearch (7.17, 8.19, 9.2), with a scripted LLM that echoes its whole prompt
into its answers and summaries, so that a passage leaking into any prompt shows in the answer. Searched
whole for the markers of passages the caller may not read: the answer, its citations, every trace step's
output and details, every prompt the LLM was sent, and the stored trace as its owner reads it back. A
trace is its asker's: another caller reads it as missing, an admin reads it.

DualRAG reuses no stored outline here (``outline_max_age_s=0``): outlines shared across users are
``test_outline_sharing.py``'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.traces import reads as trace_reads
from tests.api_fixtures import api_settings, instance_of
from tests.conftest import EsNode
from tests.dual_fixtures import ChatModel, entities, reason, role_of
from tests.llm_fixtures import DeepRAGModel, PlanStep, server_for
from tests.permissions_corpus import (
    CALLERS,
    QUERY,
    QUESTION,
    found_markers,
    leaks,
    load_corpus,
    readable,
    restated_knowledge,
    squash,
)
from tests.scripted_llm import ScriptRequest

STRATEGIES = ("single", "deeprag", "dualrag", "iterative", "hyde")
RESTRICTED = {"SALARY-MARKER-9", "BOARD-MARKER-7", "PRIVATE-MARKER-5", "NOACL-MARKER-3"}


class EchoModel:
    """Every strategy's roles, searching the corpus's words; every free-text answer (DeepRAG's intermediate
    and final answers, the final answers of the others, DualRAG's summaries) is the whole prompt."""

    def __init__(self) -> None:
        self.deep = DeepRAGModel([PlanStep(QUERY, "search", "see")], final="done")
        self.chat = ChatModel(
            defaults={
                "reasoner": reason("Look it up.", True),
                "identifier": entities(("Company records", [QUERY, "handbook"])),
            },
            summaries=lambda entity, prompt: restated_knowledge(prompt),
        )

    def __call__(self, request: ScriptRequest) -> str:
        prompt, body = request.prompt, request.body
        role = role_of(prompt)
        if request.endpoint == "completions" or body.get("continue_final_message"):
            if prompt.endswith(("So the final answer is:", "Intermediate answer:", "\nAnswer:")):
                return f" {squash(prompt)}\nQuestion: next"
            return self.deep(request)
        if role == "answer" or role == "unknown":
            fmt = body.get("response_format") or {}
            schema = (fmt.get("json_schema") or {}).get("schema") or fmt.get("schema")
            return json.dumps(instance_of(schema)) if schema else squash(prompt)
        if role == "reasoner" and "Knowledge outline" in prompt and "Company records" in prompt:
            return json.dumps(reason("I can answer now.", False))
        return self.chat(request)


async def _ask_all(
    runtime: Runtime, llm: Any, modes: tuple[str, ...], acl_default: str
) -> tuple[list[str], dict[str, set[str]]]:
    """Every strategy × mode × caller: the leaks found, and the markers each (caller, strategy) saw."""
    problems: list[str] = []
    seen: dict[str, set[str]] = {}
    store = runtime.store
    index = runtime.settings.traces_index
    for strategy in STRATEGIES:
        for mode in modes:
            for name, caller in CALLERS.items():
                before = len(llm.prompts)
                request = await usecases.ask_request(
                    runtime,
                    QUESTION,
                    caller=caller,
                    strategy=strategy,
                    retrieval_mode=mode,  # type: ignore[arg-type]
                )
                answer = await usecases.ask(runtime, request)
                label = f"{strategy}/{mode}/{name}"
                if answer.error is not None:
                    problems.append(f"{label}: failed: {answer.error}")
                    continue
                prompts = llm.prompts[before:]
                for what, value in (("answer", answer), ("prompts", prompts), ("trace", answer.trace.to_document())):
                    if leaked := leaks(value, name, acl_default):
                        problems.append(f"{label}: {what} leaked {sorted(leaked)}")
                stored = await trace_reads.trace(store, index, answer.trace.trace_id, caller=caller)
                if stored is None or stored.get("user", {}).get("subject") != caller.subject:
                    problems.append(f"{label}: its own trace not readable")
                elif leaks(stored, name, acl_default):
                    problems.append(f"{label}: stored trace leaked")
                for other_name, other in CALLERS.items():
                    got = await trace_reads.trace(store, index, answer.trace.trace_id, caller=other)
                    if (got is not None) != (other_name in ("admin", name)):
                        problems.append(f"{label}: trace {'read' if got else 'refused'} by {other_name}")
                seen.setdefault(f"{name}/{strategy}", set()).update(found_markers(answer))
    return problems, seen


@pytest.mark.parametrize("acl_default", ["private", "public"])
async def test_no_strategy_mode_or_caller_gets_a_passage_it_may_not_read(
    es_node: EsNode, minilm: MiniLMEmbedder, tmp_path: Path, acl_default: str
) -> None:
    modes = ("bm25", "dense", "hybrid") if acl_default == "private" else ("bm25",)
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(
            es_node.url,
            llm,
            embedder="minilm",
            cache_dir=tmp_path / "cache",
            acl_default=acl_default,
            outline_max_age_s=0,
        )
        async with await Runtime.open(settings, refresh_traces=True) as runtime:
            try:
                await load_corpus(runtime.store, tmp_path, minilm)
                problems, seen = await _ask_all(runtime, llm, modes, acl_default)
                # the list of recent traces: each caller's own only, filtered in the query
                for name, caller in CALLERS.items():
                    rows = await trace_reads.recent_traces(runtime.store, settings.traces_index, 1000, caller=caller)
                    subjects = {(row.get("user") or {}).get("subject") for row in rows}
                    expected = len(STRATEGIES) * len(modes) * (len(CALLERS) if name == "admin" else 1)
                    assert len(rows) == expected and (name == "admin" or subjects == {caller.subject}), name
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )
    assert problems == [], "\n".join(problems)
    for strategy in STRATEGIES:  # the echo shows passages: a leak could not hide
        assert seen[f"admin/{strategy}"] & RESTRICTED, (strategy, seen)
        assert "SALARY-MARKER-9" in seen[f"hr/{strategy}"], (strategy, seen)
        assert seen[f"public/{strategy}"] <= readable("public", acl_default)
