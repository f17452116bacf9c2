"""Excel and PowerPoint files (issue 32) and zip bombs in every zip-based format (issue 27, item 5).

Every file is built here from a spec (``tests/office_files.py``): openpyxl and python-pptx write real
files, and the bombs are real (a member of zeros, deflated: 2.2 MB that inflate to 2.28 GB, the size of
the reported one) but built without ever holding the zeros.
"""

from __future__ import annotations

import io
import json
import logging
import tracemalloc
import uuid
import zipfile
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from hopsearch.cli.index import EXIT_REJECTED
from hopsearch.cli.main import main
from hopsearch.loaders import docs as docs_module
from hopsearch.loaders import extract as extract_module
from hopsearch.loaders.chunking import chunk_document
from hopsearch.loaders.docs import load_docs
from hopsearch.loaders.extract import EXTRACTORS, Block, extract
from hopsearch.loaders.ziplimits import ZipLimits, check_zip
from hopsearch.service.config.settings import load_settings
from hopsearch.service.errors import InputError
from hopsearch.service.store import Store
from hopsearch.service.text.lang import detect_lang
from tests.conftest import EsNode
from tests.ja_corpus import write_document
from tests.office_files import pptx_bytes, xlsx_bytes, zip_bomb
from tests.test_loaders_docs import opts
from tests.test_loaders_es import read_letters

#: the size of the member in the reported .docx bomb
BOMB_BYTES = 2_281_701_376

#: A 方眼紙 travel request: 34 narrow columns, every cell bordered, labels and fields merged ranges, two
#: label/value pairs on a row, a two-row field, a formula with its cached value.
FORM = {
    "name": "申請書",
    "grid": "A1:AH13",
    "cells": [
        ["A1", "出張申請書"],
        ["A3", "申請日"],
        ["G3", datetime(2025, 4, 1)],
        ["Q3", "社員番号"],
        ["W3", "E-2041"],
        ["A4", "氏名"],
        ["G4", "山田　太郎"],
        ["Q4", "所属"],
        ["W4", "第二工場品質管理課"],
        ["A6", "出張先"],
        ["G6", "ミドリ電機堺事業所（大阪府堺市）"],
        ["A9", "目的"],
        ["G9", "ミドリ5量産立ち上げの品質監査"],
        ["A11", "交通費"],
        ["G11", 18400],
        ["Q11", "宿泊費"],
        ["W11", 12000.0],
        ["A12", "合計"],
        ["G12", {"formula": "=G11+W11", "cached": 30400}],
    ],
    "merged": [
        "A1:AH1",
        "A3:F3",
        "G3:P3",
        "Q3:V3",
        "W3:AH3",
        "A4:F4",
        "G4:P4",
        "Q4:V4",
        "W4:AH4",
        "A6:F7",
        "G6:AH7",
        "A9:F9",
        "G9:AH9",
        "A11:F11",
        "G11:P11",
        "Q11:V11",
        "W11:AH11",
        "A12:F12",
        "G12:AH12",
    ],
}
TABLE = {
    "name": "製品一覧",
    "cells": [
        *(["ABCDE"[c] + "1", h] for c, h in enumerate(["品番", "製品名", "単価", "発売日", "生産"])),
        *(["ABCDE"[c] + "2", v] for c, v in enumerate(["M5", "ミドリ5", 4800, datetime(2025, 6, 1), "第二工場"])),
        *(["ABCDE"[c] + "3", v] for c, v in enumerate(["A3", "アオバ3", 5200.5, datetime(2024, 10, 15), "#N/A"])),
        ["A6", "※ 単価は税抜"],
    ],
}
HIDDEN = {"name": "マスタ", "hidden": True, "cells": [["A1", "部署コード一覧"], ["A2", "QA-01"]]}
DECK = {
    "slides": [
        {
            "title": "ミドリ5 量産計画",
            "texts": ["第二工場で2025年6月に量産開始", "月産12,000台"],
            "notes": "堺事業所の監査結果を待って最終判断する。担当は品質管理課の山田。",
        },
        {
            "title": "価格",
            "table": [["品番", "単価"], ["M5", "4,800円"], ["", ""]],
            "notes": "競合のアオバ3は5,200円。値上げは北村部長が承認済み。",
        },
        {"texts": ["付録：用語集"]},
        {"title": ""},
    ]
}


