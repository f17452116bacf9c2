"""``hopsearch traces list`` shows when each question was asked, who asked it and its answer (issue 42
item 13), in its table and in ``--json``; ``--key``/``--principal`` list the caller's own traces only.
Questions asked through the command line against a scripted LLM server, on each Elasticsearch version."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

from click.testing import CliRunner, Result

from hopsearch.cli.main import main
from hopsearch.service.store import Store
from tests.llm_fixtures import DeepRAGModel, PlanStep, server_for
from tests.test_deeprag_es import loaded

MODEL = DeepRAGModel([PlanStep("Who directed Lethal Weapon?", "search", "Richard Donner")], "リチャード・ドナー監督")


async def run(args: list[str], env: dict[str, str]) -> Result:
    result = await asyncio.to_thread(CliRunner().invoke, main, args, env=env)
    assert result.exit_code == 0, (args, result.output)
    return result


async def test_traces_list_shows_time_user_and_answer(store: Store, tmp_path: Path) -> None:
    await loaded(store)
    before = datetime.now(UTC).replace(microsecond=0)
    with server_for("vllm", MODEL) as server:
        env = {
            "HOPSEARCH_ES_URL": store.settings.es_url[0],
            "HOPSEARCH_INDEX_PREFIX": store.settings.index_prefix,
            "HOPSEARCH_EMBEDDER": "none",
            "HOPSEARCH_LLM_BASE_URL": server.base_url,
            "HOPSEARCH_LLM_MODEL": "scripted",
            "HOPSEARCH_STATE_DIR": str(tmp_path),
        }
        await run(["ask", "リーサル・ウェポンの監督は誰？", "--principal", "user:yamada"], env)
        await run(["ask", "Who directed Lethal Weapon?"], env)
    await store.refresh(store.settings.traces_index)
    table = (await run(["traces", "list"], {**env, "COLUMNS": "250"})).output
    rows = json.loads((await run(["traces", "list", "--json"], env)).output)
    mine = json.loads((await run(["traces", "list", "--json", "--principal", "user:yamada"], env)).output)
    for header in ("time", "user", "question", "answer"):
        assert header in table, table
    assert "cli/sub:yamada" in table and "admin" in table and "リチャード・ドナー監督" in table
    assert before.strftime("%Y-%m-%d") in table
    assert [row["user"].get("owner") for row in rows] == [None, "cli/sub:yamada"]  # the newest first
    assert all(row["answer"] == "リチャード・ドナー監督" for row in rows)
    assert all(datetime.fromisoformat(row["started_at"]) >= before for row in rows)
    assert [row["question"] for row in mine] == ["リーサル・ウェポンの監督は誰？"]
