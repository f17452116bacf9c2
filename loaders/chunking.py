"""Structure-aware chunking: headings and paragraphs into passages of about 100–200 words.

Paragraphs accumulate under their heading path until the next one would pass ``max_words``; a heading
closes the running chunk once it holds ``min_words // 2`` words (a tiny section joins the next rather
than becoming a stub). The next chunk of the same section starts with the last ``overlap`` words of
the previous one. A paragraph longer than ``max_words`` is cut at sentence ends (at word boundaries
when one sentence is longer still). Each chunk keeps the heading path it was written under.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from hopsearch.loaders.extract import Block

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True, slots=True)
class Chunk:
    text: str
    headings: tuple[str, ...]
    words: int


def _pieces(text: str, max_words: int) -> Iterator[list[str]]:
    """A paragraph as word lists of at most ``max_words``, cut at sentence ends where possible."""
    words = text.split()
    if len(words) <= max_words:
        yield words
        return
    current: list[str] = []
    for sentence in _SENTENCE.split(text):
        sw = sentence.split()
        while len(sw) > max_words:
            if current:
                yield current
                current = []
            yield sw[:max_words]
            sw = sw[max_words:]
        if current and len(current) + len(sw) > max_words:
            yield current
            current = []
        current.extend(sw)
    if current:
        yield current


def chunk_blocks(
    blocks: Sequence[Block], *, min_words: int = 100, max_words: int = 200, overlap: int = 30
) -> list[Chunk]:
    """The chunks of one document (see the module docstring)."""
    path: list[tuple[int, str]] = []
    chunks: list[Chunk] = []
    paras: list[list[str]] = []
    size = 0
    chunk_headings: tuple[str, ...] = ()

    def emit() -> None:
        nonlocal paras, size
        if size:
            text = "\n\n".join(" ".join(p) for p in paras)
            chunks.append(Chunk(text, chunk_headings, size))
        paras, size = [], 0

    def heads() -> tuple[str, ...]:
        return tuple(text for _, text in path)

    for block in blocks:
        if block.level:
            if size >= min_words // 2:
                emit()
            path = [(lvl, text) for lvl, text in path if lvl < block.level]
            path.append((block.level, block.text))
            chunk_headings = tuple(dict.fromkeys((*chunk_headings, block.text))) if size else heads()
            continue
        for piece in _pieces(block.text, max_words):
            if size and size + len(piece) > max_words:
                tail = [w for p in paras for w in p][-overlap:] if overlap else []
                emit()
                if tail:
                    paras, size = [tail], len(tail)
            if not size:
                chunk_headings = heads()
            paras.append(piece)
            size += len(piece)
    emit()
    return chunks
