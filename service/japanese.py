"""Japanese BM25: which analysis an index uses, SudachiPy tokens where the cluster has no kuromoji, and the
fields a Japanese query searches.

Japanese has no spaces between words, so the ``standard`` analyzer cuts it into single characters and
BM25 precision collapses. Two ways around it, recorded as ``ja_analysis`` in the passages index
``_meta`` when the index is created (a query never mixes them):

- ``kuromoji``: the cluster has the ``analysis-kuromoji`` plugin (``GET _nodes/plugins``); ``title`` and
  ``text`` get a ``ja`` sub-field analysed by it and Japanese queries search those sub-fields as typed.
- ``sudachi``: everywhere else. spaCy's Japanese class over SudachiPy (dictionary ``sudachidict-core``,
  split mode A, all shipped in PyPI wheels, nothing downloaded) cuts Japanese passages into words at load
  time; the words go, space-separated, into ``title_ja_tokens``/``text_ja_tokens`` (the built-in
  ``whitespace`` analyzer), and Japanese queries are cut the same way.

Tokens are NFKC-normalised (full-width digits and Latin fold to ASCII, half-width kana to full width) and
lower-cased; punctuation, blanks, particles and auxiliary verbs are dropped.
"""

from __future__ import annotations

import threading
import unicodedata
import warnings
from collections.abc import Mapping, MutableMapping
from typing import Any, Literal

from hopsearch.service.errors import ConfigError
from hopsearch.service.lang import detect_lang

JaAnalysis = Literal["kuromoji", "sudachi"]
TOKEN_FIELDS = ("title_ja_tokens", "text_ja_tokens")
KUROMOJI_FIELDS = ("title.ja", "text.ja")
_DROPPED_POS = frozenset({"補助記号", "空白", "助詞", "助動詞"})
_PIECE = 8000


def ja_analysis_for(modules: frozenset[str]) -> JaAnalysis:
    """Kuromoji where the cluster has the plugin, SudachiPy tokens otherwise."""
    return "kuromoji" if "analysis-kuromoji" in modules else "sudachi"


def ja_mappings(analysis: JaAnalysis) -> dict[str, Any]:
    """The mapping properties of the Japanese fields: ``{field: definition}`` to merge into the index."""
    if analysis == "kuromoji":
        return {"ja": {"type": "text", "analyzer": "kuromoji"}}
    return {name: {"type": "text", "analyzer": "whitespace"} for name in TOKEN_FIELDS}


class JapaneseTokenizer:
    """spaCy's Japanese class supplies the configured SudachiPy tokenizer (dictionary ``sudachidict-core``);
    it is called directly in split mode A (spaCy's ``Doc`` building would cost four times the
    tokenisation itself). Loaded on first use; thread-safe."""

    def __init__(self) -> None:
        self._sudachi: Any = None
        self._mode: Any = None
        self._lock = threading.Lock()

    def _load(self) -> None:
        try:
            import spacy
            from sudachipy import SplitMode  # type: ignore[import-untyped]

            with warnings.catch_warnings():  # spaCy calls SudachiPy's deprecated Dictionary.create()
                warnings.simplefilter("ignore", DeprecationWarning)
                nlp: Any = spacy.blank("ja")
                self._sudachi = nlp.tokenizer.tokenizer
            self._mode = SplitMode.A
        except (ImportError, OSError, ValueError, AttributeError) as exc:
            raise ConfigError(
                "Japanese tokenisation needs spaCy, SudachiPy and sudachidict-core "
                f"(pip install spacy sudachipy sudachidict-core): {exc}"
            ) from exc

    def tokens(self, text: str) -> list[str]:
        """The words of ``text`` (see the module docstring)."""
        if not text.strip():
            return []
        with self._lock:  # a Sudachi tokenizer object is not safe to share across threads
            if self._sudachi is None:
                self._load()
            words = [
                (m.surface(), m.part_of_speech()[0])
                for start in range(0, len(text), _PIECE)  # Sudachi refuses inputs over ~49 KB
                for m in self._sudachi.tokenize(text[start : start + _PIECE], self._mode)
            ]
        out = []
        for word, pos in words:
            if pos in _DROPPED_POS:
                continue
            token = unicodedata.normalize("NFKC", word).lower().strip()
            if token:
                out.append(token)
        return out

    def joined(self, text: str) -> str:
        """The words of ``text`` separated by single spaces (what the ``*_ja_tokens`` fields hold)."""
        return " ".join(self.tokens(text))


_shared = JapaneseTokenizer()


def tokenizer() -> JapaneseTokenizer:
    """The process-wide tokenizer (spaCy's Japanese class loads once, ~1 s)."""
    return _shared


def annotate(body: MutableMapping[str, Any], analysis: str | None) -> None:
    """Add ``lang`` (unless the source set it) and, for Japanese text in a ``sudachi`` index, the token fields.
    ``analysis`` ``None`` is an index made before languages were stored: nothing is added."""
    if analysis is None:
        body.pop("lang", None)
        return
    title = str(body.get("title") or "")
    text = str(body.get("text") or "")
    lang = body.get("lang") or detect_lang(f"{title}\n{text}")
    body["lang"] = lang
    if lang == "ja" and analysis == "sudachi":
        tok = tokenizer()
        body["title_ja_tokens"] = tok.joined(title)
        body["text_ja_tokens"] = tok.joined(text)


def ja_query(text: str, meta: Mapping[str, Any]) -> tuple[str, tuple[str, ...]] | None:
    """``(query text, fields)`` for a Japanese query on an index with Japanese fields, else ``None``."""
    analysis = meta.get("ja_analysis")
    if analysis is None or detect_lang(text) != "ja":
        return None
    if analysis == "kuromoji":
        return text, KUROMOJI_FIELDS
    return tokenizer().joined(text), TOKEN_FIELDS
