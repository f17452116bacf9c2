"""Structure-aware chunking: headings and paragraphs into passages of about 100–200 words.

Paragraphs accumulate under their heading path until the next one would pass ``max_words``; a heading
closes the running chunk once it holds ``min_words // 2`` words (a tiny section joins the next rather
than becoming a stub). The next chunk of the same section starts with the last ``overlap`` words of
the previous one. A paragraph longer than ``max_words`` is cut at sentence ends (at word boundaries
when one sentence is longer still). Each chunk keeps the heading path it was written under.

Japanese text (``lang="ja"``, see :func:`chunk_document`) has no spaces between words, so its size is
measured in characters (300–600 by default, overlap of whole sentences up to 100 characters) and its
sentences end at 。！？ or a kept line break; the same heading rules apply.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from hopsearch.loaders.blocks import Block

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_SENTENCE_JA = re.compile(r"[^。！？!?\n]*(?:[。！？!?]+[」』）)]*|\n|$)")


@dataclass(frozen=True, slots=True)
class Chunk:
    text: str
    headings: tuple[str, ...]
    words: int  # the size: words, or characters for Japanese text


def _pieces(text: str, max_words: int) -> Iterator[list[str]]:
    """Yield a paragraph as word lists of at most ``max_words``, cut at sentence ends where possible."""
    words = text.split()
    if len(words) <= max_words:
        yield words
        return
    current: list[str] = []
    for sentence in _SENTENCE.split(text):
        sw = sentence.split()
        if len(sw) > max_words:  # cut by position: re-slicing the rest for every piece is quadratic
            if current:
                yield current
                current = []
            whole = (len(sw) - 1) // max_words * max_words  # the rest, 1..max_words, goes on
            for start in range(0, whole, max_words):
                yield sw[start : start + max_words]
            sw = sw[whole:]
        if current and len(current) + len(sw) > max_words:
            yield current
            current = []
        current.extend(sw)
    if current:
        yield current


def chunk_blocks(
    blocks: Sequence[Block], *, min_words: int = 100, max_words: int = 200, overlap: int = 30
) -> list[Chunk]:
    """Return the chunks of one document (see the module docstring)."""
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


def _sentences_ja(text: str, max_chars: int) -> Iterator[str]:
    """Yield a Japanese paragraph as sentences (each keeps its end mark or line break), none over ``max_chars``."""
    for match in _SENTENCE_JA.finditer(text):
        sentence = match.group()
        if len(sentence) > max_chars:  # cut by position (re-slicing the rest each time is quadratic)
            whole = (len(sentence) - 1) // max_chars * max_chars
            yield from (sentence[start : start + max_chars] for start in range(0, whole, max_chars))
            sentence = sentence[whole:]
        if sentence.strip():
            yield sentence


def chunk_blocks_ja(
    blocks: Sequence[Block], *, min_chars: int = 300, max_chars: int = 600, overlap: int = 100
) -> list[Chunk]:
    """Return the chunks of one Japanese document, sized in characters (see the module docstring)."""
    path: list[tuple[int, str]] = []
    chunks: list[Chunk] = []
    paras: list[list[str]] = []
    size = 0  # len() of the chunk's text as emitted
    chunk_headings: tuple[str, ...] = ()

    def emit() -> None:
        nonlocal paras, size
        text = "\n\n".join("".join(p).strip() for p in paras).strip()
        if text:
            chunks.append(Chunk(text, chunk_headings, len(text)))
        paras, size = [], 0

    def heads() -> tuple[str, ...]:
        return tuple(text for _, text in path)

    for block in blocks:
        if block.level:
            if size >= min_chars // 2:
                emit()
            path = [(lvl, text) for lvl, text in path if lvl < block.level]
            path.append((block.level, block.text))
            chunk_headings = tuple(dict.fromkeys((*chunk_headings, block.text))) if size else heads()
            continue
        new_paragraph = True
        for sentence in _sentences_ja(block.text, max_chars):
            cost = len(sentence) + (2 if new_paragraph and size else 0)
            if size and size + cost > max_chars:
                tail: list[str] = []
                for previous in reversed(paras[-1]):
                    kept = sum(map(len, tail)) + len(previous)
                    if kept > overlap or kept + len(sentence) + 2 > max_chars:
                        break
                    tail.insert(0, previous)
                emit()
                if tail:
                    paras, size = [tail], sum(map(len, tail))
                cost = len(sentence) + (2 if new_paragraph and size else 0)
            if not size:
                chunk_headings = heads()
            if new_paragraph or not paras:
                paras.append([])
            paras[-1].append(sentence)
            size += cost
            new_paragraph = False
    emit()
    return chunks


def chunk_document(blocks: Sequence[Block], lang: str, *, min_words: int = 100, max_words: int = 200) -> list[Chunk]:
    """Return the chunks of one document in its language: characters for Japanese, words otherwise."""
    if lang == "ja":
        return chunk_blocks_ja(blocks)
    return chunk_blocks(blocks, min_words=min_words, max_words=max_words)
