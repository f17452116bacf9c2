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
lower-cased; punctuation, blanks, particles and auxiliary verbs are dropped. From token version 2 on
(``ja_tokens`` in ``_meta``; an index without it has version 1), the 異体字 NFKC leaves apart (髙/高, 﨑/崎,
德/徳 …: :data:`VARIANTS`) are folded to their common form before SudachiPy reads the text, in passages and
in queries alike, so 「山﨑」 in one document and 「山崎」 in a question are the same word. A query is cut with
the version of the index it searches, so an older index keeps answering as it was built (a rebuild,
``hopsearch index docs PATH --rebuild``, moves it to the current version).

:class:`Synonyms` (the ``ja_synonyms`` setting: a file of comma-separated groups of company terms,
``研究開発部, 研開``) adds the other terms of every group a Japanese query names to its BM25 text.
"""

from __future__ import annotations

import re
import threading
import unicodedata
import warnings
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any, Literal

from hopsearch.service.errors import ConfigError, InputError
from hopsearch.service.text.lang import detect_lang

JaAnalysis = Literal["kuromoji", "sudachi"]
#: The token recipe new SudachiPy indices are built with (``_meta.hopsearch.ja_tokens``): 1, NFKC and
#: lower case; 2, also :data:`VARIANTS` folded.
TOKENS = 2
#: 異体字 (and old forms) that NFKC keeps apart, as company names and personal names write them, and the
#: common form they are searched as.
VARIANTS = str.maketrans(
    {
        "髙": "高",
        "﨑": "崎",
        "嵜": "崎",
        "碕": "崎",
        "德": "徳",
        "濵": "浜",
        "濱": "浜",
        "邊": "辺",
        "邉": "辺",
        "齋": "斎",
        "齊": "斉",
        "櫻": "桜",
        "國": "国",
        "澤": "沢",
        "廣": "広",
        "嶋": "島",
        "嶌": "島",
        "栁": "柳",
        "槇": "槙",
        "髮": "髪",
        "惠": "恵",
        "眞": "真",
        "冨": "富",
        "𠮷": "吉",
        "曻": "昇",
        "瀨": "瀬",
        "舘": "館",
    }
)
TOKEN_FIELDS = ("title_ja_tokens", "text_ja_tokens")
KUROMOJI_FIELDS = ("title.ja", "text.ja")
_DROPPED_POS = frozenset({"補助記号", "空白", "助詞", "助動詞"})
_PIECE = 8000


def ja_analysis_for(modules: frozenset[str]) -> JaAnalysis:
    """Kuromoji where the cluster has the plugin, SudachiPy tokens otherwise."""
    return "kuromoji" if "analysis-kuromoji" in modules else "sudachi"


def ja_mappings(analysis: JaAnalysis) -> dict[str, Any]:
    """Return the mapping properties of the Japanese fields: ``{field: definition}`` to merge into the index."""
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

    def tokens(self, text: str, version: int = TOKENS) -> list[str]:
        """Return the words of ``text`` under token recipe ``version`` (see the module docstring)."""
        if not text.strip():
            return []
        if version >= 2:
            text = fold_variants(text)
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

    def names(self, text: str, version: int = TOKENS) -> dict[str, str]:
        """Return the names ``text`` names, for the second hop, each with its words as the ``*_ja_tokens`` fields
        hold them (space-separated: the phrase a search of the name asks): runs of nouns (with prefixes and
        suffixes) between blanks and punctuation, each run's spans of 1–:data:`NAME_TOKENS` words that hold a
        proper noun (固有名詞), a Latin word or a product code (``X2``, ``KZ-200``) or a katakana word; NFKC,
        and from recipe 2 on the 異体字 folded (「山﨑」 is 「山崎」), in the order they appear."""
        text = unicodedata.normalize("NFKC", fold_variants(text) if version >= 2 else text)
        with self._lock:
            if self._sudachi is None:
                self._load()
            morphemes = [
                (m.surface(), m.part_of_speech())
                for start in range(0, len(text), _PIECE)
                for m in self._sudachi.tokenize(text[start : start + _PIECE], self._mode)
            ]
        out: dict[str, str] = {}
        for run in _noun_runs(morphemes):
            for name, phrase in _run_names(run):
                out.setdefault(name, phrase)
        return out

    def morphemes(self, text: str) -> list[tuple[str, tuple[str, ...], bool]]:
        """SudachiPy's morphemes of ``text`` (split mode A) as they are: surface, part of speech, and
        whether the dictionary lacks the word."""
        with self._lock:
            if self._sudachi is None:
                self._load()
            return [
                (m.surface(), tuple(m.part_of_speech()), bool(m.is_oov()))
                for start in range(0, len(text), _PIECE)
                for m in self._sudachi.tokenize(text[start : start + _PIECE], self._mode)
            ]

    def joined(self, text: str, version: int = TOKENS) -> str:
        """Return the words of ``text`` separated by single spaces (what the ``*_ja_tokens`` fields hold)."""
        return " ".join(self.tokens(text, version))


#: The longest name :meth:`JapaneseTokenizer.names` gives, in SudachiPy words (split mode A).
NAME_TOKENS = 4
_NOUNISH = frozenset({"名詞", "接頭辞", "接尾辞"})
_CODE = re.compile(r"[ァ-ヴ]{2,}|[A-Za-z]{2,}|[A-Za-z][0-9]|[0-9][A-Za-z]")
Morpheme = tuple[str, Sequence[str]]


def _person(morpheme: Morpheme | None) -> bool:
    return morpheme is not None and tuple(morpheme[1][1:3]) == ("固有名詞", "人名")


def _noun_runs(morphemes: Sequence[Morpheme]) -> list[list[Morpheme]]:
    """Return the runs of nouns, prefixes and suffixes (a hyphen inside a run kept: ``KZ-200``; a blank between a
    family and a given name too: 「石井 由香」 is 「石井由香」)."""
    runs: list[list[Morpheme]] = [[]]
    for n, (surface, pos) in enumerate(morphemes):
        after = morphemes[n + 1] if n + 1 < len(morphemes) else None
        if pos[0] in _NOUNISH or (surface == "-" and runs[-1]):
            runs[-1].append((surface, pos))
        elif not surface.strip() and runs[-1] and _person(runs[-1][-1]) and _person(after):
            continue
        elif runs[-1]:
            runs.append([])
    return [run for run in runs if run]


def _run_names(run: Sequence[Morpheme]) -> list[tuple[str, str]]:
    """Return the spans of one noun run that name something — a proper noun, a Latin word, a code or katakana in
    them; never a lone prefix or suffix at an edge, nor one character — each with its words as tokens."""
    named = [pos[1] == "固有名詞" or bool(_CODE.search(surface)) for surface, pos in run]
    words = [
        "" if pos[0] in _DROPPED_POS else unicodedata.normalize("NFKC", surface).lower().strip() for surface, pos in run
    ]
    out: list[tuple[str, str]] = []
    for i in range(len(run)):
        if run[i][1][0] == "接尾辞":
            continue
        for j in range(i + 1, min(len(run), i + NAME_TOKENS) + 1):
            if run[j - 1][1][0] == "接頭辞" or run[j - 1][0] == "-" or not any(named[i:j]):
                continue
            name = "".join(surface for surface, _ in run[i:j])
            if len(name) >= 2 and not name.isdigit():
                phrase = " ".join(word for word in words[i:j] if word)
                out.append((name, phrase))
    return out


_shared = JapaneseTokenizer()


def fold_variants(text: str) -> str:
    """``text`` with the 異体字 of :data:`VARIANTS` in their common form (NFKC is left to the caller)."""
    return text.translate(VARIANTS)


def ja_tokens_of(meta: Mapping[str, Any]) -> int:
    """Return the token recipe an index was built with (1 where ``_meta`` does not say: before versions)."""
    value = meta.get("ja_tokens")
    return value if isinstance(value, int) else 1


def ja_tokens_note(index: str, meta: Mapping[str, Any]) -> str:
    """Return what to say of a SudachiPy index built with an older token recipe (empty where it is current)."""
    version = ja_tokens_of(meta)
    if meta.get("ja_analysis") != "sudachi" or version >= TOKENS:
        return ""
    return (
        f"index [{index}] has Japanese tokens of recipe {version} < {TOKENS} (異体字 such as 髙/高, 﨑/崎 not "
        "folded): loads into it and its queries keep that recipe, so it answers as built; "
        "`hopsearch index docs PATH --rebuild` builds it anew with the current one"
    )


def tokenizer() -> JapaneseTokenizer:
    """Return the process-wide tokenizer (spaCy's Japanese class loads once, ~1 s)."""
    return _shared


def annotate(body: MutableMapping[str, Any], analysis: str | None, tokens: int = TOKENS) -> None:
    """Add ``lang`` (unless the source set it) and, for Japanese text in a ``sudachi`` index, the token fields
    (recipe ``tokens``: the index's :func:`ja_tokens_of`). ``analysis`` ``None`` is an index made before
    languages were stored: nothing is added."""
    if analysis is None:
        body.pop("lang", None)
        return
    title = str(body.get("title") or "")
    text = str(body.get("text") or "")
    lang = body.get("lang") or detect_lang(f"{title}\n{text}")
    body["lang"] = lang
    if lang == "ja" and analysis == "sudachi":
        tok = tokenizer()
        body["title_ja_tokens"] = tok.joined(title, tokens)
        body["text_ja_tokens"] = tok.joined(text, tokens)


class Synonyms:
    """Groups of terms that name the same thing in a company (``研究開発部, 研開``; product codes, department
    abbreviations): a Japanese query that names one term of a group searches BM25 for all of them. Terms
    are compared NFKC-normalised, lower-cased and with :data:`VARIANTS` folded."""

    def __init__(self, groups: Sequence[Sequence[str]] = ()) -> None:
        self.groups = tuple(tuple(dict.fromkeys(_plain(t) for t in g if _plain(t))) for g in groups)

    def __bool__(self) -> bool:
        return bool(self.groups)

    def expand(self, text: str) -> str:
        """``text`` and, after it, the terms of every group ``text`` names that it does not hold."""
        plain = _plain(text)
        extra = [term for group in self.groups if any(t in plain for t in group) for term in group if term not in plain]
        return " ".join([text, *dict.fromkeys(extra)]) if extra else text

    def terms_of(self, name: str) -> tuple[str, ...]:
        """Return the other terms of the groups ``name`` is a term of (``研開`` → ``研究開発部``)."""
        plain = _plain(name)
        return tuple(term for group in self.groups if plain in group for term in group if term != plain)

    def canonical(self, name: str) -> str:
        """Return the first term of the group ``name`` is a term of, else ``name``."""
        plain = _plain(name)
        for group in self.groups:
            if plain in group:
                return group[0]
        return name

    @classmethod
    def read(cls, path: Path) -> Synonyms:
        """One group a line, its terms separated by commas (``、`` too); ``#`` starts a comment. A line with
        a single term is an :class:`InputError` naming file and line."""
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read the synonyms file ({exc})", source=str(path)) from exc
        groups = []
        for number, line in enumerate(lines, start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            terms = [t.strip() for t in line.replace("、", ",").split(",") if t.strip()]
            if len(terms) < 2:
                raise InputError(f"a group needs two terms or more, got {terms}", source=str(path), position=number)
            groups.append(terms)
        return cls(groups)


def _plain(text: str) -> str:
    return fold_variants(unicodedata.normalize("NFKC", text)).lower().strip()


def ja_query(
    text: str, meta: Mapping[str, Any], synonyms: Synonyms | None = None
) -> tuple[str, tuple[str, ...]] | None:
    """``(query text, fields)`` for a Japanese query on an index with Japanese fields, else ``None``; the
    text names the other terms of the ``synonyms`` groups it names too."""
    analysis = meta.get("ja_analysis")
    if analysis is None or detect_lang(text) != "ja":
        return None
    if synonyms:
        text = synonyms.expand(text)
    if analysis == "kuromoji":
        return text, KUROMOJI_FIELDS
    return tokenizer().joined(text, ja_tokens_of(meta)), TOKEN_FIELDS