def test_a_houganshi_form_reads_label_next_to_value_and_its_title_once(caplog: pytest.LogCaptureFixture) -> None:
    data = xlsx_bytes({"title": "出張申請書（山田）", "sheets": [FORM, HIDDEN]})
    with caplog.at_level(logging.INFO, logger="hopsearch.loaders.office"):
        title, blocks = extract(".xlsx", data, source="forms/出張.xlsx")
    assert title == "出張申請書（山田）"
    assert blocks == [
        Block("申請書", 1),
        Block("出張申請書"),
        Block("申請日 | 2025-04-01 | 社員番号 | E-2041"),
        Block("氏名 | 山田　太郎 | 所属 | 第二工場品質管理課"),
        Block("出張先 | ミドリ電機堺事業所（大阪府堺市）"),
        Block("目的 | ミドリ5量産立ち上げの品質監査"),
        Block("交通費 | 18400 | 宿泊費 | 12000"),
        Block("合計 | 30400"),  # the formula's cached value
    ]
    assert "部署コード一覧" not in str(blocks)  # the hidden sheet is skipped, and the log says so
    assert "forms/出張.xlsx: hidden sheets not indexed: 'マスタ'" in caplog.text


def test_an_ordinary_table_sheet_row_by_row_and_each_chunk_knows_its_sheet() -> None:
    title, blocks = extract(".xlsx", xlsx_bytes({"sheets": [TABLE, FORM]}))
    assert title is None  # no title property: the loader uses the file name
    assert blocks[:5] == [
        Block("製品一覧", 1),
        Block("品番: M5 | 製品名: ミドリ5 | 単価: 4800 | 発売日: 2025-06-01 | 生産: 第二工場"),  # a record
        Block("品番: A3 | 製品名: アオバ3 | 単価: 5200.5 | 発売日: 2024-10-15"),  # an error value (#N/A) left out
        Block("※ 単価は税抜"),
        Block("申請書", 1),
    ]
    lang = detect_lang(" ".join(b.text for b in blocks))
    chunks = chunk_document(blocks, lang)
    assert lang == "ja" and chunks
    for needle, sheet in (("アオバ3", "製品一覧"), ("E-2041", "申請書")):
        [chunk] = [c for c in chunks if needle in c.text]
        assert sheet in chunk.headings


def test_a_deck_reads_titles_text_tables_and_notes() -> None:
    title, blocks = extract(".pptx", pptx_bytes(DECK))
    assert title == "ミドリ5 量産計画"  # no title property: the first slide's title
    assert blocks == [
        Block("ミドリ5 量産計画", 1),
        Block("第二工場で2025年6月に量産開始"),
        Block("月産12,000台"),
        Block("堺事業所の監査結果を待って最終判断する。担当は品質管理課の山田。"),
        Block("価格", 1),
        Block("品番: M5 | 単価: 4,800円"),
        Block("競合のアオバ3は5,200円。値上げは北村部長が承認済み。"),
        Block("Slide 3", 1),  # no title: its number
        Block("付録：用語集"),
    ]  # slide 4 has no text at all: no section


def write_document_bytes(blocks: list[tuple[int, str]]) -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "base.docx"
        write_document(path, blocks)
        return path.read_bytes()


def _bombs() -> dict[str, tuple[str, bytes]]:
    """Per zip-based format: the member replaced by 2.28 GB of zeros, and the bomb."""
    bases = {
        ".docx": ("word/document.xml", write_document_bytes([(1, "休暇規程"), (0, "年次有給休暇は20日。")])),
        ".xlsx": ("xl/worksheets/sheet1.xml", xlsx_bytes({"sheets": [TABLE]})),
        ".pptx": ("ppt/slides/slide1.xml", pptx_bytes(DECK)),
    }
    return {suffix: (member, zip_bomb(base, member, BOMB_BYTES)) for suffix, (member, base) in bases.items()}


