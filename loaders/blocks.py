"""The unit every extractor returns — a :class:`Block` (a heading with its level, or a paragraph) — and
:func:`collapse`, the whitespace rule they share (Japanese line structure kept). Below both
:mod:`hopsearch.loaders.extract` and :mod:`hopsearch.loaders.office`, which import it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hopsearch.service.text.lang import is_cjk


@dataclass(frozen=True, slots=True)
class Block:
    text: str
    level: int = 0  # 0: paragraph; 1..6: heading level


_SENTENCE_END = "。！？!?"
_BULLETS = "・●○■□◆◇※＊*-‐－" + "0123456789０１２３４５６７８９"
_SPACE = re.compile(r"[^\S\u3000]+")  # the ideographic space (U+3000) is written on purpose: kept
_UNTIDY = re.compile(r"[^\S ]|  |^ | $")  # whitespace that collapse() would change in ASCII text


def _join(parts: list[str]) -> str:
    """Join lines by a space, or with none where both sides are Japanese.

    Japanese has no spaces between words, and a wrapped line continues the sentence; a Japanese sentence end,
    a bullet or a short line (a heading, a paragraph's last line in a PDF) keeps the line break.
    """
    if not parts:
        return ""
    out = [parts[0]]  # pieces joined once at the end: adding to one string is quadratic in the worst case
    width = max(map(len, parts))
    last, previous = parts[0][-1:], parts[0]
    for part in parts[1:]:
        if not (is_cjk(last) and is_cjk(part[0])):
            out.append(" ")
        elif last in _SENTENCE_END or part[0] in _BULLETS or len(previous) < 0.7 * width:
            out.append("\n")
        out.append(part)
        last, previous = part[-1], part
    return "".join(out)


def collapse(text: str) -> str:
    """Collapse whitespace to one line of text, except that Japanese line structure survives (see ``_join``).

    Within a line a run of blanks is one space, between Japanese words too: a writer who types one there
    means it (「佐藤 花子」, 「第1条 目的」), and the BM25 tokens read both spellings as the same words.
    """
    if text.isascii() and not _UNTIDY.search(text):
        return text  # already one line with single spaces (most CSV cells): nothing to do
    lines = [" ".join(_SPACE.split(line.strip())) for line in text.splitlines()]
    return _join([line for line in lines if line])
