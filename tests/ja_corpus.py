"""The invented Japanese company corpus under ``tests/data``: md/html/txt files as they are, and docx/pdf
files built at test time from ``ja_corpus_binary/*.docx.md`` / ``*.pdf.md`` (python-docx; reportlab
with its built-in Japanese CID font, so no font file is needed). ``ja_questions.jsonl`` holds 30
multi-hop questions with their supporting documents (file names as built here)."""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data"
PLAIN = DATA / "ja_corpus"
BINARY = DATA / "ja_corpus_binary"
QUESTIONS = DATA / "ja_questions.jsonl"
PDF_LINE_CHARS = 36  # pypdf returns one line per drawn line: lines wrap mid-sentence like real PDFs


@dataclass(frozen=True, slots=True)
class JaQuestion:
    id: str
    question: str
    answer: str
    supporting: tuple[str, ...]


def questions() -> list[JaQuestion]:
    out = []
    for line in QUESTIONS.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        out.append(JaQuestion(row["id"], row["question"], row["answer"], tuple(row["supporting"])))
    return out


def _blocks(source: str) -> list[tuple[int, str]]:
    """``(heading level or 0, text)`` of a small markdown file (headings and paragraphs only)."""
    out = []
    for part in source.split("\n\n"):
        part = part.strip()
        if not part:
            continue
        level = len(part) - len(part.lstrip("#"))
        out.append((level, part.lstrip("#").strip()))
    return out


def write_document(path: Path, blocks: list[tuple[int, str]]) -> None:
    """``blocks`` (``(heading level or 0, text)``) as a .docx or .pdf file, by the suffix of ``path``."""
    path.write_bytes(_docx(blocks) if path.suffix == ".docx" else _pdf(blocks))


def _docx(blocks: list[tuple[int, str]]) -> bytes:
    import docx

    document = docx.Document()
    for level, text in blocks:
        if level:
            document.add_heading(text, level=level)
        else:
            document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _pdf(blocks: list[tuple[int, str]]) -> bytes:
    """One line per ``PDF_LINE_CHARS`` characters of Japanese text, or about 90 of English at word ends."""
    import textwrap

    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont
    from reportlab.pdfgen import canvas

    font = "HeiseiKakuGo-W5"
    pdfmetrics.registerFont(UnicodeCIDFont(font))
    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer)
    pdf.setTitle(blocks[0][1])
    y = 800.0
    for _, text in blocks:
        if " " in text:
            lines = textwrap.wrap(text, 90)
        else:
            lines = [text[i : i + PDF_LINE_CHARS] for i in range(0, len(text), PDF_LINE_CHARS)]
        for line in lines:
            if y < 60:
                pdf.showPage()
                y = 800.0
            pdf.setFont(font, 11)
            pdf.drawString(50, y, line)
            y -= 16
        y -= 16  # a blank line between paragraphs
    pdf.save()
    return buffer.getvalue()


def build_corpus(dest: Path) -> Path:
    """All 25 documents under ``dest`` (created); returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted(PLAIN.iterdir()):
        shutil.copyfile(path, dest / path.name)
    for path in sorted(BINARY.glob("*.md")):
        name = path.name.removesuffix(".md")
        blocks = _blocks(path.read_text(encoding="utf-8"))
        write_document(dest / name, blocks)
    return dest
