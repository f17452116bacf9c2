"""The language of a text from its script, without a model: kana or kanji → ``ja``, anything else → ``en``.

A text is Japanese when its kana/kanji characters are at least a fifth as many as its Latin letters, so
a Japanese passage naming English products stays ``ja`` and an English passage quoting one Japanese
name stays ``en``. (Chinese text also reads as ``ja``: the script cannot tell them apart.)
"""

from __future__ import annotations

import re
from typing import Literal

Lang = Literal["ja", "en"]

#: Hiragana, katakana (full and half width), CJK ideographs (with extension A and compatibility forms).
CJK_CHARS = "\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK = re.compile(f"[{CJK_CHARS}]")
_LATIN = re.compile(r"[A-Za-z]")


def detect_lang(text: str) -> Lang:
    """``ja`` or ``en`` for ``text`` (see the module docstring)."""
    if _CJK.search(text) is None:
        return "en"
    return "ja" if len(_CJK.findall(text)) * 5 >= len(_LATIN.findall(text)) else "en"


def is_cjk(char: str) -> bool:
    """Whether one character is kana, kanji or Japanese full-width punctuation (line joins drop the space)."""
    return bool(_CJK.match(char)) or "\u3000" <= char <= "\u303f" or "\uff01" <= char <= "\uff65"