def test_zip_bombs_are_refused_from_the_directory_without_inflating_them() -> None:
    # the construction is real: small enough to inflate here, it is a valid zip whose member is all zeros
    small = zip_bomb(pptx_bytes(DECK), "ppt/slides/slide1.xml", 5 * 1024 * 1024 + 3)
    with zipfile.ZipFile(io.BytesIO(small)) as archive:
        assert archive.testzip() is None  # every CRC checks
        assert archive.read("ppt/slides/slide1.xml") == bytes(5 * 1024 * 1024 + 3)
    bombs = _bombs()
    for suffix, (member, data) in bombs.items():
        assert len(data) < 3_000_000
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            assert archive.getinfo(member).file_size == BOMB_BYTES
        tracemalloc.start()
        try:
            with pytest.raises(InputError) as refused:
                extract(suffix, data)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        reason = str(refused.value)
        assert f"member {member!r} inflates to {BOMB_BYTES:,} bytes" in reason, reason
        assert "over the limit of 268,435,456" in reason and "HOPSEARCH_ZIP_MAX_MEMBER_BYTES" in reason, reason
        assert peak < 8 * 1024 * 1024, f"{suffix}: the check allocated {peak:,} bytes"  # (it inflated nothing)
    assert {s for s in EXTRACTORS if s in (".docx", ".xlsx", ".pptx")} == set(bombs)  # every zip-based format


def test_ratio_total_and_member_count_limits_and_their_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    base = pptx_bytes(DECK)
    ratio = zip_bomb(base, "ppt/media/zeros.bin", 100 * 1024 * 1024)  # under every size limit, 1,011:1
    with pytest.raises(InputError, match=r"'ppt/media/zeros.bin' inflates 1,0\d\d:1 .* limit of 200:1 .*zip_max_ratio"):
        check_zip(ratio, ZipLimits(), "PPTX")
    total = zip_bomb(base, "ppt/media/a.bin", 250 * 1024 * 1024, extra=4)  # five members under the member limit
    with pytest.raises(
        InputError, match=r"inflate to 1,3\d\d,\d{3},\d{3} bytes in all, over .* HOPSEARCH_ZIP_MAX_TOTAL"
    ):
        check_zip(total, ZipLimits(), "PPTX")
    many = zip_bomb(base, "ppt/media/a.bin", 0, extra=30)
    with pytest.raises(InputError, match=r"\d+ members, over the limit of 40 \(setting zip_max_members"):
        check_zip(many, ZipLimits(max_members=40), "PPTX")
    monkeypatch.setenv("HOPSEARCH_ZIP_MAX_MEMBER_BYTES", "4096")  # the settings object reads the environment
    limits = ZipLimits.from_settings(load_settings())
    with pytest.raises(InputError, match="over the limit of 4,096"):
        check_zip(base, limits, "PPTX")
    check_zip(base, ZipLimits(), "PPTX")  # a real deck is far inside the defaults


