"""Real input files for the loader tests: DPR TSVs with quoting, PDFs, DOCX."""

from __future__ import annotations

import csv
import gzip
import io
import random
from pathlib import Path

_VOCAB = (
    "the of and in to a was is for on as by with he at from his an were are which this be also has or "
    "had its first their new after who they one two her she been other when time during there into "
    "school city film river album war county team season church university born family town music "
    "game world league national district village station party government railway club player"
)
WORDS = _VOCAB.split()


def passage(rng: random.Random, words: int = 100) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    # DPR text carries quotes, which the file CSV-quotes by doubling
    return f'{text[:40]} "{rng.choice(WORDS)}" {text[40:]}'


def write_dpr(path: Path, rows: int, *, seed: int = 7, words: int = 100, start_id: int = 1) -> list[str]:
    """A psgs_w100-style TSV (or .tsv.gz) of ``rows`` good rows; returns the ids."""
    rng = random.Random(seed)
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    writer.writerow(["id", "text", "title"])
    ids = []
    for n in range(start_id, start_id + rows):
        writer.writerow([str(n), passage(rng, words), f"Title {n}"])
        ids.append(str(n))
    data = buf.getvalue().encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return ids


def make_pdf(lines: list[str], title: str = "A PDF") -> bytes:
    """A small valid PDF with one page of text (Helvetica), xref offsets computed."""

    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    content = "BT /F1 11 Tf 50 780 Td 14 TL " + " ".join(f"({esc(line)}) Tj T*" for line in lines) + " ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] /Resources << /Font << /F1 4 0 R >> >> "
        "/Contents 5 0 R >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        f"<< /Length {len(content.encode('latin-1'))} >>\nstream\n{content}\nendstream",
        f"<< /Title ({esc(title)}) >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info 6 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def make_docx(path: Path, title: str, sections: list[tuple[str, list[str]]]) -> None:
    import docx

    document = docx.Document()
    document.add_heading(title, level=0)
    for heading, paragraphs in sections:
        document.add_heading(heading, level=1)
        for text in paragraphs:
            document.add_paragraph(text)
    document.save(str(path))
