"""異体字 folding and company synonyms in Japanese BM25 (issue 32): the token recipe an index records in its
``_meta`` (``ja_tokens``), queries cut with the recipe of the index they search (an index built before
keeps answering as it was built), synonyms from the ``ja_synonyms`` setting, DualRAG's entity keys; real
Elasticsearch 7.17 / 8.19 / 9.2 where an index is involved."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hopsearch.cli.main import main
from hopsearch.loaders.docs import load_docs
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.errors import InputError
from hopsearch.service.outlines.entities import EntityLinker, entity_key
from hopsearch.service.outlines.store import EsOutlineStore
from hopsearch.service.retrieval import EsRetriever
from hopsearch.service.retrieval.config import RetrievalConfig
from hopsearch.service.store import Store
from hopsearch.service.text.japanese import TOKENS, Synonyms, ja_query, ja_tokens_note, ja_tokens_of, tokenizer
from hopsearch.service.types import RetrievalQuery
from tests.conftest import EsNode, _drop, make_settings
from tests.dual_fixtures import ChatModel, entities, reason
from tests.scopes import scope_of
from tests.test_dualrag_es import ask

DOCS = {
    "daini.md": "# 第二工場\n\n第二工場の工場長は髙木正人です。敷地面積は四万平方メートルです。",
    "jinji.md": "# 人事異動\n\n山﨑浩は生産本部長に就任した。前職は生産技術部長。",
    "kenkai.md": "# 研究開発部\n\n研究開発部の第二グループは水性接着剤を担当する。リーダーは川﨑悠。",
    "soumu.md": "# 総務部\n\n総務部は防災訓練を主催する。室長は大﨑智子。",
}


def test_tokens_fold_variants_from_version_two_and_queries_follow_the_index() -> None:
    tok = tokenizer()
    assert TOKENS == 2
    assert tok.tokens("髙木さんと山﨑さん") == tok.tokens("高木さんと山崎さん")
    assert "髙" in tok.joined("髙木", 1) and "高" in tok.joined("髙木", 2)  # version 1: as before, apart
    assert ja_tokens_of({}) == 1 and ja_tokens_of({"ja_tokens": 2}) == 2
    assert ja_tokens_note("p", {"ja_analysis": "sudachi", "ja_tokens": 2}) == ""
    assert ja_tokens_note("p", {"ja_analysis": "kuromoji"}) == ""  # kuromoji analyses in Elasticsearch
    assert "[p] has Japanese tokens of recipe 1" in ja_tokens_note("p", {"ja_analysis": "sudachi"})
    new = ja_query("髙木さんはどこの工場長ですか", {"ja_analysis": "sudachi", "ja_tokens": 2})
    old = ja_query("髙木さんはどこの工場長ですか", {"ja_analysis": "sudachi"})
    assert new is not None and old is not None and "高" in new[0] and "髙" in old[0]


def test_entity_keys_fold_variants() -> None:
    assert entity_key("山﨑 浩") == entity_key("山崎浩") == "山崎浩"
    assert entity_key("髙木さん") == "高木"
    linker = EntityLinker()
    first = linker.link("川﨑 悠")
    second = linker.link("川崎悠")
    assert first is not None and second is not None and second.how == "key"


def test_synonyms_expand_queries_and_read_their_file(tmp_path: Path) -> None:
    syn = Synonyms([["研究開発部", "研開"], ["品質保証部", "品保"]])
    assert syn.expand("研開のリーダーは誰") == "研開のリーダーは誰 研究開発部"
    assert syn.expand("研究開発部と品保") == "研究開発部と品保 研開 品質保証部"
    assert syn.expand("総務部の室長") == "総務部の室長" and syn.canonical("研開") == "研究開発部"
    assert not Synonyms() and syn
    good = tmp_path / "syn.txt"
    good.write_text("# company terms\n研究開発部, 研開  # the lab\n\n品質保証部、品保\n", encoding="utf-8")
    assert Synonyms.read(good).groups == (("研究開発部", "研開"), ("品質保証部", "品保"))
    bad = tmp_path / "bad.txt"
    bad.write_text("研究開発部, 研開\n総務部\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.txt.*2.*two terms"):
        Synonyms.read(bad)
    with pytest.raises(InputError, match="cannot read"):
        Synonyms.read(tmp_path / "missing.txt")


def _files(result: object) -> list[str]:
    return [Path(str(h.source.get("path"))).name for h in result.hits]


async def _load(store: Store, root: Path, tmp_path: Path) -> None:
    opts = LoadOptions(checkpoint=tmp_path / "ja.ckpt", dead_letter=tmp_path / "ja.dl")
    report = await load_docs(store, root, opts)
    assert report.indexed == len(DOCS) and report.rejected == 0


def _docs_and_synonyms(tmp_path: Path) -> tuple[Path, Path]:
    """The test documents in a folder, and a synonyms file naming 研開 as 研究開発部."""
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    synonyms = tmp_path / "synonyms.txt"
    synonyms.write_text("研究開発部, 研開\n", encoding="utf-8")
    return root, synonyms


async def test_variant_names_and_synonyms_find_their_documents(es_node: EsNode, tmp_path: Path) -> None:
    root, synonyms = _docs_and_synonyms(tmp_path)
    store = await Store.connect(make_settings(es_node.url, ja_synonyms=synonyms))
    try:
        await _load(store, root, tmp_path)
        assert (await store.index_meta())["ja_tokens"] == TOKENS
        retriever = EsRetriever(store, config=RetrievalConfig.of(store.settings))
        scope = scope_of(store)
        asked = ["高木正人はどこの工場長ですか", "山崎浩の前職は何ですか", "研開の第二グループのリーダーは誰ですか"]
        results = await retriever.search_many(scope, [RetrievalQuery(q, k=1, mode="bm25") for q in asked])
        assert [_files(r) for r in results] == [["daini.md"], ["jinji.md"], ["kenkai.md"]]
        # without the setting, 研開 names nothing the index holds: another document comes first
        plain = EsRetriever(await Store.connect(make_settings(es_node.url, index_prefix=store.settings.index_prefix)))
        try:
            [alone] = await plain.search_many(scope, [RetrievalQuery("研開の室長", k=4, mode="bm25")])
            [named] = await retriever.search_many(scope, [RetrievalQuery("研開の室長", k=4, mode="bm25")])
            assert "kenkai.md" not in _files(alone) and _files(named)[0] == "kenkai.md"
        finally:
            await plain.store.close()

    finally:
        await _drop(store)
        await store.close()


async def test_an_index_built_before_token_versions_keeps_its_recipe(store: Store, tmp_path: Path) -> None:
    """An index whose ``_meta`` has no ``ja_tokens`` (built before 異体字 folding) gets unfolded tokens from a
    later load and is searched with unfolded queries: it never mixes two recipes and keeps answering."""
    await store.ensure_indices()
    meta = {**(await store.index_meta()), "ja_tokens": None}  # _meta objects merge: null unsets
    await store.client.indices.put_mapping(index=store.settings.passages_alias, body={"_meta": {"hopsearch": meta}})
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    old = await Store.connect(store.settings)  # a process that finds the index as it was built
    try:
        await _load(old, root, tmp_path)
        assert ja_tokens_of(await old.index_meta()) == 1
        exact, folded = await EsRetriever(old).search_many(
            scope_of(old), [RetrievalQuery("髙木", k=1, mode="bm25"), RetrievalQuery("高木", k=1, mode="bm25")]
        )
    finally:
        await old.close()
    assert _files(exact) == ["daini.md"]  # as built: 髙 matches 髙
    assert "daini.md" not in _files(folded)  # and 高 does not (a rebuild folds them)
    env = {"HOPSEARCH_ES_URL": store.settings.es_url[0], "HOPSEARCH_INDEX_PREFIX": store.settings.index_prefix}
    listed = await asyncio.to_thread(CliRunner().invoke, main, ["indices", "list", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    [row] = [r for r in json.loads(listed.stdout) if r["index"].startswith(store.settings.passages_alias)]
    assert "recipe 1 < 2" in row["ja_note"] and "--rebuild" in row["ja_note"]


async def test_dualrag_keys_a_company_abbreviation_as_its_group_name(es8_node: EsNode, tmp_path: Path) -> None:
    """The identifier says 「研開」: DualRAG searches and keeps the outline under 「研究開発部」 (ja_synonyms),
    so a later question that names either finds the same outline."""
    root, synonyms = _docs_and_synonyms(tmp_path)
    store = await Store.connect(make_settings(es8_node.url, ja_synonyms=synonyms))
    try:
        await _load(store, root, tmp_path)
        model = ChatModel(
            {
                "reasoner": [reason("研開のリーダーを調べる。", True)],
                "identifier": [entities(("研開", ["研開 リーダー"]))],
            },
            summaries=lambda entity, prompt: "研究開発部の第二グループのリーダーは川﨑悠。",
            answer="川﨑悠",
        )
        answer, doc = await ask(store, model, "研開の第二グループのリーダーは誰ですか")
        assert answer.text == "川﨑悠"
        [identify] = [s for s in doc["steps"] if s["kind"] == "identify"]
        assert [link["entity"] for link in identify["details"]["links"]] == ["研究開発部"]
        outlines = EsOutlineStore(store)
        kept = await outlines.get("default", "研究開発部")
        assert kept is not None and kept.facts[0].summary.startswith("研究開発部の第二グループ")
        assert await outlines.get("default", "研開") is None  # keyed by the group's name only
    finally:
        await _drop(store)
        await store.close()
