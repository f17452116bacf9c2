"""A Japanese file share into real Elasticsearch: every encoding read as text, never mojibake (issue 42).

The files are written here with Python's codecs (CP932, strict Shift_JIS, EUC-JP, ISO-2022-JP, UTF-16
with its byte-order mark), a CSV as Excel saves it (CP932, CRLF), an old ``.doc`` and a password-protected
``.docx`` as the OLE compound files they are (checked with olefile), and bytes no encoding explains.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import olefile
import pytest
from click.testing import CliRunner

from hopsearch.cli.main import main
from hopsearch.loaders import docs as docs_module
from hopsearch.loaders import extract as extract_module
from hopsearch.loaders.docs import load_docs
from hopsearch.service.store import Store
from tests.conftest import EsNode
from tests.office_files import ole_file
from tests.test_loaders_docs import opts
from tests.test_loaders_es import read_letters

RULES = "就業規則 第一条 この規則は、株式会社髙橋製作所の従業員の労働条件を定める。①有給休暇は年二十日とする。"
TRAVEL = "出張旅費規程 第二条 国内出張の日当は一日三千円とし、宿泊費は実費を支給する。"
SAFETY = "安全衛生委員会は毎月第三水曜日に開催する。議事録は総務部が保管する。"
MAIL = "経費精算の締め日は毎月二十五日です。領収書の原本を経理部へ提出してください。"
UNDECIDABLE = bytes(range(256)) * 3


def write_share(root: Path) -> None:
    root.mkdir()
    (root / "rules-cp932.txt").write_bytes(RULES.encode("cp932"))
    page = f'<html><head><meta charset="Shift_JIS"><title>出張旅費</title></head><body><p>{TRAVEL}</p></body></html>'
    (root / "travel-sjis.html").write_bytes(page.encode("shift_jis"))
    (root / "notes-utf16.txt").write_bytes(SAFETY.encode("utf-16"))  # Python writes the BOM first
    (root / "safety-eucjp.md").write_bytes(f"# 安全衛生\n\n{SAFETY}\n".encode("euc_jp"))
    (root / "mail-iso2022.txt").write_bytes(MAIL.encode("iso2022_jp"))
    csv_text = "社員番号,氏名,所属\r\n1001,山田　太郎,第二工場品質管理課\r\n1002,髙橋　花子,総務部\r\n"
    (root / "staff-excel.csv").write_bytes(csv_text.encode("cp932"))
    (root / "old-memo.doc").write_bytes(ole_file("WordDocument", b"\xec\xa5 old binary Word"))
    (root / "locked.docx").write_bytes(ole_file("EncryptedPackage", b"\x00" * 64))
    (root / "archive.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    (root / "binary.txt").write_bytes(UNDECIDABLE)


async def texts_by_file(store: Store) -> dict[str, str]:
    await store.refresh(store.settings.passages_alias)
    body = {"size": 100, "_source": ["path", "text", "title", "chunk", "metadata"]}
    hits = (await store.search(store.settings.passages_alias, body))["hits"]["hits"]
    out: dict[str, str] = {}
    for hit in sorted(hits, key=lambda h: (h["_source"]["path"], h["_source"]["chunk"])):
        name = Path(hit["_source"]["path"]).name
        out[name] = out.get(name, "") + hit["_source"]["text"]
    return out


def squash(text: str) -> str:
    return "".join(text.split())


async def test_every_japanese_encoding_is_read_as_text_and_unread_suffixes_are_counted(
    store8: Store, tmp_path: Path
) -> None:
    root = tmp_path / "share"
    write_share(root)
    assert olefile.isOleFile(io.BytesIO((root / "old-memo.doc").read_bytes()))
    report = await load_docs(store8, root, opts(tmp_path))
    assert report.reconciled and (report.read, report.indexed, report.rejected) == (8, 6, 2)
    assert report.extra["files_not_read"] == {".doc": 1, ".zip": 1}  # counted apart from read
    letters = {Path(e["file"]).name: e["reason"] for e in read_letters(report.dead_letter)}
    assert set(letters) == {"binary.txt", "locked.docx"}
    assert "cannot decode the text with confidence" in letters["binary.txt"]
    assert "OLE compound file" in letters["locked.docx"]
    texts = {name: squash(text) for name, text in (await texts_by_file(store8)).items()}
    assert texts["rules-cp932.txt"] == squash(RULES)  # ① and 髙 exist in CP932 only
    assert texts["travel-sjis.html"] == squash(TRAVEL)
    assert texts["notes-utf16.txt"] == squash(SAFETY)
    assert squash(SAFETY) in texts["safety-eucjp.md"]
    assert texts["mail-iso2022.txt"] == squash(MAIL)
    assert texts["staff-excel.csv"] == squash(
        "社員番号: 1001 | 氏名: 山田　太郎 | 所属: 第二工場品質管理課"
        + "社員番号: 1002 | 氏名: 髙橋　花子 | 所属: 総務部"
    )


def _latin1(data: bytes, *, html: bool = False) -> str:
    return data.decode("latin-1")  # what extract.py did before issue 42


async def _strip_extractor_version(store: Store) -> None:
    """Chunks as the code before issue 42 wrote them: no ``metadata.extractor``."""
    alias = store.settings.passages_alias
    hits = (await store.search(alias, {"size": 100, "query": {"match_all": {}}}))["hits"]["hits"]
    actions: list[dict[str, Any]] = []
    for hit in hits:
        source = hit["_source"]
        source["metadata"].pop("extractor")
        actions.append({"_op_type": "index", "_index": hit["_index"], "_id": hit["_id"], "_source": source})
    ok, errors = await store.bulk(actions, refresh=True)
    assert ok == len(hits) and not errors


async def test_files_first_indexed_as_mojibake_are_read_again_or_removed(
    store8: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "share"
    root.mkdir()
    (root / "rules.txt").write_bytes(RULES.encode("cp932"))
    (root / "binary.txt").write_bytes(UNDECIDABLE)
    (root / "plain.md").write_text("# Plain\n\nAlready UTF-8, read right the first time.\n")
    with monkeypatch.context() as patch:
        patch.setattr(extract_module, "decode_text", _latin1)
        patch.setattr(docs_module, "extractor_version", lambda suffix: 1)
        garbage = await load_docs(store8, root, opts(tmp_path))
    assert (garbage.indexed, garbage.rejected) == (3, 0)
    await _strip_extractor_version(store8)
    assert RULES not in (await texts_by_file(store8))["rules.txt"]

    again = await load_docs(store8, root, opts(tmp_path))
    assert (again.read, again.indexed, again.rejected, again.skipped) == (3, 2, 1, 0)
    texts = await texts_by_file(store8)
    assert set(texts) == {"rules.txt", "plain.md"}  # binary.txt's garbage chunks are gone
    assert squash(texts["rules.txt"]) == squash(RULES)
    assert again.extra["files_unextracted_removed"] == 1 and again.deleted >= 1

    third = await load_docs(store8, root, opts(tmp_path))
    assert (third.indexed, third.rejected, third.skipped) == (0, 1, 2)


@pytest.fixture
def cli_env8(es8_node: EsNode, tmp_path: Path) -> Iterator[dict[str, str]]:
    prefix = f"enc{uuid.uuid4().hex[:8]}"
    yield {
        "HOPSEARCH_ES_URL": es8_node.url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_STATE_DIR": str(tmp_path / "state"),
        "HOPSEARCH_EMBEDDER": "none",
    }
    httpx.delete(f"{es8_node.url}/{prefix}-*", timeout=60)


def test_cli_summary_counts_files_not_read_by_suffix(cli_env8: dict[str, str], tmp_path: Path) -> None:
    root = tmp_path / "share"
    write_share(root)
    (root / "binary.txt").unlink()
    (root / "locked.docx").unlink()
    result = CliRunner().invoke(main, ["index", "docs", str(root), "--quiet"], env=cli_env8)
    assert result.exit_code == 0, result.output
    assert "read 6 = indexed 6 + rejected 0 + skipped 0  [reconciled]" in result.output
    assert "chunks into" in result.output and "files/s" in result.output
    assert "not read (a suffix index docs does not read): 2 files: .doc 1, .zip 1" in result.output
