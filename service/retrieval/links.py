"""The second hop (``hops: 1``): the passages that the question and the first-hop passages *name*, found in
ONE more ``_msearch`` (one or two bodies a query) and ranked with the first hop. Pure functions here; the
executor runs the bodies.

- Names (:func:`names_of`): in English (any text that is not Japanese), word n-grams (1–:data:`MAX_WORDS`
  words) that start and end with a capitalised word or a number (a possessive ``'s`` dropped); in Japanese,
  SudachiPy's runs of nouns that hold a proper noun, a code or katakana
  (:meth:`~hopsearch.service.text.japanese.JapaneseTokenizer.names`, 異体字 folded).
- Titles (:func:`lookup_body`): the names of the question, of the first-hop passages the question names
  and of the top :data:`NAMERS` first-hop passages, looked up against the index's link key (a keyword field
  of whole titles: ``title.key``, lower-cased, so case does not matter), as the whole title or as a title that
  adds a disambiguation in brackets ("Mark Robson" → "Mark Robson (film director)"), scored by the question,
  so of several
  passages one name titles the one the question is about comes first. Each linked passage is placed right
  after the passage that named it (the question's first, whether the lookup or the first hop found them).
- Mentions (:func:`mention_body`), where the first hop repeats a document within ``k`` (several chunks of
  one file: company documents are rarely titled by the names they hold): the names of the top
  :data:`NAMERS` passages that the question does not hold, searched as phrases in the titles and texts of
  other documents, scored by the names and the question. Each repeated chunk's place goes to the best
  mention of a document not yet above it (the chunk moves to the end), so no document the first hop found
  in the top ``k`` is pushed out by a mention.

Every body carries the query's filters (the caller's Scope included), so a passage the caller may not read
is never a link. Kept by the numbers (README, "Multi-hop retrieval").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hopsearch.service.attached.fieldmap import LinkKey
from hopsearch.service.retrieval.bodies import Source, filters_of
from hopsearch.service.text.japanese import ja_query, tokenizer
from hopsearch.service.text.lang import detect_lang
from hopsearch.service.types import Hit, Link, RetrievalQuery

#: How many first-hop passages are read for names (besides those the question names).
NAMERS = 5
#: The longest name looked up, in words.
MAX_WORDS = 6
#: The most titles one lookup returns.
LOOKUP_SIZE = 50
#: Where the question's own names come from (``Link.source``).
QUESTION = "question"
#: The most names looked up as a title with a disambiguation (``prefix`` queries: the lookup's cost), the
#: question's first (README, "Multi-hop retrieval": 32 kept all@10 0.97 of 0.99 at 0.85x the time).
PREFIXES = 32
#: The most names one mention search holds (the first named first).
MENTIONS = 32
#: The most passages one mention search returns.
MENTION_SIZE = 20

#: A name as an index searches it as a phrase: the text and the fields, the title field first
#: (:func:`~hopsearch.service.text.japanese.ja_query`'s for Japanese, else the name in ``title`` and ``text``).
Phrase = tuple[str, Sequence[str]]

_WORD = re.compile(r"[\w'’&.\-]+|[(),:]")
_POSSESSIVE = re.compile(r"['’]s?$")
_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)$")
_INITIAL = re.compile(r"(?<=\w )([A-Z])(?= \w)")


def _named(word: str) -> bool:
    return word[:1].isupper() or word[:1].isdigit()


def _bare(word: str) -> str:
    """``word`` without a possessive (``Karijotas's``, ``Jones'``) or a closing full stop or comma."""
    return _POSSESSIVE.sub("", word.rstrip(".,")) if len(word) > 2 else word.rstrip(".,")


def spans(text: str, max_words: int = MAX_WORDS) -> list[str]:
    """Return the candidate names of ``text``: its n-grams that start and end with a capitalised word or a
    number, in the order they appear (first occurrence kept) — but not a number alone (a year names no
    paragraph it is about), one letter, nor one word the text also writes in lower case (a common word: "The",
    "Film"). A name's last word loses a possessive ("Karijotas's father" names "Karijotas"); one that ends an
    abbreviation keeps its full stop as a second spelling ("Lau Lauritzen Sr." and "Lau Lauritzen Sr"), and an
    initial without its full stop gets a second spelling with it ("Sundar C Babu", "Sundar C. Babu")."""
    words = _WORD.findall(text)
    common = {word for word in words if word.islower()}
    out: dict[str, None] = {}
    for i, first in enumerate(words):
        if not _named(first):
            continue
        for j in range(i, min(i + max_words, len(words))):
            last = _bare(words[j])
            if not last or (j > i and words[j] in ",:"):
                break
            if _named(last) or words[j] == ")":
                name = " ".join([*words[i:j], last]).replace("( ", "(").replace(" )", ")")
                out.setdefault(name, None)
                if words[j].endswith(".") and len(last) <= 3 and j > i:
                    out.setdefault(name + ".", None)
            if _POSSESSIVE.search(words[j]) and words[j] != last:
                break  # "Karijotas's father": a name ends at its possessive
    for name in list(out):  # "Sundar C Babu" is titled "Sundar C. Babu"
        if _INITIAL.search(name):
            out.setdefault(_INITIAL.sub(r"\1.", name), None)
    return [name for name in out if " " in name or not (len(name) < 2 or name.isdigit() or name.lower() in common)]


def name_key(name: str) -> str:
    """How a name and a title are compared: NFKC, case folded, spaces collapsed."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


