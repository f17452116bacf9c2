"""Tables as records and outlines as paths (issue 52, item 1), and the space of a person's name (item 2).

Every file is real, built here: .xlsx (a merged title row above the header, a hidden sheet) and .pptx by
``tests/office_files.py``, .docx by python-docx, .html and Markdown as text. Each data row reads with its
header (``部署: 第二製造部 | 部長: 山﨑雅人 | 次長: 三枝智子``); a long table's chunks each hold records under the
table's caption and stay within the chunk size; an org chart of nested headings or lists reads
``parent > child``; a file indexed by an older extractor is read again; 「佐藤 花子」 keeps its space and is
found by either spelling on 7.17, 8.19 and 9.2.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from hopsearch.loaders import docs as docs_module
from hopsearch.loaders.chunking import chunk_document
from hopsearch.loaders.docs import load_docs
from hopsearch.loaders.extract import Block, extract
from hopsearch.service.store import Store
from hopsearch.service.text.lang import detect_lang
from hopsearch.service.types import RetrievalQuery
from tests.office_files import pptx_bytes, xlsx_bytes
from tests.scopes import bound
from tests.test_loaders_docs import opts

HEADER = ["部署", "部長", "次長"]
ROWS = [["第二製造部", "山﨑雅人", "三枝智子"], ["総務部", "森川 早苗", "佐藤 花子"], ["品質保証部", "髙橋誠一", ""]]
RECORD = "部署: 第二製造部 | 部長: 山﨑雅人 | 次長: 三枝智子"
CAPTION = "組織図（2026年4月1日現在）"


def _cells(rows: list[list[str]], first: int) -> list[list[Any]]:
    return [[f"{'ABC'[c]}{first + r}", v] for r, row in enumerate(rows) for c, v in enumerate(row) if v]


def org_xlsx(rows: list[list[str]] = ROWS) -> bytes:
    chart = {"name": "組織図", "cells": [["A1", CAPTION], *_cells([HEADER, *rows], 3)], "merged": ["A1:C1"]}
    hidden = {"name": "マスタ", "hidden": True, "cells": [["A1", "コード"], ["B1", "秘"], ["A2", "X-1"], ["B2", "極"]]}
    return xlsx_bytes({"title": "組織図_2026", "sheets": [chart, hidden]})


def org_docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("組織", level=1)
    table = document.add_table(rows=len(ROWS) + 1, cols=3)
    for r, row in enumerate([HEADER, *ROWS]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def org_html() -> bytes:
    rows = "".join("<tr>" + "".join(f"<td>{v}</td>" for v in row) + "</tr>" for row in ROWS)
    head = "".join(f"<th>{h}</th>" for h in HEADER)
    return (
        f"<html><body><h1>組織</h1><table><caption>{CAPTION}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{rows}</tbody></table></body></html>"
    ).encode()


def org_md() -> bytes:
    lines = ["| " + " | ".join(row) + " |" for row in [HEADER, ["---"] * 3, *ROWS]]
    return ("# 組織\n\n" + "\n".join(lines) + "\n").encode()


def texts(blocks: list[Block]) -> list[str]:
    return [b.text for b in blocks if not b.level]


@pytest.mark.parametrize("suffix", [".xlsx", ".docx", ".pptx", ".html", ".md"])
def test_each_table_row_reads_with_its_header(suffix: str) -> None:
    data = {
        ".xlsx": org_xlsx,
        ".docx": org_docx,
        ".pptx": lambda: pptx_bytes({"slides": [{"title": "組織", "table": [HEADER, *ROWS]}]}),
        ".html": org_html,
        ".md": org_md,
    }[suffix]()
    _, blocks = extract(suffix, data)
    rows = texts(blocks)
    assert rows == [RECORD, "部署: 総務部 | 部長: 森川 早苗 | 次長: 佐藤 花子", "部署: 品質保証部 | 部長: 髙橋誠一"]
    chunks = chunk_document(blocks, detect_lang(" ".join(b.text for b in blocks)))
    assert any(RECORD in c.text for c in chunks)
    if suffix in (".xlsx", ".html"):  # the merged title row, the <caption>: a heading above the rows
        assert any(CAPTION in b.text and b.level for b in blocks)
        assert all(any(CAPTION in h for h in c.headings) for c in chunks)
        assert CAPTION not in " ".join(c.text for c in chunks)  # not a header, not a record
    assert "極" not in str(blocks) and "X-1" not in str(blocks)  # the hidden sheet stays skipped


def test_a_long_tables_chunks_each_hold_records_under_the_caption_within_the_size() -> None:
    rows = [[f"第{n}製造部第{n}課", f"山﨑雅人{n}", f"三枝智子{n}"] for n in range(1, 121)]
    _, blocks = extract(".xlsx", org_xlsx(rows))
    chunks = chunk_document(blocks, "ja")
    assert len(chunks) >= 4
    for chunk in chunks:
        assert len(chunk.text) <= 600 <= 1000  # the Japanese chunk size (characters)
        assert any(CAPTION in h for h in chunk.headings)
        lines = [line for line in chunk.text.split("\n\n") if line]
        assert lines and all(line.startswith("部署: ") and " | 部長: " in line for line in lines[1:]), chunk.text
    assert "部署: 第120製造部第120課 | 部長: 山﨑雅人120 | 次長: 三枝智子120" in chunks[-1].text


def test_a_sheet_table_that_goes_on_after_an_empty_row_keeps_its_header() -> None:
    cells = [["A1", "品番"], ["B1", "単価"], ["A2", "M5"], ["B2", 4800], ["A4", "A3"], ["B4", 5200], ["A6", "注記"]]
    _, blocks = extract(".xlsx", xlsx_bytes({"sheets": [{"name": "価格", "cells": cells}]}))
    assert texts(blocks) == ["品番: M5 | 単価: 4800", "品番: A3 | 単価: 5200", "注記"]


ORG_MD = """# 本社

