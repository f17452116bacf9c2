"""The second hop (``hops: 1``): the passages that the question and the first-hop passages *name*, found in
ONE more ``_msearch`` and ranked with the first hop. Pure functions here; the executor runs the bodies.

- Names: word n-grams (1–:data:`MAX_WORDS` words) of the question and of the top :data:`NAMERS` first-hop
  passages that start and end with a capitalised word or a number (a possessive ``'s`` dropped); each
  looked up against the title's keyword field without regard to case, as the whole title or as a title
  that adds a disambiguation in brackets ("Mark Robson" → "Mark Robson (film director)"), in a filter
  that carries the query's filters (the caller's Scope included), so a passage the caller may not read is
  never a link. The lookup scores what it finds by the question, so of several passages one name titles
  the one the question is about comes first.
- Ranking (:func:`ranked`): the passages the question names first (they are what it asks about, whether
  the lookup or the first hop found them), then the first hop in its order, each passage followed by the
  passages it names, cut to ``k``. The passages the question names name passages too. Kept by the
  numbers (README, "Multi-hop retrieval").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hopsearch.service.retrieval.bodies import Source, filters_of
from hopsearch.service.types import Hit, Link, RetrievalQuery

#: How many first-hop passages are read for names (besides those the question names).
NAMERS = 5
#: The longest name looked up, in words.
MAX_WORDS = 6
#: The most titles one lookup returns.
LOOKUP_SIZE = 50
#: Where the question's own names come from (``Link.source``).
QUESTION = "question"

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
    """The candidate names of ``text``: its n-grams that start and end with a capitalised word or a
    number, in the order they appear (first occurrence kept) — but not a number alone (a year names no
    paragraph it is about), one letter, nor one word the text also writes in lower case (a common word: "The",
    "Film").
    A name's last word loses a possessive; one that ends an abbreviation keeps its full stop as a second
    spelling ("Lau Lauritzen Sr." and "Lau Lauritzen Sr")."""
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
    """The keys a title answers to: itself, and itself without a closing disambiguation in brackets."""
    whole = name_key(title)
    bare = name_key(_DISAMBIGUATION.sub("", title))
    return (whole,) if bare == whole or not bare else (whole, bare)


@dataclass(frozen=True, slots=True)
class Candidates:
    """The names of one query: each name and the ids of what named it (:data:`QUESTION` or a passage id)."""

    named_by: Mapping[str, tuple[str, ...]]

    @property
    def names(self) -> list[str]:
        return list(self.named_by)


def candidates(question: str, hits: Sequence[Hit], namers: int = NAMERS) -> Candidates:
    """The names the question and the hits name, each with what named it, the question first: the hits
    the question names (by title) and the first ``namers`` hits; a hit's own title is not a name it gives."""
    named_by: dict[str, list[str]] = {}
    for name in spans(question):
        named_by.setdefault(name, []).append(QUESTION)
    asked = {name_key(name) for name in named_by}
    readers = [hit for hit in hits if asked.intersection(title_keys(hit.title))]
    readers += [hit for hit in hits[:namers] if hit not in readers]
    for hit in readers:
        own = title_keys(hit.title)
        for name in spans(hit.text):
            if name_key(name) not in own:
                named_by.setdefault(name, []).append(hit.id)
    return Candidates({name: tuple(by) for name, by in named_by.items()})


def name_clauses(names: Sequence[str], key: str) -> list[dict[str, Any]]:
    """One name's lookups: the whole title, and a title that adds a disambiguation (``Name (…)``), case
    ignored (``case_insensitive``: Elasticsearch 7.10 and later)."""
    out: list[dict[str, Any]] = []
    for name in names:
        out.append({"term": {key: {"value": name, "case_insensitive": True}}})
        out.append({"prefix": {key: {"value": f"{name} (", "case_insensitive": True}}})
    return out


def lookup_body(
    query: RetrievalQuery,
    names: Sequence[str],
    title_key: str,
    source: Source,
    size: int = LOOKUP_SIZE,
    scored_by: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The search of the passages titled by one of ``names``, under the query's filters (its scope), scored
    by ``scored_by`` (the query's BM25 clause) where given."""
    titled = {"bool": {"should": name_clauses(names, title_key), "minimum_should_match": 1}}
    query_body: dict[str, Any] = {"filter": [titled, *filters_of(query)]}
    if scored_by is not None:
        query_body["should"] = [dict(scored_by)]
    return {"size": size, "track_total_hits": False, "query": {"bool": query_body}, "_source": source}


def ranked(first: Sequence[Hit], linked: Sequence[Hit], found: Candidates, k: int) -> tuple[list[Hit], list[Link]]:
    """The first hop with the linked passages placed by what named them (:mod:`this module's docstring
    <hopsearch.service.retrieval.links>`), cut to ``k``, and the links that brought a passage in."""
    keyed: dict[str, list[str]] = {}
    for name in found.named_by:
        keyed.setdefault(name_key(name), []).append(name)
    after: dict[str, list[tuple[str, Hit]]] = {}
    placed: set[str] = set()
    for hit in [*first, *linked]:  # the first hop's own passages are named too (the question's go first)
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
    kept = {hit.id for hit in out[:k]}
    return out[:k], [link for link in links if link.passage in kept]
