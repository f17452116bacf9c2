"""The second hop (``hops: 1``): the passages that the question and the first-hop passages *name*, found in
ONE more ``_msearch`` and ranked with the first hop. Pure functions here; the executor runs the bodies.

- Names: word n-grams (1–:data:`MAX_WORDS` words) of the question and of the top :data:`NAMERS` first-hop
  passages that start and end with a capitalised word or a number; each looked up exactly against the
  index's link key (:class:`~hopsearch.service.attached.fieldmap.LinkKey`: ``title.keyword`` in hopsearch's
  own passages, an attached index's keyword field of its titles) in a ``terms`` filter that carries the
  query's filters (the caller's Scope included), so a passage the caller may not read is never a link. A
  key with a ``lowercase`` normalizer folds the names itself; titles and names are compared folded the
  same way here (``fold``) to tell which name found which passage.
- Ranking (:func:`ranked`): the passages the question names first (they are what it asks about), then
  the first hop in its order, each passage followed by the passages it names, cut to ``k``. Kept by the
  numbers (README, "Multi-hop retrieval").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hopsearch.service.retrieval.bodies import Source, filters_of
from hopsearch.service.types import Hit, Link, RetrievalQuery

#: How many first-hop passages are read for names.
NAMERS = 5
#: The longest name looked up, in words.
MAX_WORDS = 6
#: The most titles one lookup returns.
LOOKUP_SIZE = 50
#: Where the question's own names come from (``Link.source``).
QUESTION = "question"

_WORD = re.compile(r"[\w'&.\-]+|[(),:]")


def _named(word: str) -> bool:
    return word[:1].isupper() or word[:1].isdigit()


def spans(text: str, max_words: int = MAX_WORDS) -> list[str]:
    """The candidate names of ``text``: its n-grams that start and end with a capitalised word or a
    number, in the order they appear (first occurrence kept) — but not a number alone (a year names no
    paragraph it is about) nor one word the text also writes in lower case (a common word: "The", "Film")."""
    words = _WORD.findall(text)
    common = {word for word in words if word.islower()}
    out: dict[str, None] = {}
    for i, first in enumerate(words):
        if not _named(first):
            continue
        for j in range(i, min(i + max_words, len(words))):
            last = words[j].rstrip(".,")
            if not last or (j > i and words[j] in ",:"):
                break
            if _named(last) or words[j] == ")":
                out.setdefault(" ".join(words[i : j + 1]).replace("( ", "(").replace(" )", ")").rstrip(".,"), None)
    return [name for name in out if " " in name or not (name.isdigit() or name.lower() in common)]


@dataclass(frozen=True, slots=True)
class Candidates:
    """The names of one query: each name and the ids of what named it (:data:`QUESTION` or a passage id)."""

    named_by: Mapping[str, tuple[str, ...]]

    @property
    def names(self) -> list[str]:
        return list(self.named_by)


def _same(name: str) -> str:
    return name


def candidates(
    question: str, hits: Sequence[Hit], namers: int = NAMERS, fold: Callable[[str], str] = _same
) -> Candidates:
    """The names the question and the first ``namers`` hits name, each with what named it, the question
    first; a hit's own title (compared as ``fold`` folds both) is not a name it gives."""
    named_by: dict[str, list[str]] = {}
    for name in spans(question):
        named_by.setdefault(name, []).append(QUESTION)
    for hit in hits[:namers]:
        own = fold(hit.title)
        for name in spans(hit.text):
            if fold(name) != own:
                named_by.setdefault(name, []).append(hit.id)
    return Candidates({name: tuple(by) for name, by in named_by.items()})


def lookup_body(
    query: RetrievalQuery, names: Sequence[str], title_key: str, source: Source, size: int = LOOKUP_SIZE
) -> dict[str, Any]:
    """The search of the passages titled by one of ``names``, under the query's filters (its scope)."""
    return {
        "size": size,
        "track_total_hits": False,
        "query": {"bool": {"filter": [{"terms": {title_key: list(names)}}, *filters_of(query)]}},
        "_source": source,
    }


def ranked(
    first: Sequence[Hit], linked: Sequence[Hit], found: Candidates, k: int, fold: Callable[[str], str] = _same
) -> tuple[list[Hit], list[Link]]:
    """The first hop with the linked passages placed by what named them (:mod:`this module's docstring
    <hopsearch.service.retrieval.links>`; a name finds the passages whose title it is, both as ``fold``
    folds them), cut to ``k``, and the links that brought a passage in."""
    by_title: dict[str, list[Hit]] = {}
    for hit in linked:
        by_title.setdefault(fold(hit.title), []).append(hit)
    seen = {hit.id for hit in first}
    after: dict[str, list[tuple[str, Hit]]] = {}
    for name, namers in found.named_by.items():
        for hit in by_title.get(fold(name), []):
            if hit.id in seen:
                continue
            seen.add(hit.id)
            after.setdefault(namers[0], []).append((name, hit))
    out: list[Hit] = []
    links: list[Link] = []

    def add(namer: str, score: float) -> None:
        for name, hit in after.get(namer, []):
            out.append(Hit(hit.id, score, hit.title, hit.text, hit.source))
            links.append(Link(name, namer, hit.id))

    add(QUESTION, first[0].score if first else 0.0)
    for hit in first:
        out.append(hit)
        add(hit.id, hit.score)
    kept = {hit.id for hit in out[:k]}
    return out[:k], [link for link in links if link.passage in kept]