def title_keys(title: str) -> tuple[str, ...]:
    """Return the keys a title answers to: itself, and itself without a closing disambiguation in brackets."""
    whole = name_key(title)
    bare = name_key(_DISAMBIGUATION.sub("", title))
    return (whole,) if bare == whole or not bare else (whole, bare)


def names_of(text: str) -> dict[str, str | None]:
    """Return the names of ``text``: Japanese by SudachiPy's nouns, each with its words as the index's SudachiPy
    fields hold them; any other by capitalised n-grams (:func:`spans`), searched as written (``None``).
    Nothing is kept across calls (a question is request data)."""
    if detect_lang(text) == "ja":
        return dict(tokenizer().names(text))
    return dict.fromkeys(spans(text))


def phrase_of(name: str, meta: Mapping[str, Any], searched: tuple[str, ...]) -> Phrase:
    """``name`` as an index searches it as a phrase: a Japanese name by the index's Japanese fields (its
    ``_meta``: :func:`~hopsearch.service.text.japanese.ja_query`), any other by ``searched`` as written."""
    ja = ja_query(name, meta)
    return ja if ja is not None else (name, searched)


def document_of(hit: Hit) -> str:
    """Return the document a passage is a chunk of (``doc_id``: a file, a DPR row, a QA paragraph), else itself."""
    return str(hit.source.get("doc_id") or hit.id)


def repeats(hits: Sequence[Hit], k: int) -> bool:
    """Whether the top ``k`` hits hold two chunks of one document (places a mention may take)."""
    docs = [document_of(hit) for hit in hits[:k]]
    return len(set(docs)) < len(docs)


