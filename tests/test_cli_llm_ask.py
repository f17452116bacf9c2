"""``hopsearch ask`` over the real Elasticsearch and the scripted server; ``hopsearch llm`` commands
that need no model."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from hopsearch.cli.ask import ask
from hopsearch.cli.llm import llm
from hopsearch.cli.render import EMPTY_ANSWER
from hopsearch.service.store import Store
from hopsearch.service.strategies.deeprag import DEMONSTRATIONS, JA_DEMONSTRATIONS
from tests.llm_fixtures import DeepRAGModel, PlanStep, server_for
from tests.test_deeprag_es import loaded

MODEL = DeepRAGModel([PlanStep("Who directed Lethal Weapon?", "search", "Richard Donner")], "Richard Donner")


def env_for(store: Store, base_url: str, tmp_path: Path) -> dict[str, str]:
    return {
        "HOPSEARCH_ES_URL": store.settings.es_url[0],
        "HOPSEARCH_EMBEDDER": "none",
        "HOPSEARCH_LLM_BASE_URL": base_url,
        "HOPSEARCH_LLM_MODEL": "scripted",
        "HOPSEARCH_STATE_DIR": str(tmp_path),
    }


@pytest.mark.parametrize("flavour", ["vllm", "llamacpp-followup"])
async def test_ask_prints_answer_citations_and_steps(store: Store, tmp_path: Path, flavour: str) -> None:
    await loaded(store)
    with server_for(flavour, MODEL) as server:
        env = env_for(store, server.base_url, tmp_path)
        args = ["Who directed Lethal Weapon?", "--prefix", store.settings.index_prefix]
        result = await asyncio.to_thread(CliRunner().invoke, ask, args, env={**env, "COLUMNS": "80"})
        as_json = await asyncio.to_thread(CliRunner().invoke, ask, [*args, "--json"], env=env)
    assert result.exit_code == 0, result.output
    assert "Answer:   Richard Donner" in result.output
    assert "[1] p-lethal  Lethal Weapon" in result.output
    assert "retrieve" in result.output and "by " in result.output  # the decision and what made it
    assert "Who directed Lethal" in result.output and "→ p-lethal" in result.output  # the query, its passages
    assert all(len(line) <= 80 for line in result.output.splitlines()), max(result.output.splitlines(), key=len)
    assert any(line.startswith("Totals: ") for line in result.output.splitlines())
    assert as_json.exit_code == 0, as_json.output
    doc = json.loads(as_json.output)
    assert doc["strategy"] == "deeprag" and doc["answer"] == "Richard Donner"
    stored = await store.get_document(store.settings.traces_index, doc["trace_id"])
    assert stored is not None and stored["totals"] == doc["totals"]


async def test_ask_reports_a_failure_with_its_trace(store: Store, tmp_path: Path) -> None:
    await loaded(store)
    with server_for("vllm", MODEL, fail_first=100) as server:
        env = env_for(store, server.base_url, tmp_path) | {"HOPSEARCH_LLM_RETRIES": "1"}
        args = ["Who directed Lethal Weapon?", "--prefix", store.settings.index_prefix, "--strategy", "single"]
        result = await asyncio.to_thread(CliRunner().invoke, ask, args, env=env)
    assert result.exit_code == 1
    assert "Answer:   (none)" in result.output and "LLMUnavailable" in result.output
    assert "failed" in result.output and "2 retries" in result.output


def test_llm_status_and_down_without_a_server(tmp_path: Path) -> None:
    env = {"HOPSEARCH_STATE_DIR": str(tmp_path)}
    status = CliRunner().invoke(llm, ["status"], env=env)
    assert status.exit_code == 1 and "not running" in status.output
    down = CliRunner().invoke(llm, ["down"], env=env)
    assert down.exit_code == 0 and "no LLM server was running" in down.output


def test_llm_up_vllm_beside_a_running_llamacpp_server_is_a_clear_error(tmp_path: Path) -> None:
    """vLLM's environment is made on first use (issue 54), but never while another engine holds the port:
    ``llm down`` first. (The recorded pid is this test's own process: alive, as a server would be.)"""
    state = tmp_path / "llm"
    state.mkdir()
    record = {"pid": os.getpid(), "port": 8080, "engine": "llamacpp", "model": "m.gguf", "served_as": "gemma3-270m"}
    (state / "server.json").write_text(json.dumps({**record, "log_path": str(state / "server.log")}))
    result = CliRunner().invoke(llm, ["up", "--engine", "vllm"], env={"HOPSEARCH_STATE_DIR": str(tmp_path)})
    assert result.exit_code == 1 and "a llamacpp server is running" in result.output
    assert "hopsearch llm down" in result.output


async def test_an_empty_answer_is_said_to_be_empty(store: Store, tmp_path: Path) -> None:
    await loaded(store)
    with server_for("vllm", lambda request: "") as server:  # the model writes nothing at all
        env = env_for(store, server.base_url, tmp_path)
        args = ["Who directed Lethal Weapon?", "--prefix", store.settings.index_prefix, "--strategy", "single"]
        result = await asyncio.to_thread(CliRunner().invoke, ask, args, env=env)
    assert result.exit_code == 0, result.output
    assert f"Answer:   {EMPTY_ANSWER}" in result.output and "(empty output)" in result.output
    assert "Answer:   \n" not in result.output


async def test_ask_index_is_an_index_or_alias_and_a_missing_one_creates_nothing(store: Store, tmp_path: Path) -> None:
    """``ask --index`` means what ``search --index`` means; a missing passages index is an error."""
    await loaded(store)
    prefix = store.settings.index_prefix
    concrete = await store.passages_index()
    assert concrete is not None
    before = sorted(await indices_under(store, prefix))
    missing = f"{prefix}-nothing-here"
    with server_for("vllm", MODEL) as server:
        env = env_for(store, server.base_url, tmp_path) | {"HOPSEARCH_INDEX_PREFIX": prefix}
        args = ["Who directed Lethal Weapon?", "--strategy", "single"]
        refused = await asyncio.to_thread(CliRunner().invoke, ask, [*args, "--index", missing], env=env)
        after_refusal = sorted(await indices_under(store, prefix))
        by_name = await asyncio.to_thread(CliRunner().invoke, ask, [*args, "--index", concrete], env=env)
    assert refused.exit_code == 1 and f"no such passages index or alias [{missing}]" in refused.output
    assert after_refusal == before  # nothing created: no <missing>-passages-v1, -outlines, -traces
    assert by_name.exit_code == 0, by_name.output
    assert "[1] p-lethal  Lethal Weapon" in by_name.output


async def indices_under(store: Store, prefix: str) -> list[str]:
    found = await store.client.indices.get(index=f"{prefix}*", allow_no_indices=True, ignore_unavailable=True)
    return list(dict(found))


async def test_eval_index_missing_is_an_error_and_creates_nothing(store: Store, tmp_path: Path) -> None:
    from hopsearch.cli.evaluate import evaluate

    prefix = store.settings.index_prefix
    questions = tmp_path / "q.jsonl"
    record = {
        "_id": "q1",
        "question": "Who directed Lethal Weapon?",
        "answer": "Richard Donner",
        "type": "comparison",
        "level": "easy",
        "context": [["Lethal Weapon", ["Lethal Weapon was directed by Richard Donner."]]],
    }
    questions.write_text(json.dumps(record) + "\n")
    with server_for("vllm", MODEL) as server:
        env = env_for(store, server.base_url, tmp_path) | {"HOPSEARCH_INDEX_PREFIX": prefix}
        args = [str(questions), "--strategy", "single", "--index", f"{prefix}-absent", "--out", str(tmp_path / "o")]
        refused = await asyncio.to_thread(CliRunner().invoke, evaluate, args, env=env)
    assert refused.exit_code == 1 and f"no such passages index or alias [{prefix}-absent]" in refused.output
    assert await indices_under(store, prefix) == []


async def test_ask_source_filter_keeps_to_one_corpus(store: Store, tmp_path: Path) -> None:
    await loaded(store)  # every passage has source "jsonl"
    with server_for("vllm", MODEL) as server:
        env = env_for(store, server.base_url, tmp_path)
        args = ["Who directed Lethal Weapon?", "--prefix", store.settings.index_prefix, "--strategy", "single"]
        kept = await asyncio.to_thread(CliRunner().invoke, ask, [*args, "--source", "jsonl"], env=env)
        other = await asyncio.to_thread(CliRunner().invoke, ask, [*args, "--source", "docs"], env=env)
    assert kept.exit_code == 0 and "[1] p-lethal  Lethal Weapon" in kept.output
    assert other.exit_code == 0 and "Citations:" not in other.output and "→ no hits" in other.output


async def test_few_shot_worked_examples_are_in_the_question_language(store8: Store, tmp_path: Path) -> None:
    """``ask --few-shot``: a Japanese question's transcript opens with the Japanese worked example (none of
    the English one's words), an English question's with the English one — as the model receives them."""
    await loaded(store8)
    japanese, english = "かざぐるまプロジェクトの責任者は誰ですか？", "Who directed Lethal Weapon?"
    with server_for("llamacpp-followup", MODEL) as server:
        env = env_for(store8, server.base_url, tmp_path)
        for question in (japanese, english):
            args = [question, "--prefix", store8.settings.index_prefix, "--strategy", "deeprag", "--few-shot"]
            result = await asyncio.to_thread(CliRunner().invoke, ask, args, env=env)
            assert result.exit_code == 0, result.output
        prompts = server.prompts
    asked_ja = [p for p in prompts if f"Question: {japanese}" in p]
    asked_en = [p for p in prompts if f"Question: {english}" in p]
    assert asked_ja and asked_en and len(asked_ja) + len(asked_en) == len(prompts)
    assert all(p.startswith(f"{JA_DEMONSTRATIONS}\n\nQuestion: {japanese}") for p in asked_ja)
    assert not any(word in p for p in asked_ja for word in ("Jaws", "Alien", "Spielberg"))
    assert all(p.startswith(f"{DEMONSTRATIONS}\n\nQuestion: {english}") for p in asked_en)
    assert not any("施設管理室" in p for p in asked_en)


async def test_single_answers_a_japanese_question_in_japanese_even_when_it_has_no_answer(
    store8: Store, tmp_path: Path
) -> None:
    """``single``'s answer prompt asks for the answer in the question's language (as the model receives it),
    and a reply that is no answer is recorded in that language too: 「回答なし」, not "no answer"."""
    await loaded(store8)
    japanese, english = "かざぐるまプロジェクトの責任者は誰ですか？", "Who directed Lethal Weapon?"
    answers: dict[str, str] = {}
    with server_for("vllm", lambda request: "分かりません。") as server:
        env = env_for(store8, server.base_url, tmp_path)
        for question in (japanese, english):
            args = [question, "--prefix", store8.settings.index_prefix, "--strategy", "single", "--json"]
            result = await asyncio.to_thread(CliRunner().invoke, ask, args, env=env)
            assert result.exit_code == 0, result.output
            answers[question] = json.loads(result.output)["answer"]
        prompts = server.prompts
    [asked_ja] = [p for p in prompts if japanese in p]
    assert "日本語で答えてください" in asked_ja and "in Japanese" in asked_ja
    assert not any("日本語" in p for p in prompts if english in p)
    assert answers == {japanese: "回答なし", english: "no answer"}
