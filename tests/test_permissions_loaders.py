"""Loading permissions: ``index docs --acl``, nested ``.hopsearch-acl.yaml`` sidecars, the ``acl`` field of
JSONL records and the ``acl`` column of DPR files, the defaults (DPR and QA public, others none), bad
principals as errors naming the file and line, and an ACL-only change: unchanged files are re-sent whole
without embedding them again (vectors from the cache, or read back from the index), and dense search still
finds them. Real Elasticsearch (7.17, 8.19, 9.2), the real loaders, MiniLM vectors.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hopsearch.cli.main import main
from hopsearch.loaders.api import load_docs, load_dpr, load_jsonl, load_qa_contexts
from hopsearch.loaders.config import LoadConfig
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.access import Caller
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.errors import InputError
from hopsearch.service.requests import Query
from hopsearch.service.store import Store
from tests.conftest import EsNode, make_settings
from tests.vector_readback import held_vectors

PARA = "Every employee reads this paragraph about the travel policy and the salary review process. " * 3


class CountingEmbedder:
    """MiniLM, counting the texts it is asked to embed."""

    def __init__(self, inner: MiniLMEmbedder) -> None:
        self.inner = inner
        self.texts = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dims(self) -> int:
        return self.inner.dims

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += len(texts)
        return await self.inner.embed(texts)


def _tree(root: Path) -> None:
    (root / "hr").mkdir(parents=True)
    (root / "other").mkdir()
    (root / "a.md").write_text(f"# Staff notes\n\n{PARA}")
    (root / "b.txt").write_text(f"Public notice. {PARA}")
    (root / "hr" / "x.md").write_text(f"# HR guide\n\n{PARA}")
    (root / "hr" / "pay-2024.md").write_text(f"# Pay 2024\n\n{PARA}")
    (root / "other" / "y.md").write_text(f"# Other\n\n{PARA}")
    (root / ".hopsearch-acl.yaml").write_text('"*": [group:staff]\n"*.txt": public\n')
    (root / "hr" / ".hopsearch-acl.yaml").write_text('"*": [group:hr, user:Ｃａｒｏｌ]\n"pay-*.md": private\n')


async def _acls(store: Store, index: str | None = None) -> dict[str, list[str] | None]:
    """Each file's (relative name) acl, as its chunks hold it (all chunks agree)."""
    body = {"size": 1000, "query": {"match_all": {}}, "_source": ["path", "acl", "doc_id"]}
    hits = (await store.search(index or store.settings.passages_alias, body))["hits"]["hits"]
    out: dict[str, list[str] | None] = {}
    for hit in hits:
        source = hit["_source"]
        name = source.get("path") or source.get("doc_id")
        acl = source.get("acl")
        assert out.get(name, acl) == acl, (name, out.get(name), acl)
        out[str(name)] = acl
    return out


async def test_docs_sidecars_nested_and_acl_combine_as_documented(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "tree"
    _tree(root)
    report = await load_docs(store, root)
    assert report.reconciled and report.rejected == 0
    acls = {Path(path).relative_to(root).as_posix(): acl for path, acl in (await _acls(store)).items()}
    assert acls == {
        "a.md": ["group:staff"],
        "b.txt": ["public"],  # the last matching pattern of the nearest sidecar
        "hr/x.md": ["group:hr", "user:carol"],  # the deeper sidecar replaces; names normalised (NFKC, casefold)
        "hr/pay-2024.md": ["private"],
        "other/y.md": ["group:staff"],  # a sidecar covers its folder and below
    }
    # a subfolder loaded alone reads the sidecars above it too; --acl covers what no sidecar does
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "z.md").write_text(f"# Loose\n\n{PARA}")
    await load_docs(store, root / "hr")
    await load_docs(store, loose, acl=["group:eng", "user:dave"])
    acls = await _acls(store)
    assert acls[str(root / "hr" / "x.md")] == ["group:hr", "user:carol"]
    assert acls[str(loose / "z.md")] == ["group:eng", "user:dave"]


async def test_a_bad_principal_in_a_sidecar_stops_the_load_naming_the_file_and_line(
    store: Store, tmp_path: Path
) -> None:
    root = tmp_path / "tree"
    _tree(root)
    (root / "hr" / ".hopsearch-acl.yaml").write_text('"*": [group:hr]\n"pay-*.md": [team:pay]\n')
    with pytest.raises(InputError) as caught:
        await load_docs(store, root)
    assert f"{root / 'hr' / '.hopsearch-acl.yaml'}:2" in str(caught.value) and "team:pay" in str(caught.value)
    assert not await store.exists(store.settings.passages_alias) or await store.count() == 0
    with pytest.raises(InputError, match="--acl"):
        await load_docs(store, root / "other", acl=["group:*"])


