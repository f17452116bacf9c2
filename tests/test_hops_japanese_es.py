"""The second hop over Japanese company documents (issue 41) on 7.17, 8.19 and 9.2: documents loaded from real
files with ``index docs`` (SudachiPy tokens, 異体字 folded) whose names are no titles. The project page writes
its lead 「山﨑浩二」; the personnel notice, which shares no word with the question, writes 「山崎浩二」. The first
hop finds the project page's three chunks; one hop gives the places of its repeated chunks to the documents
that mention the names it holds — the notice, by the folded name — and a restricted evaluation that mentions
the same name shows only to the caller who may read it (whole responses of ``_retrieve``, ``/retrieve``,
``_ask`` and its trace, the MCP tools searched for its marker)."""

from __future__ import annotations

from pathlib import Path

from hopsearch.loaders.docs import load_docs
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.access import ADMIN
from hopsearch.service.api import create_app
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.requests import Query
from hopsearch.service.types import Hit, SearchResult
from tests.api_fixtures import api_settings, uvicorn_serving_async
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.test_hops_es import _responses
from tests.test_permissions_ask import EchoModel

QUESTION = "風車プロジェクトを率いる人の現在の役職は何ですか。"
SECRET = "HYOUKA-MARKER-8"
_FILLER = "会議の記録は共有フォルダに置き、関係者は週次で内容を確かめ、必要に応じて手順を見直すことにしている。"


def _section(heading: str, lead: str) -> str:
    """A section long enough to be a chunk of its own (Japanese chunks hold 300 characters or more)."""
    return f"## {heading}\n\n{lead}" + _FILLER * 6 + "\n"


DOCS = {
    "kazaguruma.md": "# 風車プロジェクト\n\n"
    + _section("概要", "風車プロジェクトは物流倉庫の自動搬送を進める全社プロジェクトで、責任者は山﨑浩二。")
    + _section("進捗", "風車プロジェクトは第二期に入り、北倉庫の自動搬送が稼働した。")
    + _section("課題", "風車プロジェクトの課題は夜間の保守要員の確保である。"),
    "jinji.md": "# 人事異動のお知らせ\n\n十月一日付で山崎浩二は物流システム部長に就任した。前職は生産技術課長。",
    "hyouka.md": f"# 評価面談の控え\n\n山崎浩二との面談で昇給の見送りを伝えた。{SECRET}",
    "shokudo.md": "# 社員食堂\n\n社員食堂は十一時から十四時まで営業する。",
}


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    (root / ".hopsearch-acl.yaml").write_text('"*": [public]\n"hyouka.md": [group:hr]\n', encoding="utf-8")
    return root


def _file(hit: Hit) -> str:
    return Path(str(hit.source.get("path"))).name


def _files(result: SearchResult) -> list[str]:
    return [_file(hit) for hit in result.hits]


async def test_japanese_documents_hop_by_the_names_they_hold_variant_kanji_folded(
    es_node: EsNode, tmp_path: Path
) -> None:
    with server_for("vllm", EchoModel()) as llm:
        settings = api_settings(es_node.url, llm)
        async with await Runtime.open(settings) as runtime:
            try:
                opts = LoadOptions(checkpoint=tmp_path / "c", dead_letter=tmp_path / "d")
                report = await load_docs(runtime.store, _folder(tmp_path), opts)
                assert report.indexed == len(DOCS) and report.rejected == 0
                queries = [Query(QUESTION, k=4, mode="bm25", hops=0), Query(QUESTION, k=4, mode="bm25", hops=1)]
                request = await usecases.search_request(runtime, queries, caller=ADMIN)
                one, two = await usecases.search(runtime, request)
                async with uvicorn_serving_async(create_app(settings)) as url:
                    got = await _responses(url, settings.passages_alias, QUESTION, 4)
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )
    assert _files(one) == ["kazaguruma.md"] * 3  # the question names only the project
    assert _files(two)[0] == "kazaguruma.md" and {"jinji.md", "hyouka.md"} <= set(_files(two)), _files(two)
    notice = next(hit.id for hit in two.hits if _file(hit) == "jinji.md")
    [link] = [x for x in two.links if x.passage == notice]
    assert link.name == "山崎浩二" and link.source == one.hits[0].id  # 山﨑 in the page, 山崎 in the notice
    assert "shokudo.md" not in _files(two)  # a name no other document holds leads nowhere
    for route, text in got["public"].items():
        assert SECRET not in text, f"public {route} leaked the mentioned passage"
        assert "人事異動" in text or route == "_ask", route  # the notice reaches every caller
    for route in ("_retrieve", "/retrieve", "mcp"):
        assert SECRET in got["hr"][route] and SECRET in got["admin"][route], route
