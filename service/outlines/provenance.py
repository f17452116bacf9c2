"""Question-derived text: what of a fact, an entity name or an alias came from the asker's question rather
than from the passages of its lineage.

A word of ``text`` is question-derived where it is in the question and in none of the passages the text
was drawn from (:func:`question_words`). Such text is kept with its asker: the fact or alias is readable
by its namespaced owner alone (:func:`owner_readers`: the principal ``owner:<owner>`` that only that
caller's :meth:`~hopsearch.service.outlines.lineage.OutlineReader.principals` name), while a fact whose
words all come from readable passages stays shared (DESIGN §14). Words are compared NFKC-folded and
casefolded; latin words of fewer than three characters are ignored and a plural ``s`` is not a new word;
CJK runs are compared as character bigrams.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

#: The reader value of a fact or alias kept with its asker (never a principal a key, token or IdP names).
OWNER_PREFIX = "owner:"

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\uff66-\uff9f]")


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def words(text: str) -> set[str]:
    """Return the comparable words of ``text``: latin words (3+ characters, a final ``s`` dropped) and CJK bigrams."""
    out: set[str] = set()
    for token in _WORD.findall(_fold(text)):
        if _CJK.search(token):
            out.update(token[i : i + 2] for i in range(max(1, len(token) - 1)))
        elif len(token) >= 3 or token.isdigit():
            out.add(token[:-1] if len(token) > 3 and token.endswith("s") else token)
    return out


def question_words(text: str, question: str, passages: Iterable[str]) -> set[str]:
    """Return the words of ``text`` found in ``question`` and in none of ``passages``."""
    found = words(text) & words(question)
    if not found:
        return found
    for passage in passages:
        found -= words(passage)
        if not found:
            break
    return found


def owner_readers(owner: str | None) -> tuple[str, ...]:
    """Return the readers of text kept with ``owner``: that owner alone (none: admins alone)."""
    return (f"{OWNER_PREFIX}{owner}",) if owner else ()
