"""The names hop (issue 52) on 7.17, 8.19 and 9.2: every chunk's ``names`` filled at index time and looked up
in one ``terms`` with the title lookup. A regulation names the approver by role (「総務部長」); the org chart
(a CSV: each row carries its header) holds the row 「部署: 総務部 | 部長: 山田 太郎」 but not the regulation's
words, so one hop finds it and no hop does not; an index made before names (no ``names`` in its ``_meta``)
hops as it did. A restricted chunk that holds the same unit and a name of its own is never a link for a
caller who may not read it, and no caller but an admin is ever shown a chunk's ``names`` (whole responses
of ``_retrieve``, ``/retrieve``, ``_ask`` JSON, SSE and trace, ``/v1`` and its stream, MCP). A full-width
query (``Ｍ－２０４``) finds ``M-204``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hopsearch.loaders.docs import load_docs
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.access import ADMIN
from hopsearch.service.api import create_app
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.requests import Query
from hopsearch.service.text.japanese import annotate, ja_tokens_of
from hopsearch.service.types import Hit, SearchResult
from tests.api_fixtures import api_settings, uvicorn_serving_async
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.test_hops_es import _responses
from tests.test_permissions_ask import EchoModel

QUESTION = "出張旅費の精算を最終的に承認する人の氏名を教えてください。"
SECRET = "KANSA-MARKER-52"
SECRET_NAME = "ZX-9917"
#: A chunk's names as a response would show them (``metadata.names`` is the recipe's number, not names).
LISTED = re.compile(r'"names":\s*\[')
_FILLER = "申請は所定の様式で行い、領収書の原本を添付して提出する。差し戻しの際は理由を記す。"


def _section(heading: str, lead: str) -> str:
    """A section long enough to be a chunk of its own (Japanese chunks hold 300 characters or more)."""
    return f"## {heading}\n\n{lead}" + _FILLER * 7 + "\n"


DOCS = {
    "ryohi.md": "# 出張旅費規程\n\n"
    + _section("承認", "出張旅費の精算は総務部長が最終的に承認する。")
    + _section("国内出張", "国内出張の出張旅費は実費を精算する。")
    + _section("海外出張", "海外出張の出張旅費は日当を加えて精算する。"),
    "soshiki.csv": "部署,部長,所在\n総務部,山田 太郎,本社三階\n経理部,佐藤 花子,本社二階\n人事部,鈴木 一郎,本社四階\n",
    "kansa.md": f"# 監査メモ\n\n総務部の監査で{SECRET_NAME}の持ち出しが見つかった。{SECRET}",
    "spec.md": "# 仕様書\n\nM-204 は小型の搬送台車で、定格電圧は24ボルトである。",
    "shokudo.md": "# 社員食堂\n\n社員食堂は十一時から十四時まで営業する。",
}


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    (root / ".hopsearch-acl.yaml").write_text('"*": [public]\n"kansa.md": [group:hr]\n', encoding="utf-8")
    return root


def _file(hit: Hit) -> str:
    return Path(str(hit.source.get("path"))).name


def _files(result: SearchResult) -> list[str]:
    return [_file(hit) for hit in result.hits]


async def _asked(runtime: Runtime, question: str, k: int) -> tuple[SearchResult, SearchResult]:
    queries = [Query(question, k=k, mode="bm25", hops=0), Query(question, k=k, mode="bm25", hops=1)]
    request = await usecases.search_request(runtime, queries, caller=ADMIN)
    one, two = await usecases.search(runtime, request)
    return one, two


async def test_a_role_qualified_question_finds_the_org_chart_row_by_the_names_lookup(
    es_node: EsNode, tmp_path: Path
) -> None:
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(es_node.url, llm, hops_names=True)
        async with await Runtime.open(settings) as runtime:
            try:
                opts = LoadOptions(checkpoint=tmp_path / "c", dead_letter=tmp_path / "d")
                report = await load_docs(runtime.store, _folder(tmp_path), opts)
                assert report.indexed == len(DOCS) and report.rejected == 0
                one, two = await _asked(runtime, QUESTION, 3)
                wide, _ = await _asked(runtime, "Ｍ－２０４の定格電圧", 3)
                bare, _ = await _asked(runtime, "Ｍ－２０４", 3)
                async with uvicorn_serving_async(create_app(settings)) as url:
                    got = await _responses(url, settings.passages_alias, QUESTION, 3)
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )
    assert _files(one) == ["ryohi.md"] * 3, _files(one)  # the regulation's three chunks, no org chart
    assert _files(two)[0] == "ryohi.md" and "soshiki.csv" in _files(two), _files(two)
    row = next(hit for hit in two.hits if _file(hit) == "soshiki.csv")
    assert "総務部" in row.source["names"] and "山田太郎" in row.source["names"]  # an admin sees them
    [link] = [x for x in two.links if x.passage == row.id]
    assert link.name == "総務部" and link.source in {hit.id for hit in one.hits}
    assert _files(wide)[0] == "spec.md" and _files(bare)[0] == "spec.md"  # full-width folds to M-204
    for route, text in got["public"].items():
        assert SECRET not in text and SECRET_NAME not in text and SECRET_NAME.lower() not in text, route
        assert not LISTED.search(text), route  # names are an admin's to see
    for route in ("_retrieve", "/retrieve", "mcp"):
        assert "部長: 山田" in got["public"][route] and "部長: 山田" in got["hr"][route], route  # the row
        assert SECRET in got["hr"][route] and SECRET in got["admin"][route], route  # hr may read the memo
    for route, text in got["hr"].items():
        assert not LISTED.search(text) and SECRET_NAME.lower() not in text, route  # its text, never its names
    assert LISTED.search(got["admin"]["_retrieve"])


async def _made_before_names(runtime: Runtime) -> None:
    """The index as the code before names left it: no ``names`` in its chunks or its ``_meta``."""
    store = runtime.store
    alias = store.settings.passages_alias
    meta = dict(await store.index_meta(alias))
    hits = (await store.search(alias, {"size": 100, "query": {"match_all": {}}}))["hits"]["hits"]
    actions: list[dict[str, Any]] = []
    for hit in hits:
        source = hit["_source"]
        source.pop("names")
        source["metadata"].pop("names")
        annotate(source, meta["ja_analysis"], ja_tokens_of(meta))  # token fields are never in _source
        actions.append({"_op_type": "index", "_index": hit["_index"], "_id": hit["_id"], "_source": source})
    ok, errors = await store.bulk(actions, refresh=True)
    assert ok == len(hits) and not errors
    meta.pop("names")
    await store.client.indices.put_mapping(index=alias, body={"_meta": {"hopsearch": meta}})


async def test_an_index_made_before_names_hops_as_it_did_until_the_next_load_fills_them(
    es_node: EsNode, tmp_path: Path
) -> None:
    """No ``names`` in ``_meta`` (an index made before them): the hop is the title lookup and the mention
    search, which find no name in 「総務部長」; the next ``index docs`` reads every file again, fills the names
    in place and says so in ``_meta``, and the hop finds the org chart's row."""
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(es_node.url, llm, hops_names=True)
        try:
            async with await Runtime.open(settings) as runtime:
                opts = LoadOptions(checkpoint=tmp_path / "c", dead_letter=tmp_path / "d")
                await load_docs(runtime.store, _folder(tmp_path), opts)
                await _made_before_names(runtime)
            async with await Runtime.open(settings) as runtime:
                one, two = await _asked(runtime, QUESTION, 3)
                again = await load_docs(runtime.store, tmp_path / "docs", opts)
                meta = await runtime.store.index_meta(settings.passages_alias)
                _, filled = await _asked(runtime, QUESTION, 3)
        finally:
            async with await Runtime.open(settings) as runtime:
                await runtime.store.client.indices.delete(
                    index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )
    assert all("names" not in hit.source for hit in (*one.hits, *two.hits))
    assert _files(two) == _files(one) == ["ryohi.md"] * 3 and not two.links
    assert again.indexed == len(DOCS) and meta.get("names") == 1  # every file read again, names in place
    assert "soshiki.csv" in _files(filled) and "総務部" in {link.name for link in filled.links}, _files(filled)
