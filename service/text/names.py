"""The names a passage holds, as its ``names`` keyword field keeps them (filled at index time) and as a
question's are read at query time: pure functions, the same on both sides so that a name matches itself.

Japanese (:func:`ja_names`):

- organisation units and sites: a run of kanji, katakana, Latin letters or digits ending in a unit word
  (:data:`UNITS`: …部, …課, …室, …グループ, …工場, …センター, …支店, …営業所, …本部, …事業所, …研究所);
  a role-qualified unit is split into the unit and the role (「総務部長」 → 総務部 + 部長, 「第二工場長」 →
  第二工場 + 工場長, 「品質保証部の部長」 → 品質保証部 + 部長);
- roles (:data:`ROLES`: 部長, 工場長, 課長 …) wherever they stand (a table's header 「部長: 山田 太郎」);
- products and codes: Latin letters or katakana with digits (``M-204``, ``KZ-200``, 「ミドリ5」), 「」- and
  『』-quoted names, katakana words SudachiPy does not know (a product's own name);
- people: SudachiPy's family name followed by a given name, joined (「佐藤 花子」 and 「佐藤花子」 are one name).

Any other language (:func:`en_names`): the capitalised n-grams the title hop reads
(:func:`~hopsearch.service.retrieval.links.spans` by the same rule, here :func:`capitalised`).

Every name is folded as the Japanese fields fold text (:func:`fold`): NFKC (full-width Latin and digits to
half-width, half-width kana to full-width), the 異体字 of :data:`~.japanese.VARIANTS`, dashes to ``-``,
blanks dropped, lower case: ``Ｍ－２０４`` is ``m-204``, 「山﨑 雅人」 is 「山崎雅人」.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from hopsearch.service.text.japanese import Synonyms, fold_variants, tokenizer
from hopsearch.service.text.lang import detect_lang

#: The recipe of the ``names`` field (``_meta.hopsearch.names``; an index without it holds no names).
NAMES_VERSION = 1
#: The most names one passage keeps (the first found first).
MAX_NAMES = 64
#: Words that end the name of an organisation unit or a site, longest first.
UNITS = ("営業所", "事業所", "研究所", "センター", "グループ", "本部", "工場", "支店", "部", "課", "室")
#: The roles a unit's head or member holds; a unit followed by 長 takes ``unit word + 長`` (工場長, 支店長).
ROLES = frozenset(
    {
        "部長",
        "次長",
        "課長",
        "係長",
        "室長",
        "工場長",
        "支店長",
        "所長",
        "センター長",
        "本部長",
        "グループ長",
        "社長",
        "副社長",
        "専務",
        "常務",
        "取締役",
        "主任",
        "責任者",
        "リーダー",
        "マネージャー",
    }
)
#: Words ending in a unit word that name no unit (parts of things, rooms, quantities).
_NOT_UNITS = frozenset(
    {
        "一部",
        "全部",
        "内部",
        "外部",
        "上部",
        "下部",
        "細部",
        "頭部",
        "幹部",
        "中心部",
        "先端部",
        "上層部",
        "首脳部",
        "接続部",
        "表示部",
        "会議室",
        "応接室",
        "教室",
        "控室",
        "待合室",
        "和室",
        "洋室",
        "浴室",
        "寝室",
        "個室",
        "本部",
        "工場",
        "支店",
    }
)
#: Words that open a run but are no part of the unit's name (当社総務部 is 総務部).
_OPENERS = ("当社", "弊社", "貴社", "同社", "各", "全社", "同", "新", "旧", "元")
_STEM = r"[一-龥々〆ヶァ-ヴーA-Za-z0-9・]"
_UNIT = re.compile(rf"({_STEM}{{1,16}}?)({'|'.join(UNITS)})(長|次長)?")
_ROLE = re.compile("|".join(sorted(ROLES, key=len, reverse=True)))
_AFTER_OF = re.compile(rf"^の({'|'.join(sorted(ROLES, key=len, reverse=True))})")
_CODE = re.compile(r"(?<![A-Za-z0-9])(?:[A-Za-z]+[A-Za-z0-9]*-?[0-9][A-Za-z0-9-]*|[ァ-ヴー]{2,}-?[0-9]+[A-Za-z0-9]*)")
_QUOTED = re.compile(r"[「『]([^「」『』\n]{2,30})[」』]")
_DASHES = str.maketrans({c: "-" for c in "‐‑‒–—―−－ｰ"})
_KANJI = re.compile(r"[一-龥々]")


def fold(name: str) -> str:
    """``name`` as the ``names`` field holds it (see the module docstring)."""
    text = unicodedata.normalize("NFKC", fold_variants(name)).translate(_DASHES)
    return "".join(text.split()).lower()


def _unit_names(text: str) -> Iterable[str]:
    for match in _UNIT.finditer(text):
        stem, word, head = match.group(1), match.group(2), match.group(3)
        for opener in _OPENERS:
            if stem.startswith(opener) and len(stem) > len(opener) + 1:
                stem = stem[len(opener) :]
                break
        unit = stem + word
        after = text[match.end() : match.end() + 1]
        if len(word) == 1 and not head and _KANJI.match(after):
            continue  # 部署, 部門, 課題: the unit word opens another word
        if len(stem) < 2 or unit in _NOT_UNITS or stem.isdigit():
            continue
        yield unit
        if head:
            yield ("所長" if word in ("営業所", "事業所", "研究所") else word + "長") if head == "長" else head
        else:
            role = _AFTER_OF.match(text[match.end() :])
            if role:
                yield role.group(1)


def _people_and_products(text: str) -> Iterable[str]:
    """Family name + given name (a blank between them or not), as SudachiPy tags them, and katakana words
    of three characters or more that its dictionary does not know (a product's own name): one pass."""
    if not (_KANJI.search(text) or re.search(r"[ァ-ヴ]{3}", text)):
        return
    morphemes = tokenizer().morphemes(text)
    for n, (surface, pos, oov) in enumerate(morphemes):
        if oov and re.fullmatch(r"[ァ-ヴー]{3,}", surface):
            yield surface
        if tuple(pos[1:4]) != ("固有名詞", "人名", "姓"):
            continue
        m = n + 1
        while m < len(morphemes) and not morphemes[m][0].strip():
            m += 1
        if m < len(morphemes) and tuple(morphemes[m][1][1:4]) == ("固有名詞", "人名", "名"):
            yield surface + morphemes[m][0]


def ja_names(text: str) -> list[str]:
    """Return the names of a Japanese text, folded, in the order found (units, roles, codes, quoted names,
    people, unknown katakana words)."""
    plain = unicodedata.normalize("NFKC", fold_variants(text)).translate(_DASHES)
    found: list[str] = []
    found += _unit_names(plain)
    found += _ROLE.findall(plain)
    found += _CODE.findall(plain)
    found += _QUOTED.findall(plain)
    found += _people_and_products(plain)
    return _kept(found)


_WORD = re.compile(r"[\w'’&.\-]+|[(),:]")
#: Capitalised words that open sentences and name nothing.
_STOP = frozenset(
    [
        "the",
        "a",
        "an",
        "in",
        "on",
        "of",
        "at",
        "by",
        "for",
        "and",
        "or",
        "but",
        "it",
        "its",
        "he",
        "she",
        "his",
        "her",
        "they",
        "their",
        "this",
        "that",
        "these",
        "those",
    ]
)


def capitalised(text: str, max_words: int = 4) -> list[str]:
    """Return the capitalised n-grams of an English text (1–``max_words`` words, each capitalised or a number,
    not a number alone, nor one word the text also writes in lower case), folded."""
    words = [w.rstrip(".,").removesuffix("'s").removesuffix("’s") for w in _WORD.findall(text)]
    common = {w for w in words if w.islower()}
    out: list[str] = []
    for i, first in enumerate(words):
        if not first[:1].isupper():
            continue
        for j in range(i, min(i + max_words, len(words))):
            if not (words[j][:1].isupper() or words[j][:1].isdigit()):
                break
            name = " ".join(words[i : j + 1])
            if j > i or (len(name) > 2 and name.lower() not in common and name.lower() not in _STOP):
                out.append(name)
    return [" ".join(unicodedata.normalize("NFKC", n).casefold().split()) for n in dict.fromkeys(out)][:MAX_NAMES]


def en_names(text: str) -> list[str]:
    """Return the names of a text in any language but Japanese: its capitalised n-grams, folded."""
    return capitalised(text)


def names_of(text: str, lang: str | None = None) -> list[str]:
    """Return the names of ``text`` (``lang``: its language where known, else detected)."""
    if not text.strip():
        return []
    return ja_names(text) if (lang or detect_lang(text)) == "ja" else en_names(text)


def is_role(name: str) -> bool:
    """Whether ``name`` is a role (部長, 工場長 …): a name that qualifies a unit, never a link by itself."""
    return name in ROLES


def query_names(text: str, synonyms: Synonyms | None = None) -> list[str]:
    """Return the names of a question, folded as the field folds them, and every term of each company synonym
    group (``ja_synonyms``) the question or one of its names holds (「二開」 asks for 第二開発部 too)."""
    names = names_of(text)
    if synonyms:
        plain = fold(text)
        for group in synonyms.groups:
            if any(fold(term) in plain or fold(term) in names for term in group):
                names += [fold(term) for term in group]
    return _kept(names)


def _kept(found: Iterable[str]) -> list[str]:
    out: dict[str, None] = {}
    for name in found:
        folded = fold(name)
        if len(folded) >= 2 and not folded.isdigit():
            out.setdefault(folded, None)
    return list(out)[:MAX_NAMES]
