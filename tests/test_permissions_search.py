"""Document permissions in the search use case, as an attacker checks them: restricted passages carry
marker strings, and every result a caller gets (hits, sources, fusion legs, scores, counts) is searched
whole for the markers of passages it may not read — for an admin, ``group:hr`` and a public-only caller,
every retrieval mode and fusion the version runs, a batch, ``search_fused``, passages without ``acl`` under
both ``acl_default`` values, and an index made before permissions (schema 1). Real Elasticsearch (7.17,
8.19, 9.2), the real JSONL loader (its ``acl`` field) and MiniLM vectors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hopsearch.loaders.upgrade import upgrade_index
from hopsearch.service.access import Scope
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.requests import Query
from hopsearch.service.retrieval.readers import passages_by_id
from hopsearch.service.store.indices import IN_PLACE_VERSION
from hopsearch.service.types import RetrievalQuery
from tests.conftest import EsNode, make_settings
from tests.permissions_corpus import (
    CALLERS,
    MARKED,
    MARKERS,
    QUERY,
    found_markers,
    has_acl_key,
    leaks,
    load_corpus,
    readable,
    records,
)

QUERIES = [
    Query(QUERY, k=10, mode="bm25"),
    Query(QUERY, k=10, mode="dense"),
    Query(QUERY, k=10, mode="hybrid", fusion="rrf", legs=True),
    Query(QUERY, k=10, mode="hybrid", fusion="bool", legs=True),
    Query(QUERY, k=10, mode="hybrid", fusion="es_rrf", legs=True),
]


async def _runtime(node: EsNode, tmp_path: Path, **overrides: Any) -> Runtime:
    settings = make_settings(node.url, **({"embedder": "minilm", "cache_dir": tmp_path / "cache"} | overrides))
    return await Runtime.open(settings)


async def _drop(runtime: Runtime) -> None:
    prefix = runtime.settings.index_prefix
    await runtime.store.client.indices.delete(index=f"{prefix}-*", allow_no_indices=True, ignore_unavailable=True)


@pytest.mark.parametrize("acl_default", ["private", "public"])
async def test_every_mode_and_fusion_returns_only_what_each_caller_may_read(
    es_node: EsNode, minilm: MiniLMEmbedder, tmp_path: Path, acl_default: str
) -> None:
    runtime = await _runtime(es_node, tmp_path, acl_default=acl_default, api_non_admin_scores="ranks")
    try:
        await load_corpus(runtime.store, tmp_path, minilm)
        index = runtime.settings.passages_alias
        # one passage without a vector, readable by group:hr only: dense results count it for hr alone
        body = {"title": "No vector", "text": "salary handbook minutes, no vector", "acl": ["group:hr"]}
        await runtime.store.put_document(index, "hr-novector", body, refresh=True)
        problems: list[str] = []
        for name, caller in CALLERS.items():
            request = await usecases.search_request(runtime, QUERIES, caller=caller)  # ONE batch
            results = await usecases.search(runtime, request)
            fusions = [r.fusion for r in results]
            for query, result in zip(QUERIES, results, strict=True):
                label = f"{name} {query.mode}/{query.fusion}→{result.fusion}"
                if leaked := leaks(result, name, acl_default):
                    problems.append(f"{label}: leaked {sorted(leaked)}")
                missing = readable(name, acl_default) - found_markers(result)
                if missing:
                    problems.append(f"{label}: missing {sorted(missing)}")
                if name != "admin":
                    if has_acl_key(result):
                        problems.append(f"{label}: acl returned")
                    scores = [h.score for h in result.hits]
                    if scores != [1.0 / r for r in range(1, len(scores) + 1)]:
                        problems.append(f"{label}: scores, not ranks: {scores}")
                if query.mode != "bm25" and result.without_vectors != (0 if name == "public" else 1):
                    problems.append(f"{label}: {result.without_vectors} without vectors")
            assert "none" not in fusions[2:], fusions
            # search_fused (DualRAG's path): BM25 fused over the raw answers, and hybrid
            bound = runtime.retriever.bind(request.scope)
            groups = [[RetrievalQuery(QUERY, k=10), RetrievalQuery("handbook", k=10)]]
            for mode in ("bm25", "hybrid"):
                fused = await bound.search_fused([[RetrievalQuery(q.text, k=10, mode=mode) for q in groups[0]]], 10)
                if leaked := leaks(fused, name, acl_default):
                    problems.append(f"{name} search_fused {mode}: leaked {sorted(leaked)}")
                if name != "admin" and has_acl_key(fused):
                    problems.append(f"{name} search_fused {mode}: acl returned")
        admin = await usecases.search(
            runtime, await usecases.search_request(runtime, QUERIES[:1], caller=CALLERS["admin"])
        )
        assert has_acl_key(admin) and found_markers(admin) == MARKERS  # the check can see a leak
        assert problems == [], "\n".join(problems)
    finally:
        await _drop(runtime)
        await runtime.close()


async def test_lookups_by_id_read_through_the_access_filter(
    es_node: EsNode, tmp_path: Path, minilm: MiniLMEmbedder
) -> None:
    """The viewer's passage titles: a search over the ids with the access filter (an _mget cannot filter)."""
    runtime = await _runtime(es_node, tmp_path, embedder="none")
    try:
        await load_corpus(runtime.store, tmp_path)
        index = runtime.settings.passages_alias
        ids = list(MARKED)
        for name, caller in CALLERS.items():
            found = await passages_by_id(runtime.store, Scope(index, caller), ids, ["title", "text", "acl"])
            assert found_markers(found) == readable(name, "private"), name
            assert has_acl_key(found) == (name == "admin")
    finally:
        await _drop(runtime)
        await runtime.close()


