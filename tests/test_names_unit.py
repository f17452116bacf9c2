"""The names a passage holds (issue 52): units split from the roles that qualify them, codes and people folded
as the Japanese fields fold text, company synonyms applied to a question's names, and where the names hop
places what it finds."""

from __future__ import annotations

from hopsearch.service.retrieval import namelinks
from hopsearch.service.text.japanese import Synonyms
from hopsearch.service.text.names import fold, names_of, query_names
from hopsearch.service.types import Hit, Link


def test_a_role_qualified_unit_is_the_unit_and_the_role() -> None:
    assert names_of("出張旅費は総務部長が承認する。") == ["総務部", "部長"]
    assert names_of("第二工場長が立ち会う。") == ["第二工場", "工場長"]
    assert names_of("品質保証部の部長に報告する。") == ["品質保証部", "部長"]
    assert names_of("所属部署の変更と人事課題。") == []  # 部署, 課題: the unit word opens another word


def test_people_codes_and_quoted_names_are_folded() -> None:
    assert names_of("部署: 総務部 | 部長: 山田 太郎") == ["総務部", "部長", "山田太郎"]
    assert "山崎雅人" in names_of(
        "第二製造部の部長は山﨑 雅人です。"
    )  # 異体字 folded, one name with or without a blank
    assert names_of("Ｍ－２０４の仕様") == names_of("M-204の仕様") == ["m-204"]
    assert {"ミドリ5", "アクアボンド"} <= set(names_of("「アクアボンド」とミドリ５を出荷する。"))
    assert fold("Ｍ－２０４") == "m-204"


def test_company_synonyms_apply_to_a_questions_names() -> None:
    synonyms = Synonyms([["第二開発部", "二開"]])
    assert {"第二開発部", "二開"} <= set(query_names("二開の部長は誰ですか。", synonyms))
    assert "第二開発部" not in query_names("二開の部長は誰ですか。")


def _hit(n: int, doc: str) -> Hit:
    return Hit(f"h{n}", 10.0 - n, doc, f"text {n}", {"doc_id": doc})


def test_linked_passages_take_the_places_of_repeated_chunks_and_push_no_document_out() -> None:
    first = [_hit(0, "a"), _hit(1, "a"), _hit(2, "b"), _hit(3, "a"), _hit(4, "c")]
    linked = [
        (Link("総務部", "h0", "h9", "names"), _hit(9, "x")),
        (Link("山田太郎", "h0", "h8", "names"), _hit(8, "y")),
    ]
    hits, links = namelinks.placed(first, linked, 5, "fill")
    assert [hit.source["doc_id"] for hit in hits] == ["a", "x", "b", "y", "c"]
    assert [link.passage for link in links] == ["h9", "h8"]  # the moved chunks of "a" fell past k
    assert namelinks.placed(first[:3], linked, 3, "fill")[0][0].id == "h0"  # never above the top one
