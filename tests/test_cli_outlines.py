"""``hopsearch outlines show|search`` through click's runner, over the real Elasticsearch."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

from click.testing import CliRunner

from hopsearch.cli.main import main
from hopsearch.service.outlines.model import EntityOutline, Fact
from hopsearch.service.outlines.store import EsOutlineStore
from hopsearch.service.store import Store


async def test_outlines_show_and_search(store: Store) -> None:
    await store.ensure_indices(None)
    now = datetime.now(UTC)
    fresh = Fact("Richard Donner directed Lethal Weapon.", "Who directed it?", "Lethal Weapon director",
                 ("p-lethal",), "gemma", now, "trace-1")  # fmt: skip
    stale = Fact("Richard Donner was born in 1930.", "When?", "Donner born", ("p-donner",), "gemma",
                 now - timedelta(days=30), "trace-0")  # fmt: skip
    await EsOutlineStore(store).save(
        [
            EntityOutline("default", "Richard Donner", ("Donner",), (stale, fresh)),
            EntityOutline("films", "Jaws", (), (fresh,)),
        ]
    )
    # trace-1 was written; trace-0 never was (the service stopped during its question)
    await store.put_document(store.settings.traces_index, "trace-1", {"trace_id": "trace-1"}, refresh=True)
    env = {"HOPSEARCH_ES_URL": store.settings.es_url[0], "HOPSEARCH_INDEX_PREFIX": store.settings.index_prefix}
    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(main, ["outlines", *args], env=env)
        return result.exit_code, result.output

    code, out = await asyncio.to_thread(invoke, "show", "donner")
    assert code == 0, out
    assert out.startswith("## Richard Donner  (also: Donner)  [namespace default, 2 facts]")
    assert "- Richard Donner was born in 1930.  (stale)" in out  # older than the 7-day default
    assert "trace lost (never written" in out and "trace-0" not in out
    assert "- Richard Donner directed Lethal Weapon.\n    passages p-lethal;" in out and "trace trace-1" in out
    assert "from: 'Who directed it?' / 'Lethal Weapon director'" in out

    code, out = await asyncio.to_thread(invoke, "search", "born 1930", "--json")
    assert code == 0, out
    [doc] = json.loads(out)
    assert doc["entity"] == "Richard Donner" and doc["facts"][0]["passage_ids"] == ["p-donner"]

    code, out = await asyncio.to_thread(invoke, "show", "Jaws")
    assert code == 1 and "no outline for 'Jaws' in namespace 'default'" in out
    code, out = await asyncio.to_thread(invoke, "show", "Jaws", "--namespace", "films")
    assert code == 0 and out.startswith("## Jaws  [namespace films, 1 facts]")
    code, out = await asyncio.to_thread(invoke, "search", "volcano")
    assert code == 1 and "no outline matches 'volcano'" in out
