"""Extraction and chunking time per MiB of a file, by the file's shape (no Elasticsearch: in process).

Generates, in memory, files of each shape and runs what ``index docs`` runs on one file before it
sends anything: :func:`~hopsearch.loaders.extract.extract`, language detection and
:func:`~hopsearch.loaders.chunking.chunk_document`. For each it prints the seconds per MiB of the file
and the ratio to a plain prose ``.txt`` of the same size (target: at most 3x), with the number of chunks
and the largest chunk (words).

Shapes: ``prose`` (paragraphs of sentences), ``wide_csv`` (the header has N long column names and N
rows of short cells, half the bytes each: the header repeated on each row used to make its text grow with
N²), ``no_sentence_end`` (one paragraph of words with no ``.``, ``!`` or ``?``), ``one_row_csv`` (a
header and one row of many cells: one paragraph). ``--big`` adds a 64 MiB prose file (the file limit).

    .venv/bin/python benchmarks/bench_chunking.py [--wide-kib 240] [--long-kib 4096] [--big] [--repeat 3]
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable

from hopsearch.loaders.chunking import chunk_document
from hopsearch.loaders.extract import extract
from hopsearch.service.text.lang import detect_lang

MIB = 2**20
VOCAB = (
    "the",
    "a",
    "report",
    "quarter",
    "revenue",
    "policy",
    "staff",
    "leave",
    "plant",
    "audit",
    "supplier",
    "order",
    "invoice",
    "budget",
    "team",
    "project",
    "review",
    "schedule",
    "contract",
    "customer",
    "price",
    "quality",
    "shipment",
    "design",
    "test",
    "release",
    "plan",
)


def prose(size: int) -> bytes:
    """Paragraphs of four to eight sentences of six to eighteen words, about ``size`` bytes."""
    rng = random.Random(1)
    out: list[str] = []
    total = 0
    while total < size:
        sentences = [
            " ".join(rng.choice(VOCAB) for _ in range(rng.randint(6, 18))).capitalize() + "."
            for _ in range(rng.randint(4, 8))
        ]
        paragraph = " ".join(sentences) + "\n\n"
        out.append(paragraph)
        total += len(paragraph)
    return "".join(out).encode()[:size]


def wide_csv(size: int) -> bytes:
    """N columns with long names and N rows of two-byte cells: half the bytes the header, half the rows."""
    n = max(2, int(math.sqrt(size / 4)))
    width = max(4, size // (2 * n))
    header = ",".join(f"column {i} " + "x" * (width - 12) for i in range(n))
    rows = [",".join(str(i % 10) for i in range(n)) for _ in range(n)]
    return "\n".join([header, *rows]).encode()


def no_sentence_end(size: int) -> bytes:
    """One paragraph of words and no sentence end."""
    rng = random.Random(2)
    words: list[str] = []
    total = 0
    while total < size:
        word = rng.choice(VOCAB)
        words.append(word)
        total += len(word) + 1
    return " ".join(words).encode()[:size]


def one_row_csv(size: int) -> bytes:
    """A header of short column names and one row of as many cells: a single paragraph."""
    n = size // 16
    header = ",".join(f"c{i}" for i in range(n))
    row = ",".join(f"value{i % 1000}" for i in range(n))
    return f"{header}\n{row}\n".encode()


def run_once(suffix: str, data: bytes) -> tuple[float, int, int]:
    """Seconds to extract, detect the language of and chunk one file; its chunk count and largest chunk."""
    start = time.perf_counter()
    _, blocks = extract(suffix, data)
    lang = detect_lang(" ".join(b.text for b in blocks))
    chunks = chunk_document(blocks, lang)
    return time.perf_counter() - start, len(chunks), max((c.words for c in chunks), default=0)


def best(suffix: str, data: bytes, repeat: int) -> tuple[float, int, int]:
    """The fastest of ``repeat`` runs (a big file once)."""
    runs = [run_once(suffix, data) for _ in range(repeat if len(data) < 8 * MIB else 1)]
    return min(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wide-kib", type=int, default=240, help="size of the wide N x N CSV")
    parser.add_argument("--long-kib", type=int, default=4096, help="size of the no-sentence-end text and one-row CSV")
    parser.add_argument("--big", action="store_true", help="add a 64 MiB prose file")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    shapes: list[tuple[str, str, Callable[[int], bytes], int]] = [
        ("prose", ".txt", prose, args.long_kib * 1024),
        ("wide_csv", ".csv", wide_csv, args.wide_kib * 1024),
        ("no_sentence_end", ".txt", no_sentence_end, args.long_kib * 1024),
        ("one_row_csv", ".csv", one_row_csv, args.long_kib * 1024),
    ]
    if args.big:
        shapes.append(("prose_64mib", ".txt", prose, 64 * MIB))
    baseline: dict[int, float] = {}
    print(f"{'shape':<16} {'MiB':>7} {'s':>8} {'s/MiB':>8} {'prose s/MiB':>11} {'ratio':>6} {'chunks':>7} {'max':>5}")
    for name, suffix, make, size in shapes:
        data = make(size)
        mib = len(data) / MIB
        seconds, count, largest = best(suffix, data, args.repeat)
        if len(data) not in baseline:
            base_seconds = seconds if name.startswith("prose") else best(".txt", prose(len(data)), args.repeat)[0]
            baseline[len(data)] = base_seconds / mib
        per_mib = seconds / mib
        ratio = per_mib / baseline[len(data)]
        print(
            f"{name:<16} {mib:>7.3f} {seconds:>8.3f} {per_mib:>8.3f} {baseline[len(data)]:>11.3f} "
            f"{ratio:>6.2f} {count:>7} {largest:>5}"
        )


if __name__ == "__main__":
    main()