@pytest.mark.parametrize("acl_default", ["private", "public"])
async def test_an_index_made_before_permissions_reads_as_acl_default_and_says_how_to_move_it(
    es_node: EsNode, tmp_path: Path, acl_default: str
) -> None:
    runtime = await _runtime(es_node, tmp_path, embedder="none", acl_default=acl_default)
    store = runtime.store
    try:
        # schema 1: the template without acl, as hopsearch made it before
        body = store.passages_body(None)
        del body["mappings"]["properties"]["acl"]
        body["mappings"]["_meta"]["hopsearch"]["schema_version"] = 1
        name = f"{runtime.settings.passages_alias}-v1"
        await store.client.indices.create(index=name, body=body)
        await store.swap_alias(name)
        rows = [{k: v for k, v in r.items() if k != "acl"} for r in records()]
        actions = [
            {"_index": name, "_id": r["_id"], "_source": {"title": r["title"], "text": r["text"], "source": "jsonl"}}
            for r in rows
        ]
        assert (await store.bulk(actions, refresh=True))[0] == len(rows)
        for caller_name, caller in CALLERS.items():
            [result] = await usecases.search(
                runtime, await usecases.search_request(runtime, [Query(QUERY, k=10)], caller=caller)
            )
            everything = caller_name == "admin" or acl_default == "public"
            assert found_markers(result) == (MARKERS if everything else set()), caller_name
            assert "hopsearch indices upgrade" in result.index_note and "schema 1" in result.index_note
            request = await usecases.ask_request(runtime, QUERY, caller=caller, strategy="single")
            assert "hopsearch indices upgrade" in request.index_note
        # the command the note names: in place, every passage kept; --acl public for those without one
        done = await upgrade_index(store, runtime.settings.passages_alias, acl=["public"])
        assert done["indices"] == [
            {
                "index": name,
                "from": 1,
                "to": IN_PLACE_VERSION,
                "acl_given": len(rows),
                "vectors": done["indices"][0]["vectors"],
            }
        ]
        await store.refresh(name)
        meta = await store.index_meta(name)
        assert meta["schema_version"] == IN_PLACE_VERSION and meta["upgraded_from"] == 1
        [result] = await usecases.search(
            runtime, await usecases.search_request(runtime, [Query(QUERY, k=10)], caller=CALLERS["public"])
        )
        # schema 2 now: permissions apply; what it still lacks (schema 3) needs a rebuild, and the note says so
        assert found_markers(result) == MARKERS and "acl_default" not in result.index_note
        assert "--rebuild" in result.index_note and "schema 2 < 4" in result.index_note
        assert await store.count(name) == len(rows)
    finally:
        await _drop(runtime)
        await runtime.close()