def _folder(root: Path) -> dict[str, Any]:
    """Good Office files, bad ones and a bomb of each format; returns the expected dead-letter reasons."""
    root.mkdir()
    (root / "form.xlsx").write_bytes(xlsx_bytes({"sheets": [FORM, HIDDEN]}))
    (root / "products.xlsx").write_bytes(xlsx_bytes({"title": "製品一覧表", "sheets": [TABLE]}))
    (root / "plan.pptx").write_bytes(pptx_bytes(DECK))
    (root / "readme.md").write_text("# 読んでください\n\n共有フォルダの説明。\n")
    (root / "empty.xlsx").write_bytes(xlsx_bytes({"sheets": [{"name": "Sheet1"}]}))
    (root / "empty.pptx").write_bytes(pptx_bytes({"slides": []}))
    good = xlsx_bytes({"sheets": [TABLE]})
    (root / "truncated.xlsx").write_bytes(good[: len(good) // 2])
    not_a_deck = io.BytesIO()
    with zipfile.ZipFile(not_a_deck, "w") as archive:
        archive.writestr("hello.txt", "a zip, but no presentation in it")
    (root / "corrupt.pptx").write_bytes(not_a_deck.getvalue())
    for suffix, (_, data) in _bombs().items():
        (root / f"bomb{suffix}").write_bytes(data)
    return {
        "empty.xlsx": "no text extracted",
        "empty.pptx": "no text extracted",
        "truncated.xlsx": "unreadable XLSX: not a zip archive",
        "corrupt.pptx": "unreadable PPTX",
        "bomb.docx": "DOCX refused before extraction: member 'word/document.xml' inflates to 2,281,701,376",
        "bomb.xlsx": "XLSX refused before extraction: member 'xl/worksheets/sheet1.xml' inflates to 2,281,701,376",
        "bomb.pptx": "PPTX refused before extraction: member 'ppt/slides/slide1.xml' inflates to 2,281,701,376",
    }


async def test_a_folder_of_office_files_loads_the_good_ones_and_dead_letters_the_rest(
    store: Store, tmp_path: Path
) -> None:
    root = tmp_path / "docs"
    expected = _folder(root)
    report = await load_docs(store, root, opts(tmp_path))
    assert (report.read, report.indexed, report.rejected, report.skipped) == (11, 4, 7, 0)
    letters = {Path(e["file"]).name: e["reason"] for e in read_letters(report.dead_letter)}
    assert set(letters) == set(expected)
    for name, reason in expected.items():
        assert reason in letters[name], (name, letters[name])
    response = await store.search(store.settings.passages_alias, {"size": 100, "query": {"match_all": {}}})
    chunks = [hit["_source"] for hit in response["hits"]["hits"]]
    by_file = {Path(c["path"]).name: c for c in chunks}
    assert by_file["products.xlsx"]["title"] == "製品一覧表" and by_file["form.xlsx"]["title"] == "form"
    assert {by_file[n]["metadata"]["type"] for n in ("form.xlsx", "plan.pptx")} == {"xlsx", "pptx"}
    assert all(c["lang"] == "ja" for c in chunks)
    [notes] = [c for c in chunks if "アオバ3は5,200円" in c["text"]]
    assert Path(notes["path"]).name == "plan.pptx" and "価格" in notes["headings"]

    again = await load_docs(store, root, opts(tmp_path))  # incremental as for any other format
    assert (again.read, again.indexed, again.rejected, again.skipped) == (11, 0, 7, 4)


def test_index_docs_then_bm25_finds_a_sheet_value_and_a_speaker_note(es8_node: EsNode, tmp_path: Path) -> None:
    """The README's commands end to end on the 8.19 node: `index docs` over the folder, then `search`."""
    root = tmp_path / "docs"
    expected = _folder(root)
    prefix = f"office{uuid.uuid4().hex[:8]}"
    env = {
        "HOPSEARCH_ES_URL": es8_node.url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_STATE_DIR": str(tmp_path / "state"),
        "HOPSEARCH_EMBEDDER": "none",
    }
    runner = CliRunner()
    try:
        loaded = runner.invoke(main, ["index", "docs", str(root), "--quiet", "--json"], env=env)
        assert loaded.exit_code == EXIT_REJECTED, loaded.output
        report = json.loads(loaded.stdout)
        assert (report["read"], report["indexed"], report["rejected"]) == (11, 4, len(expected))

        def top(query: str) -> dict[str, Any]:
            found = runner.invoke(main, ["search", query, "--mode", "bm25", "-k", "3", "--json"], env=env)
            assert found.exit_code == 0, found.output
            hits = json.loads(found.stdout)["hits"]
            assert hits, query
            return dict(hits[0]["_source"])

        sheet = top("社員番号E-2041の出張先")  # a value in a 方眼紙 form's cell
        assert Path(sheet["path"]).name == "form.xlsx" and "E-2041" in sheet["text"]
        assert sheet["headings"] == ["申請書"]
        note = top("値上げを承認した部長")  # only in a slide's speaker notes
        assert Path(note["path"]).name == "plan.pptx" and "値上げは北村部長が承認済み。" in note["text"]
    finally:
        httpx.delete(f"{es8_node.url}/{prefix}-*")


#: A rule book: a table in chapter 1, then chapter 2 (a heading and a paragraph) after it.
LEAVE_TABLE = [("勤続年数", "日数"), ("1年", "10日"), ("6年", "20日")]


def write_rule_book(path: Path) -> Path:
    """A real .docx (python-docx): a title, chapter 1 with a paragraph and a table, then chapter 2."""
    import docx

    document = docx.Document()
    document.add_heading("就業規則", level=0)
    document.add_heading("第1章 休暇", level=1)
    document.add_paragraph("年次有給休暇の日数は勤続年数で決まる。")
    table = document.add_table(rows=len(LEAVE_TABLE), cols=2)
    for r, row in enumerate(LEAVE_TABLE):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_heading("第2章 経費", level=1)
    document.add_paragraph("出張旅費は実費を精算する。")
    document.save(str(path))
    return path


def test_a_docx_table_is_read_where_it_stands_among_the_paragraphs(tmp_path: Path) -> None:
    title, blocks = extract(".docx", write_rule_book(tmp_path / "就業規則.docx").read_bytes())
    assert title == "就業規則"
    assert blocks == [
        Block("就業規則", 1),
        Block("第1章 休暇", 1),
        Block("年次有給休暇の日数は勤続年数で決まる。"),
        Block("勤続年数: 1年 | 日数: 10日"),
        Block("勤続年数: 6年 | 日数: 20日"),
        Block("第2章 経費", 1),  # after the table, as in the document
        Block("出張旅費は実費を精算する。"),
    ]


def _tables_last(data: bytes) -> tuple[str | None, list[Block]]:
    """What the .docx reader did before issue 42: every paragraph, then every table."""
    import docx

    document = docx.Document(io.BytesIO(data))
    heading = {"Title", "Heading 1"}
    blocks = [Block(p.text, int(p.style is not None and p.style.name in heading)) for p in document.paragraphs]
    rows = [" | ".join(cell.text for cell in row.cells) for table in document.tables for row in table.rows]
    return None, [*blocks, *(Block(row) for row in rows)]


async def test_a_docx_indexed_with_its_tables_last_is_read_again_in_body_order(
    store8: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "share"
    root.mkdir()
    write_rule_book(root / "就業規則.docx")

    async def text() -> str:
        await store8.refresh(store8.settings.passages_alias)
        found = await store8.search(store8.settings.passages_alias, {"query": {"match_all": {}}, "_source": ["text"]})
        return "\n".join(hit["_source"]["text"] for hit in found["hits"]["hits"])

    with monkeypatch.context() as patch:
        patch.setattr(extract_module, "EXTRACTORS", {**EXTRACTORS, ".docx": _tables_last})
        patch.setattr(docs_module, "extractor_version", lambda suffix: 1)
        first = await load_docs(store8, root, opts(tmp_path))
    assert first.indexed == 1 and (await text()).index("6年 | 20日") > (await text()).index("出張旅費")
    again = await load_docs(store8, root, opts(tmp_path))
    assert (again.read, again.indexed, again.skipped) == (1, 1, 0)  # the same bytes, read again
    stored = await text()
    assert stored.index("年次有給休暇") < stored.index("勤続年数: 6年 | 日数: 20日") < stored.index("出張旅費")
    third = await load_docs(store8, root, opts(tmp_path))
    assert (third.indexed, third.skipped) == (0, 1)
