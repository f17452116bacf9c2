"""Filters cannot read what hits hide (for non-admins), over real HTTP (uvicorn) on 8.19: a folder indexed
with ``hopsearch index docs`` stores the server's absolute ``path`` and ``metadata.root``, hits show the
relative path. A ``range`` or absolute ``term`` on ``path``, any filter on ``metadata.root`` or on a field
of ``api_hidden_fields`` is a 400 naming the filter for a stored key, on ``_retrieve``, ``_ask`` and MCP
``search``; the relative path filters as before, and an admin may filter on anything. The absolute folder
never shows in any response a non-admin gets."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner

from hopsearch.cli.main import main
from hopsearch.service.api import create_app
from tests.api_fixtures import API_KEY, api_settings, uvicorn_serving_async
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.test_permissions_ask import EchoModel

QUERY = "penguin colony"


async def _cli(env: dict[str, str], *args: str) -> Any:
    return await asyncio.to_thread(CliRunner().invoke, main, list(args), env=env)


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "srv-SECRETROOT-77"
    (root / "guide").mkdir(parents=True)
    (root / "guide" / "intro.md").write_text("# Penguins\n\nThe penguin colony is large.\n")
    (root / "other.md").write_text("# Birds\n\nAnother penguin colony note.\n")
    return root


async def test_filters_on_hidden_fields_are_refused_for_non_admins(es8_node: EsNode, tmp_path: Path) -> None:
    root = _folder(tmp_path)
    absolute = str(root / "guide" / "intro.md")
    problems: list[str] = []
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(es8_node.url, llm, api_hidden_fields=["content_sha"])
        env = {
            "HOPSEARCH_ES_URL": es8_node.url,
            "HOPSEARCH_INDEX_PREFIX": settings.index_prefix,
            "HOPSEARCH_EMBEDDER": "none",
            "HOPSEARCH_ES_API_KEY": settings.es_api_key.get_secret_value() if settings.es_api_key else "",
        }
        loaded = await _cli(env, "index", "docs", str(root), "--acl", "public", "--no-embed")
        assert loaded.exit_code == 0, loaded.output
        app = create_app(settings)
        async with uvicorn_serving_async(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
            admin = {"Authorization": f"ApiKey {API_KEY}"}
            made = await http.post("/_keys", json={"name": "reader", "principals": ["public"]}, headers=admin)
            assert made.status_code == 201, made.text
            reader = {"Authorization": f"ApiKey {made.json()['key']}"}
            alias = settings.passages_alias
            refused = {
                "range on path": [{"range": {"path": {"gte": "/", "lt": "/t"}}}],
                "absolute term on path": [{"term": {"path": absolute}}],
                "absolute in terms": [{"terms": {"path": ["guide/intro.md", absolute]}}],
                "nested absolute": [{"and": [{"not": {"term": {"path": absolute}}}]}],
                "metadata.root": [{"exists": {"field": "metadata.root"}}],
                "metadata.root term": [{"term": {"metadata.root": str(root)}}],
                "hidden field": [{"range": {"content_sha": {"gte": "0"}}}],
                "file url": [{"term": {"url": f"file://{absolute}"}}],
            }
            for label, filters in refused.items():
                got = await http.post(f"/{alias}/_retrieve", json={"query": QUERY, "filters": filters}, headers=reader)
                if got.status_code != 400 or "body.filters.0" not in got.text:
                    problems.append(f"_retrieve {label}: {got.status_code} {got.text[:200]}")
                ask = {"question": QUERY, "strategy": "single", "options": {"filters": filters}}
                asked = await http.post(f"/{alias}/_ask", json=ask, headers=reader)
                if asked.status_code != 400:
                    problems.append(f"_ask {label}: {asked.status_code} {asked.text[:200]}")
                # an admin may: the same filter is answered
                as_admin = await http.post(
                    f"/{alias}/_retrieve", json={"query": QUERY, "filters": filters}, headers=admin
                )
                if as_admin.status_code != 200:
                    problems.append(f"admin {label}: {as_admin.status_code} {as_admin.text[:200]}")
                for response in (got, asked):
                    if "SECRETROOT" in response.text:
                        problems.append(f"{label}: the folder shows")
            relative = [{"term": {"path": "guide/intro.md"}}]
            got = await http.post(f"/{alias}/_retrieve", json={"query": QUERY, "filters": relative}, headers=reader)
            hits = got.json()["hits"]["hits"] if got.status_code == 200 else []
            if [h["_source"].get("path") for h in hits] != ["guide/intro.md"] or "SECRETROOT" in got.text:
                problems.append(f"relative path: {got.status_code} {got.text[:300]}")
    assert problems == [], "\n".join(problems)
