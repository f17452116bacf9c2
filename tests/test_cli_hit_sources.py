"""The command line acting as a non-admin (``hopsearch search --key … --json``, ``--principal``) shows a hit's
source as HTTP shows it (issue 51, found by a new user): no absolute ``path``, no ``file:`` URL, no
``metadata.root`` — the server folder appears nowhere in the output — while the command line's own
operator (no ``--key``) still sees the document as indexed. Real Elasticsearch on 7.17, 8.19 and 9.2."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from click.testing import CliRunner

from hopsearch.cli.main import main
from hopsearch.service.auth.keys import KeyStore, NewKey
from hopsearch.service.store import Store
from tests.api_fixtures import api_settings
from tests.conftest import EsNode
from tests.llm_fixtures import server_for

#: The server folder: a marker the whole output of a non-admin is searched for.
FOLDER = "/srv/private/cli-marker-folder"
DOC: dict[str, Any] = {
    "title": "Runbook",
    "text": "Restart the glacier service with care.",
    "source": "docs",
    "doc_id": "d1",
    "chunk": 0,
    "acl": ["public"],
    "path": f"{FOLDER}/ops/runbook.md",
    "url": f"file://{FOLDER}/ops/runbook.md",
    "metadata": {"root": FOLDER, "type": "md"},
}


async def test_cli_search_as_a_non_admin_hides_server_paths(es_node: EsNode) -> None:
    with server_for("vllm", lambda request: "") as llm:
        settings = api_settings(es_node.url, llm, api_keys=[])
    async with await Store.connect(settings) as store:
        try:
            target = await store.ensure_indices(None)
            await store.put_document(target, "d1-0", DOC)
            await store.refresh(target)
            secret, _ = await KeyStore.of(store).create(NewKey("reader", principals=["public"]))
            env = {
                "HOPSEARCH_ES_URL": es_node.url,
                "HOPSEARCH_INDEX_PREFIX": settings.index_prefix,
                "HOPSEARCH_EMBEDDER": "none",
            }
            runner = CliRunner()

            def search(*args: str) -> Any:
                return runner.invoke(main, ["search", "glacier", "--mode", "bm25", "--json", *args], env=env)

            keyed = await asyncio.to_thread(search, "--key", secret)
            principal = await asyncio.to_thread(search, "--principal", "public")
            admin = await asyncio.to_thread(search)
        finally:
            await store.client.indices.delete(
                index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
            )
    for result in (keyed, principal, admin):
        assert result.exit_code == 0, result.output
    for result in (keyed, principal):
        [hit] = json.loads(result.output)["hits"]
        assert hit["_source"]["path"] == "ops/runbook.md" and "url" not in hit["_source"]
        assert hit["_source"]["metadata"] == {"type": "md"}
        assert FOLDER not in result.output and "file:" not in result.output
    [hit] = json.loads(admin.output)["hits"]
    assert hit["_source"]["path"] == DOC["path"] and hit["_source"]["metadata"]["root"] == FOLDER
