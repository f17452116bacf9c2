"""Parsers, extraction and chunking of the loaders on real files (no Elasticsearch)."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hopsearch.loaders.chunking import chunk_blocks
from hopsearch.loaders.dpr import DprSource
from hopsearch.loaders.extract import Block, extract
from hopsearch.loaders.jsonl import JsonlSource
from hopsearch.loaders.model import SourceBatch
from hopsearch.loaders.qa import QaContextSource
from hopsearch.service.errors import InputError
from tests.loader_files import make_docx, make_pdf, write_dpr

BAD_DPR = (
    b"id\ttext\ttitle\n"
    b'1\t"Aaron ( or ; ""Aharon"") was a prophet"\tAaron\n'  # 2: good, doubled quotes
    b'2\t"unclosed quote\tBroken\n'  # 3: bad quoting
    b"3\tonly two columns\n"  # 4: wrong column count
    b"4\ttoo\tmany\tcolumns\n"  # 5: wrong column count
    b"5\t\xff\xfe not utf-8\tBad\n"  # 6: invalid UTF-8
    b"6\t \tEmpty\n"  # 7: empty text
    b"\n"  # 8: blank, skipped
    b"7\tplain text, no quotes\tSeven\n"  # 9: good
)


def collect(batches: list[SourceBatch]) -> tuple[int, int, list[str], list[dict[str, object]]]:
    read = sum(b.read for b in batches)
    skipped = sum(b.skipped for b in batches)
    ids = [i for b in batches for i in b.ids]
    rejections = [r.to_dict() for b in batches for r in b.rejections]
    return read, skipped, ids, rejections


def test_dpr_rows_good_and_bad(tmp_path: Path) -> None:
    path = tmp_path / "psgs.tsv"
    path.write_bytes(BAD_DPR)
    read, skipped, ids, rejections = collect(list(DprSource(path).batches(0, 3, None)))
    assert ids == ["1", "7"]
    assert read == 8 and skipped == 1
    by_line = {r["line"]: r for r in rejections}
    assert sorted(by_line) == [3, 4, 5, 6, 7]
    assert "quoting" in str(by_line[3]["reason"])
    assert "found 2" in str(by_line[4]["reason"]) and "found 4" in str(by_line[5]["reason"])
    assert "UTF-8" in str(by_line[6]["reason"])
    assert by_line[7]["reason"] == "empty text"
    assert by_line[3]["offset"] == BAD_DPR.index(b'2\t"unclosed')
    assert read == len(ids) + len(rejections) + skipped


def test_dpr_doubled_quotes_and_fields(tmp_path: Path) -> None:
    path = tmp_path / "psgs.tsv"
    path.write_bytes(BAD_DPR)
    first = next(iter(DprSource(path).batches(0, 100, None)))
    body = first.bodies[0]
    assert body["text"] == 'Aaron ( or ; "Aharon") was a prophet'
    assert body["title"] == "Aaron" and body["source"] == "dpr" and body["doc_id"] == "1"


def test_dpr_gzip_resume_and_limit(tmp_path: Path) -> None:
    path = tmp_path / "psgs_w100.tsv.gz"
    ids = write_dpr(path, 250)
    batches = list(DprSource(path).batches(0, 100, None))
    assert [len(b.ids) for b in batches] == [100, 100, 50]
    assert [b.last for b in batches] == [101, 201, 251]
    assert batches[-1].progress == path.stat().st_size
    resumed = list(DprSource(path).batches(101, 100, None))
    assert [i for b in resumed for i in b.ids] == ids[100:]
    limited = list(DprSource(path).batches(0, 100, 30))
    assert sum(b.read for b in limited) == 30


def test_jsonl_records(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    lines = [
        b'{"_id": "d1", "title": "One", "text": "first", "metadata": {"url": "u"}}',
        b'{"_id": "d2", "text": "second", "extra": 3}',
        b"{not json",
        b'["an", "array"]',
        b'{"title": "no id", "text": "x"}',
        b'{"_id": "d3", "text": ""}',
        b"",
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    read, skipped, ids, rejections = collect(list(JsonlSource(path).batches(0, 2, None)))
    assert ids == ["d1", "d2"]
    assert [r["line"] for r in rejections] == [3, 4, 5, 6]
    assert read == 7 and skipped == 1
    batch = next(iter(JsonlSource(path).batches(0, 10, None)))
    assert batch.bodies[0]["metadata"] == {"url": "u"} and batch.bodies[1]["metadata"] == {"extra": 3}


def test_qa_contexts_hotpot_array_and_musique(tmp_path: Path) -> None:
    hotpot = tmp_path / "hotpot.json"
    record = {
        "_id": "q1",
        "question": "Who?",
        "answer": "x",
        "level": "easy",
        "context": [["Alpha", ["Alpha is a letter.", " It comes first."]], ["Beta", ["Beta follows."]]],
    }
    again = {**record, "_id": "q2", "context": [["Alpha", ["Alpha is a letter.", " It comes first."]]]}
    hotpot.write_bytes(orjson.dumps([record, again, {"question": "no context"}]))
    read, skipped, ids, rejections = collect(list(QaContextSource(hotpot).batches(0, 10, None)))
    assert len(ids) == 2 and skipped == 1 and len(rejections) == 1 and read == 4
    assert rejections[0]["record"] == 3
    musique = tmp_path / "musique.jsonl"
    rows = [
        {"id": "2hop__1", "question": "Q?", "answer": "a", "paragraphs": [{"title": "T", "paragraph_text": "P."}]},
        {"id": "2hop__2", "question": "Q2?", "answer": "b", "paragraphs": [{"title": "T"}]},
    ]
    musique.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    read, skipped, ids, rejections = collect(list(QaContextSource(musique).batches(0, 10, None)))
    assert read == 2 and len(ids) == 1 and rejections[0]["line"] == 2 and "paragraphs" in str(rejections[0]["reason"])


GNU_MANUAL_PAGE = b"""<html><head><title>Overview (GNU Foo)</title></head><body>
<div class="nav-panel"><p>Next: <a href="a.html">Invoking</a>, Previous: <a href="b.html">Intro</a>,
Up: <a href="c.html">Top</a> &nbsp; [<a>Contents</a>][<a>Index</a>]</p></div><hr>
<header><p>Site banner, Sign in</p></header>
<nav><ul><li>Home</li><li>Docs</li></ul></nav>
<div class="header"><p>Next: Invoking, Previous: Intro, Up: Top</p></div>
<article><header><h1>Overview</h1></header><p>Foo rearranges your files.</p></article>
<h2>Details</h2><p>It runs nightly.</p>
<p>Next: <a>Invoking</a>, Previous: <a>Intro</a></p>
<aside><p>Related links</p></aside>
<footer><p>Copyright 2024 Example Corp.</p></footer>
</body></html>"""


def test_html_navigation_header_and_footer_are_not_content() -> None:
    title, blocks = extract(".html", GNU_MANUAL_PAGE)
    assert title == "Overview (GNU Foo)"
    assert [(b.level, b.text) for b in blocks] == [
        (1, "Overview"),  # an article's own header stays: it carries the title
        (0, "Foo rearranges your files."),
        (2, "Overview > Details"),  # a heading below another reads as its path
        (0, "It runs nightly."),
    ]


def test_extract_markdown_html_docx_pdf(tmp_path: Path) -> None:
    title, blocks = extract(".md", b"# Guide\n\nIntro text.\n\n## Setup\n\n- step one\n- step two\n")
    assert title == "Guide"
    assert [(b.level, b.text) for b in blocks][:3] == [(1, "Guide"), (0, "Intro text."), (2, "Guide > Setup")]
    html = b"<html><head><title>Page</title><style>p{}</style></head><body><h2>Part</h2><p>Hello <b>you</b></p>"
    title, blocks = extract(".html", html + b"<script>var x</script></body></html>")
    assert title == "Page" and [(b.level, b.text) for b in blocks] == [(2, "Part"), (0, "Hello you")]
    make_docx(tmp_path / "a.docx", "Handbook", [("Holidays", ["Staff get 25 days."])])
    title, blocks = extract(".docx", (tmp_path / "a.docx").read_bytes())
    assert title == "Handbook" and Block("Holidays", 1) in blocks and Block("Staff get 25 days.") in blocks
    title, blocks = extract(".pdf", make_pdf(["Quarterly report", "Revenue grew (a lot)."], title="Q3"))
    assert title == "Q3" and "Revenue grew (a lot)." in " ".join(b.text for b in blocks)
    with pytest.raises(InputError, match="PDF"):
        extract(".pdf", b"%PDF-1.4\n garbage that is not a pdf")
    with pytest.raises(InputError):
        extract(".docx", b"not a zip")


def test_chunks_follow_structure_with_overlap() -> None:
    para = " ".join(f"w{i}." for i in range(90))
    blocks = [Block("Intro", 1), *[Block(para) for _ in range(4)], Block("Next", 1), Block("short tail")]
    chunks = chunk_blocks(blocks, min_words=100, max_words=200, overlap=30)
    assert all(c.words <= 200 for c in chunks)
    assert chunks[0].headings == ("Intro",)
    first, second = chunks[0].text.split(), chunks[1].text.split()
    assert second[:30] == first[-30:]
    assert chunks[-1].text.endswith("short tail") and "Next" in chunks[-1].headings


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=450), min_size=1, max_size=12))
def test_chunking_keeps_every_word(sizes: list[int]) -> None:
    blocks = [Block(" ".join(f"p{n}w{i}" for i in range(size))) for n, size in enumerate(sizes)]
    chunks = chunk_blocks(blocks, min_words=100, max_words=200, overlap=30)
    words = [w for c in chunks for w in c.text.split()]
    expected = [w for b in blocks for w in b.text.split()]
    assert set(words) == set(expected)
    assert all(c.words <= 200 + 30 for c in chunks)
    assert words[-1] == expected[-1]


def test_gzip_offsets_are_of_the_decompressed_stream(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv.gz"
    path.write_bytes(gzip.compress(BAD_DPR))
    rejections = [r for b in DprSource(path).batches(0, 100, None) for r in b.rejections]
    assert rejections[0].where["offset"] == BAD_DPR.index(b'2\t"unclosed')


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text(alphabet='ab"\t \\é', max_size=8), min_size=1, max_size=4), st.sampled_from(["\n", "\r\n"]))
def test_dpr_parse_line_agrees_with_csv(fields: list[str], end: str) -> None:
    """``parse_line`` takes a line apart exactly as the strict ``csv`` module plus the field checks do:
    the same fields where both accept it, a rejection where either refuses it (LF or CRLF lines)."""
    import csv

    from hopsearch.loaders.dpr import _check, parse_line

    line = "\t".join(fields)
    assume(line.strip())  # blank lines are skipped before parsing
    try:
        expected: list[str] | None = next(csv.reader((line,), delimiter="\t", strict=True))
    except csv.Error:
        expected = None
    if expected is not None and _check(expected) is not None:
        expected = None
    got = parse_line((line + end).encode())
    assert (got if isinstance(got, list) else None) == expected


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(alphabet='0123456789ab"\\ é\x01', min_size=1, max_size=6),
            st.text(
                alphabet=st.characters(blacklist_characters="\t\n\r", blacklist_categories=("Cs",)),
                min_size=1,
                max_size=30,
            ),
            st.text(alphabet=st.characters(blacklist_characters="\t\n\r", blacklist_categories=("Cs",)), max_size=10),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_dpr_encoded_lines_are_the_documents(rows: list[tuple[str, str, str]]) -> None:
    """With ``encode`` (BM25-only loads) each passage's ``_bulk`` lines are written straight from the
    fields: byte for byte what serialising the dict of the other mode gives, and the same ids."""
    import csv
    import io
    import tempfile

    from hopsearch.loaders.bulk import ndjson_body

    out = io.StringIO()
    csv.writer(out, delimiter="\t", lineterminator="\n").writerows([("id", "text", "title"), *rows])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "psgs.tsv"
        path.write_text(out.getvalue(), encoding="utf-8")
        plain = list(DprSource(path).batches(0, 4, None))
        encoded = list(DprSource(path, encode=True).batches(0, 4, None))
    assert [b.ids for b in encoded] == [b.ids for b in plain]
    assert all(not b.bodies for b in encoded) and all(not b.encoded for b in plain)
    for mine, theirs in zip(encoded, plain, strict=True):
        stamp = theirs.bodies[0]["indexed_at"] if theirs.bodies else None
        # the two runs read the clock separately: compare with the plain run's stamp put in
        for body in theirs.bodies:
            body["indexed_at"] = stamp
        body_bytes = ndjson_body(mine)
        if stamp is not None:
            mine_stamp = orjson.loads(body_bytes.split(b"\n")[1])["indexed_at"]
            body_bytes = body_bytes.replace(orjson.dumps(mine_stamp), orjson.dumps(stamp))
        assert body_bytes == ndjson_body(theirs)
        lines = body_bytes.split(b"\n")
        assert len(lines) == 2 * len(mine.ids) + 1 and lines[-1] == b""
        for n, doc_id in enumerate(mine.ids):
            assert orjson.loads(lines[2 * n]) == {"index": {"_id": doc_id}}