@dataclass(frozen=True, slots=True)
class Candidates:
    """The names of one query: each title name and the ids of what named it (:data:`QUESTION` or a
    passage id), and each mention name with the passage that named it first."""

    named_by: Mapping[str, tuple[str, ...]]
    mentions: Mapping[str, str] = field(default_factory=dict)
    #: A Japanese mention's words as the SudachiPy fields of the current token recipe hold them.
    tokens: Mapping[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return list(self.named_by)


def candidates(question: str, hits: Sequence[Hit], namers: int = NAMERS, mentions: bool = False) -> Candidates:
    """Return the names the question and the hits name, each with what named it, the question first: the hits
    the question names (by title) and the first ``namers`` hits; a hit's own title is not a name it gives.
    ``mentions``: also the names of the first ``namers`` hits that the question does not hold."""
    named_by: dict[str, list[str]] = {}
    for name in names_of(question):
        named_by.setdefault(name, []).append(QUESTION)
    asked = {name_key(name) for name in named_by}
    readers = [hit for hit in hits if asked.intersection(title_keys(hit.title))]
    readers += [hit for hit in hits[:namers] if hit not in readers]
    held = name_key(question)
    mentioned: dict[str, str] = {}
    tokens: dict[str, str] = {}
    for hit in readers:
        own = title_keys(hit.title)
        for name, words in names_of(hit.text).items():
            key = name_key(name)
            if key not in own:
                named_by.setdefault(name, []).append(hit.id)
            if mentions and key not in held and hit in hits[:namers] and len(mentioned) < MENTIONS:
                mentioned.setdefault(name, hit.id)
                if words:
                    tokens.setdefault(name, words)
    return Candidates({name: tuple(by) for name, by in named_by.items()}, mentioned, tokens)


def name_clauses(names: Sequence[str], key: LinkKey) -> list[dict[str, Any]]:
    """Return the lookups of ``names`` in ``key``: each as a whole title (one ``terms``) and, the first
    :data:`PREFIXES` names of two words or more, as a title that adds a disambiguation (``Mark Robson (…)``: a
    ``prefix`` each, the costly part of the lookup; one word's would mostly find surname and disambiguation
    pages); lower-cased for a ``lowercase`` key (which holds titles so)."""
    asked = list(dict.fromkeys(name.lower() if key.fold == "lowercase" else name for name in names))
    clauses: list[dict[str, Any]] = [{"terms": {key.field: asked}}]
    longer = [name for name in asked if " " in name][:PREFIXES]
    return clauses + [{"prefix": {key.field: f"{name} ("}} for name in longer]


def lookup_body(
    query: RetrievalQuery,
    names: Sequence[str],
    key: LinkKey,
    source: Source,
    size: int = LOOKUP_SIZE,
    scored_by: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Return the search of the passages titled by one of ``names``, under the query's filters (its scope), scored
    by ``scored_by`` (the query's BM25 clause) where given."""
    titled = {"bool": {"should": name_clauses(names, key), "minimum_should_match": 1}}
    query_body: dict[str, Any] = {"filter": [titled, *filters_of(query)]}
    if scored_by is not None:
        query_body["should"] = [dict(scored_by)]
    return {"size": size, "track_total_hits": False, "query": {"bool": query_body}, "_source": source}


def mention_body(
    query: RetrievalQuery,
    phrases: Sequence[Phrase],
    elsewhere: Sequence[str],
    source: Source,
    scored_by: Mapping[str, Any] | None = None,
    size: int = MENTION_SIZE,
) -> dict[str, Any]:
    """Return the search of the passages of documents other than ``elsewhere`` (``doc_id``) whose title or text holds
    one of ``phrases`` (each clause named by its phrase's place, so a hit says which it holds: its
    ``matched_queries``), under the query's filters, scored by the phrases (a title's twice) and by
    ``scored_by``."""
    clauses: list[dict[str, Any]] = []
    for n, (text, fields) in enumerate(phrases):
        for place, field_name in enumerate(fields):
            phrase: dict[str, Any] = {"query": text, "_name": str(n)}
            if place == 0 and len(fields) > 1:
                phrase["boost"] = 2.0
            clauses.append({"match_phrase": {field_name: phrase}})
    query_body: dict[str, Any] = {
        "must": [{"bool": {"should": clauses, "minimum_should_match": 1}}],
        "filter": filters_of(query),
        "must_not": [{"terms": {"doc_id": list(elsewhere)}}],
    }
    if scored_by is not None:
        query_body["should"] = [dict(scored_by)]
    return {"size": size, "track_total_hits": False, "query": {"bool": query_body}, "_source": source}


def mentioned_by(raw: Mapping[str, Any], names: Sequence[str]) -> str | None:
    """Return the name a mention search's raw hit holds (by its ``matched_queries``): the longest of those it holds,
    the most particular ("北陸工場" rather than "北陸")."""
    held = [names[int(place)] for place in raw.get("matched_queries") or () if str(place).isdigit()]
    held = [name for name in held if name]
    return max(held, key=len) if held else None


def ranked(
    first: Sequence[Hit],
    linked: Sequence[Hit],
    found: Candidates,
    k: int,
    mentioned: Sequence[tuple[str, Hit]] = (),
) -> tuple[list[Hit], list[Link]]:
    """Return the first hop with the linked passages placed by what named them (:mod:`this module's docstring
    <hopsearch.service.retrieval.links>`), cut to ``k``, and the links that brought a passage in:
    ``linked`` found by titles, ``mentioned`` (each with the name it holds) by mentions."""
    out, links = _titled(first, linked, found)
    out, links = _filled(out, links, mentioned, found, k)
    kept = {hit.id for hit in out[:k]}
    return out[:k], [link for link in links if link.passage in kept]


def _titled(first: Sequence[Hit], linked: Sequence[Hit], found: Candidates) -> tuple[list[Hit], list[Link]]:
    """Return the first hop, the passages the question names ahead, each passage followed by those it names."""
    keyed: dict[str, list[str]] = {}
    for name in found.named_by:
        keyed.setdefault(name_key(name), []).append(name)
    after: dict[str, list[tuple[str, Hit]]] = {}
    placed: set[str] = set()
    titles = {name_key(hit.title) for hit in first}
    for hit in [*first, *linked]:  # the first hop's own passages are named too (the question's go first)
        if hit.id in placed or (hit not in first and name_key(hit.title) in titles):
            continue  # one passage of a linked title: its best by the question
        titles.add(name_key(hit.title))
        for key in title_keys(hit.title):
            for name in keyed.get(key, []):
                for namer in found.named_by[name][:1]:
                    if hit.id not in placed and namer != hit.id:
                        placed.add(hit.id)
                        after.setdefault(namer, []).append((name, hit))
    first_ids = {hit.id for hit in first}
    out: list[Hit] = []
    links: list[Link] = []
    seen: set[str] = set()

    def add(hit: Hit, score: float, name: str | None, namer: str) -> None:
        if hit.id in seen:
            return
        seen.add(hit.id)
        out.append(Hit(hit.id, score, hit.title, hit.text, hit.source) if name else hit)
        if name and hit.id not in first_ids:
            links.append(Link(name, namer, hit.id))
        for child_name, child in after.get(hit.id, []):
            if child.id not in first_ids:  # a first-hop passage another one names keeps its own place
                add(child, score, child_name, hit.id)

    top = first[0].score if first else 0.0
    for name, hit in after.get(QUESTION, []):
        add(hit, top, name, QUESTION)
    for hit in first:
        add(hit, hit.score, None, "")
    return out, links


def _filled(
    hits: Sequence[Hit], links: list[Link], mentioned: Sequence[tuple[str, Hit]], found: Candidates, k: int
) -> tuple[list[Hit], list[Link]]:
    """``hits`` with the place of each repeated document's chunk within ``k`` given to the next mention of a
    document not yet above it (the chunk moves to the end)."""
    pool = list(mentioned)
    out: list[Hit] = []
    moved: list[Hit] = []
    docs: set[str] = set()
    taken: set[str] = set()
    for place, hit in enumerate(hits):
        if hit.id in taken:
            continue
        if place < k and document_of(hit) in docs:
            while pool and (document_of(pool[0][1]) in docs or pool[0][1].id in taken):
                pool.pop(0)
            if pool:
                name, linked = pool.pop(0)
                out.append(Hit(linked.id, hit.score, linked.title, linked.text, linked.source))
                links.append(Link(name, found.mentions.get(name, QUESTION), linked.id, "mention"))
                docs.add(document_of(linked))
                taken.add(linked.id)
                moved.append(hit)
                continue
        out.append(hit)
        docs.add(document_of(hit))
    return out + moved, links