## 管理本部

### 総務部

部長：森川 早苗

### 人事部

部長：中村 さゆり

## 製造本部

- 第一工場
  - 製造課
    - 組立係
"""

ORG_HTML = """<html><body><h1>組織</h1><ul><li>本社<ul><li><a href="#">管理本部</a><ul><li>総務部</li>
<li><p>人事部</p></li></ul></li></ul></li></ul></body></html>"""


def test_nested_headings_and_lists_read_parent_then_child() -> None:
    _, blocks = extract(".md", ORG_MD.encode())
    chunks = chunk_document(blocks, "ja")
    shown = [" ".join([*c.headings, c.text]) for c in chunks]
    assert any("本社 > 管理本部 > 総務部" in s for s in shown)
    assert any("本社 > 管理本部 > 人事部" in s for s in shown)
    assert any("第一工場 > 製造課 > 組立係" in c.text for c in chunks)
    _, html = extract(".html", ORG_HTML.encode())
    assert texts(html) == ["本社", "本社 > 管理本部", "本社 > 管理本部 > 総務部", "本社 > 管理本部 > 人事部"]


async def _sources(store: Store) -> list[dict[str, Any]]:
    await store.refresh(store.settings.passages_alias)
    found = await store.search(store.settings.passages_alias, {"size": 100, "query": {"match_all": {}}})
    return [hit["_source"] for hit in found["hits"]["hits"]]


async def test_records_and_names_in_the_index_and_an_older_extractors_files_read_again(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "share"
    root.mkdir()
    (root / "組織図_2026.xlsx").write_bytes(org_xlsx())
    (root / "通知.md").write_text("# 人事通知\n\n品質保証部の担当は佐藤花子です。\n", encoding="utf-8")
    with monkeypatch.context() as patch:
        patch.setattr(docs_module, "extractor_version", lambda suffix: 2)  # what the last release stored
        first = await load_docs(store, root, opts(tmp_path))
    assert first.indexed == 2
    again = await load_docs(store, root, opts(tmp_path))
    assert (again.read, again.indexed, again.skipped) == (2, 2, 0)  # the same bytes, read again
    stored = {Path(s["path"]).name: s for s in await _sources(store)}
    chart = stored["組織図_2026.xlsx"]
    assert RECORD in chart["text"] and "部長: 森川 早苗 | 次長: 佐藤 花子" in chart["text"]
    assert "極" not in str(stored)
    assert (await load_docs(store, root, opts(tmp_path))).skipped == 2
    retriever = bound(store)
    for query, wanted in (("佐藤花子", "組織図_2026.xlsx"), ("佐藤 花子", "通知.md")):
        [result] = await retriever.search_many([RetrievalQuery(query, k=5)])
        assert wanted in {Path(str(h.source.get("path"))).name for h in result.hits}, (query, result.hits)
