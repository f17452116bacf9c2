"""Errors of Elasticsearch reach people in words (issue 42 item 13): what hopsearch was doing and the
server's reason, never the store layer's operation name (``count: …``, ``search x: …``, ``msearch: …``).
Over real HTTP (uvicorn) and the command line, on Elasticsearch 8.19: a keys index that was closed (the
gate counts its keys on every request of a service without flat keys) and a traces index someone made
with plain curl whose ``started_at`` is text (a list sorts on it)."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

import httpx
from click.testing import CliRunner

from hopsearch.cli.main import main
from hopsearch.service.api import create_app
from hopsearch.service.auth.keys import KeyStore, NewKey
from hopsearch.service.store import Store
from tests.api_fixtures import uvicorn_serving_async
from tests.conftest import EsNode, make_settings

#: An operation's name put before a message (what the store layer used to write: ``count: …``).
OPERATION_PREFIX = re.compile(r"^(Error: )?[a-z_]+( [\w\[\]*-]+)?: ")


async def test_a_closed_keys_index_is_said_in_words_over_http_and_the_command_line(es8_node: EsNode) -> None:
    settings = make_settings(es8_node.url, api_keys=[], api_key_cache_s=0)
    env = {"HOPSEARCH_ES_URL": es8_node.url, "HOPSEARCH_INDEX_PREFIX": settings.index_prefix}
    async with await Store.connect(settings) as store:
        try:
            await KeyStore.of(store).create(NewKey("ops", admin=True))
            await store.client.indices.close(index=settings.keys_index)
            async with uvicorn_serving_async(create_app(settings)) as url, httpx.AsyncClient(timeout=30) as http:
                answer = await http.get(f"{url}/")
            listed = await asyncio.to_thread(CliRunner().invoke, main, ["keys", "list"], env=env)
        finally:
            await store.client.indices.delete(index=f"{settings.index_prefix}-*", ignore_unavailable=True)
    reason = answer.json()["error"]["reason"]
    assert reason.startswith(f"Counting the documents of [{settings.keys_index}] failed: index_closed_exception")
    assert not OPERATION_PREFIX.match(reason), reason
    [line] = listed.output.splitlines()
    assert listed.exit_code == 1 and line.startswith(f"Error: Searching [{settings.keys_index}] failed: "), line
    assert "index_closed_exception" in line and not OPERATION_PREFIX.match(line)


def test_a_traces_index_made_by_hand_is_said_in_words(es8_node: EsNode, tmp_path: Path) -> None:
    prefix = f"sm{uuid.uuid4().hex[:10]}"
    traces = f"{es8_node.url}/{prefix}-traces"
    env = {"HOPSEARCH_ES_URL": es8_node.url, "HOPSEARCH_INDEX_PREFIX": prefix, "HOPSEARCH_STATE_DIR": str(tmp_path)}
    try:
        httpx.put(traces, json={"mappings": {"properties": {"started_at": {"type": "text"}}}}).raise_for_status()
        httpx.put(f"{traces}/_doc/1?refresh=true", json={"started_at": "yesterday"}).raise_for_status()
        listed = CliRunner().invoke(main, ["traces", "list"], env=env)
    finally:
        httpx.delete(f"{es8_node.url}/{prefix}-*")
    [line] = listed.output.splitlines()
    assert listed.exit_code == 1 and line.startswith(f"Error: Searching [{prefix}-traces] failed: "), line
    assert "Fielddata is disabled on [started_at]" in line  # the shard's cause, not only "all shards failed"
    assert not OPERATION_PREFIX.match(line)
