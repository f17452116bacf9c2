"""Erasing what was derived from a document (issue 29), over real Elasticsearch (7.17, 8.19, 9.2): a load
that removes a document purges the outline facts and aliases derived from it, ``indices delete`` those of
the index, ``hopsearch traces purge --doc ID`` the traces that quote it; an outlines index made under
schema 1 keeps answering (its facts admins' only, its search admins'), says so, and ``hopsearch
outlines rebuild`` moves it keeping every outline.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner

from hopsearch.cli.main import main
from hopsearch.loaders.docs import load_docs
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.access import Caller
from hopsearch.service.outlines.lineage import source
from hopsearch.service.outlines.model import AliasSource, EntityOutline, Fact
from hopsearch.service.outlines.store import EsOutlineStore
from hopsearch.service.store import Store
from tests.api_fixtures import API_KEY, serving
from tests.callers import as_caller
from tests.conftest import EsNode

STAFF = Caller.of(["public"], subject="erin", key="staff", owner="key:staff/sub:erin")


def fact(summary: str, *lineage: str) -> Fact:
    now = datetime.now(UTC)
    return Fact(summary, "q", "sq", tuple(e.split("/")[-1] for e in lineage), "m", now, "t-1", lineage=lineage)


def env_of(store: Store) -> dict[str, str]:
    return {"HOPSEARCH_ES_URL": store.settings.es_url[0], "HOPSEARCH_INDEX_PREFIX": store.settings.index_prefix}


async def stored_summaries(store: Store) -> list[str]:
    hits = (await store.search(store.settings.outlines_index, {"size": 100}))["hits"]["hits"]
    return sorted(f["summary"] for h in hits for f in h["_source"].get("facts") or [])


async def test_deleting_documents_purges_what_was_derived_from_them(es_node: EsNode, tmp_path: Path) -> None:
    async with serving(es_node.url, load=False) as api:
        store = await api.store()
        await store.ensure_indices(None)
        folder = tmp_path / "docs"
        folder.mkdir()
        (folder / "keep.md").write_text("# Keep\n\nThe handbook says keep this page.\n")
        (folder / "gone.md").write_text("# Gone\n\nThe handbook says GONE-MARKER-2 on this page.\n")
        options = LoadOptions(checkpoint=tmp_path / "docs.ckpt")
        assert (await load_docs(store, folder, options)).rejected == 0
        hits = (await store.search(api.alias, {"size": 10, "_source": ["path"]}))["hits"]["hits"]
        ids = {str(h["_source"]["path"]).rsplit("/", 1)[-1]: str(h["_id"]) for h in hits}
        keep, gone = source(api.alias, ids["keep.md"]), source(api.alias, ids["gone.md"])
        other = f"{api.settings.index_prefix}-other"
        await store.put_document(other, "o-1", {"title": "Other", "text": "other words", "acl": "public"}, refresh=True)
        outline = EntityOutline(
            "default",
            "Handbook",
            ("GONE-MARKER-2 alias",),
            (fact("kept fact", keep), fact("GONE-MARKER-2 fact", keep, gone), fact("other fact", source(other, "o-1"))),
            alias_lineage=(AliasSource("GONE-MARKER-2 alias", (gone,)),),
        )
        await EsOutlineStore(store).save([outline])
        trace = {"trace_id": "t-q", "question": "q", "steps": [{"kind": "retrieve", "hit_ids": [ids["gone.md"]]}]}
        await store.put_document(api.settings.traces_index, "t-q", trace, refresh=True)
        await store.put_document(api.settings.traces_index, "t-k", trace | {"steps": []}, refresh=True)

        (folder / "gone.md").unlink()  # a load that removes the document
        assert (await load_docs(store, folder, options)).rejected == 0
        assert await stored_summaries(store) == ["kept fact", "other fact"]
        raw = (await store.search(api.settings.outlines_index, {"size": 1}))["hits"]["hits"][0]["_source"]
        assert "GONE-MARKER-2" not in json.dumps(raw), raw

        runner = CliRunner()
        deleted = await asyncio.to_thread(runner.invoke, main, ["indices", "delete", other, "--yes"], env=env_of(store))
        assert deleted.exit_code == 0, deleted.output
        assert "purged 1 outline fact" in deleted.output, deleted.output
        assert await stored_summaries(store) == ["kept fact"]

        purged = await asyncio.to_thread(
            runner.invoke, main, ["traces", "purge", "--doc", ids["gone.md"], "--yes"], env=env_of(store)
        )
        assert purged.exit_code == 0 and "deleted 1 trace(s)" in purged.output, purged.output
        assert await store.get_document(api.settings.traces_index, "t-q") is None
        assert await store.get_document(api.settings.traces_index, "t-k") is not None


#: The outlines mapping of schema 1 (facts as objects, no lineage), as indices made before it hold.
SCHEMA_1: dict[str, Any] = {
    "mappings": {
        "dynamic": False,
        "_meta": {"schema_version": 1, "kind": "hopsearch-outlines"},
        "properties": {
            "namespace": {"type": "keyword"},
            "entity_key": {"type": "keyword"},
            "keys": {"type": "keyword"},
            "entity": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
            "aliases": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
            "updated_at": {"type": "date"},
            "facts": {
                "type": "object",
                "properties": {"summary": {"type": "text"}, "passage_ids": {"type": "keyword"}},
            },
        },
    }
}


async def test_an_outlines_index_of_schema_1_answers_admins_and_says_how_to_rebuild(es_node: EsNode) -> None:
    async with serving(es_node.url, load=True) as api:
        store = await api.store()
        index = api.settings.outlines_index
        await store.client.indices.delete(index=index, ignore_unavailable=True)
        await store.client.indices.create(index=index, body=SCHEMA_1)
        old = EntityOutline("default", "Richard Donner", ("Dick Donner",), (fact("OLD-MARKER-6 directed films"),))
        doc = old.to_document()
        doc["facts"] = [{k: v for k, v in f.items() if k not in ("lineage", "readers")} for f in doc["facts"]]
        await store.put_document(index, "d-1", doc, refresh=True)

        staff = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=as_caller(api.app, STAFF)),
            base_url="http://hopsearch",
            headers={"Authorization": f"ApiKey {API_KEY}"},
        )
        async with staff:
            admin_get = await api.client.get("/_outlines/Richard Donner")
            staff_get = await staff.get("/_outlines/Richard Donner")
            staff_search = await staff.post("/_outlines/_search", json={"query": "directed"})
            admin_search = await api.client.post("/_outlines/_search", json={"query": "directed"})
            named = await staff.get("/_outlines/Richard Donner", params={"namespace": "elsewhere"})
        assert admin_get.status_code == 200 and "OLD-MARKER-6" in admin_get.text, admin_get.text
        assert "outlines rebuild" in admin_get.json()["outlines_note"]
        assert staff_get.status_code == 404 and "OLD-MARKER-6" not in staff_get.text
        assert staff_search.json()["hits"]["total"]["value"] == 0 and "OLD-MARKER-6" not in staff_search.text
        assert "outlines rebuild" in staff_search.json()["outlines_note"]
        assert admin_search.json()["hits"]["total"]["value"] == 1
        assert named.status_code == 403, named.text  # only admins name a namespace

        rebuilt = await asyncio.to_thread(CliRunner().invoke, main, ["outlines", "rebuild"], env=env_of(store))
        assert rebuilt.exit_code == 0 and "schema 1 -> 2, 1 outline(s) kept" in rebuilt.output, rebuilt.output
        assert await EsOutlineStore(store).schema() == 2
        after = await api.client.get("/_outlines/Dick Donner")
        assert "OLD-MARKER-6" in after.text and "outlines_note" not in after.json(), after.text
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=as_caller(api.app, STAFF)),
            base_url="http://hopsearch",
            headers={"Authorization": f"ApiKey {API_KEY}"},
        ) as staff:
            assert (await staff.get("/_outlines/Richard Donner")).status_code == 404  # no lineage: admins' only


async def test_a_fact_names_its_trace_only_once_the_trace_exists(es_node: EsNode) -> None:
    """After ``kill -9`` of ``serve`` during a question its facts are saved but its trace never is: the fact
    says the trace was lost (or is pending while its question may still run), the viewer says so too."""
    async with serving(es_node.url, load=True) as api:
        store = await api.store()
        written = source(api.alias, "p-jaws")
        old = datetime.now(UTC) - timedelta(hours=2)
        facts = (
            replace(fact("written fact", written), trace_id="t-written", created_at=old),
            replace(fact("killed fact", written), trace_id="t-killed", created_at=old),
            replace(fact("running fact", written), trace_id="t-running"),
        )
        await EsOutlineStore(store).save([EntityOutline("default", "Jaws", (), facts)])
        await store.put_document(api.settings.traces_index, "t-written", {"trace_id": "t-written"}, refresh=True)
        got = (await api.client.get("/_outlines/Jaws")).json()["_source"]["facts"]
        shown = {f["summary"]: (f["trace_id"], f.get("trace_status")) for f in got}
        assert shown == {
            "written fact": ("t-written", None),
            "killed fact": ("", "lost"),
            "running fact": ("", "pending"),
        }, shown
        viewer = await api.client.get("/_ui/traces/t-killed")
        assert viewer.status_code == 404 and "trace was lost" in viewer.text, viewer.text