async def test_jsonl_and_dpr_acl_fields_and_the_defaults(
    store: Store, tmp_path: Path, sample_questions_path: Path
) -> None:
    rows = [
        {"_id": "j1", "text": "one", "acl": "group:hr, public"},
        {"_id": "j2", "text": "two", "acl": ["user:Bob"]},
        {"_id": "j3", "text": "three"},
        {"_id": "j4", "text": "four", "acl": ["admins"]},
        {"_id": "j5", "text": "five", "acl": 7},
    ]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dead = tmp_path / "dead.jsonl"
    report = await load_jsonl(store, jsonl, LoadOptions(dead_letter=dead))
    assert (report.indexed, report.rejected) == (3, 2)
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [(d["line"], "acl" in d["reason"]) for d in letters] == [(4, True), (5, True)]
    tsv = tmp_path / "psgs.tsv"
    tsv.write_text("id\ttext\ttitle\n" + "d1\tWiki text one\tOne\n")
    tsv_acl = tmp_path / "psgs_acl.tsv"
    tsv_acl.write_text("id\ttext\ttitle\tacl\nd2\tText two\tTwo\tgroup:hr,user:eve\nd3\tText three\tThree\t\n")
    tsv_bad = tmp_path / "psgs_bad.tsv"
    tsv_bad.write_text("id\ttext\ttitle\tacl\nd4\tText four\tFour\tgroup:\n")
    for path in (tsv, tsv_acl):
        assert (await load_dpr(store, path)).rejected == 0
    bad = await load_dpr(store, tsv_bad, LoadOptions(dead_letter=tmp_path / "dead2.jsonl"))
    assert bad.rejected == 1
    [letter] = [json.loads(line) for line in (tmp_path / "dead2.jsonl").read_text().splitlines()]
    assert letter["line"] == 2 and "bad principal 'group:'" in letter["reason"] and letter["raw"].endswith("group:\n")
    await load_qa_contexts(store, sample_questions_path, LoadOptions(limit=5))
    await store.refresh(store.settings.passages_alias)
    acls = await _acls(store)
    assert {k: acls[k] for k in ("j1", "j2", "j3", "d1", "d2", "d3")} == {
        "j1": ["group:hr", "public"],
        "j2": ["user:bob"],
        "j3": None,  # read as acl_default when searched
        "d1": ["public"],
        "d2": ["group:hr", "user:eve"],
        "d3": ["public"],
    }
    qa = [acl for name, acl in acls.items() if name not in {f"j{i}" for i in range(9)} | {"d1", "d2", "d3"}]
    assert qa and all(acl == ["public"] for acl in qa)


@pytest.mark.parametrize("cache", [True, False])
async def test_an_acl_change_resends_whole_documents_without_embedding_them_again(
    es_node: EsNode, minilm: MiniLMEmbedder, tmp_path: Path, cache: bool
) -> None:
    settings = make_settings(
        es_node.url, embedder="minilm", cache_dir=tmp_path / "cache", vector_cache_mb=64 if cache else 0
    )
    async with await Runtime.open(settings) as runtime:
        store = runtime.store
        loading = LoadOptions(config=LoadConfig.of(settings))  # the settings' vector cache
        try:
            root = tmp_path / "tree"
            _tree(root)
            embedder = CountingEmbedder(minilm)
            first = await load_docs(store, root, loading, embedder=embedder)
            chunks = first.documents
            assert embedder.texts == chunks > 0
            before = await _vectors(store)
            # the HR folder opens up to staff: an ACL-only change of the two HR files
            (root / "hr" / ".hopsearch-acl.yaml").write_text('"*": [group:staff]\n')
            embedder.texts = 0
            again = await load_docs(store, root, loading, embedder=embedder)
            assert embedder.texts == 0, again.extra
            assert again.extra["files_acl_changed"] == 2 and again.extra["files_new_or_changed"] == 0
            hr_chunks = again.documents
            source = "from_cache" if cache else "from_index"
            assert again.extra["vectors"][source] == hr_chunks > 0 and again.extra["vectors"]["embedded"] == 0
            assert await _vectors(store) == before  # the same vectors, re-sent
            acls = await _acls(store)
            assert acls[str(root / "hr" / "pay-2024.md")] == ["group:staff"]
            # dense search finds the re-sent chunks, for the callers now allowed
            staff = Caller.of(["group:staff"], subject="sam")
            query = Query("HR guide travel policy", k=20, mode="dense")
            [found] = await usecases.search(runtime, await usecases.search_request(runtime, [query], caller=staff))
            assert {str(root / "hr" / "x.md"), str(root / "hr" / "pay-2024.md")} <= {
                h.source.get("path") for h in found.hits
            }
            # and a --no-embed load of another ACL change keeps them too (read back from the index)
            (root / "hr" / ".hopsearch-acl.yaml").write_text('"*": [group:hr]\n')
            third = await load_docs(store, root, loading)
            assert third.extra["files_acl_changed"] == 2 and await _vectors(store) == before
            assert third.extra["vectors"]["from_index"] == hr_chunks
            # unchanged ACLs: nothing re-sent
            fourth = await load_docs(store, root, loading, embedder=embedder)
            assert fourth.skipped == fourth.read and embedder.texts == 0
        finally:
            await store.client.indices.delete(
                index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
            )


async def _vectors(store: Store) -> dict[str, Any]:
    held = await held_vectors(store)
    assert held and all(vector for _, vector in held.values())  # every passage has one (read back)
    return held


def test_the_cli_takes_acl_and_refuses_a_bad_one(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\ntext")
    env = {"HOPSEARCH_ES_URL": "http://127.0.0.1:1", "HOPSEARCH_STATE_DIR": str(tmp_path / "state")}
    result = CliRunner().invoke(main, ["index", "docs", str(tmp_path), "--acl", "group:", "--no-embed"], env=env)
    assert result.exit_code != 0 and "--acl" in result.output and "group:" in result.output
