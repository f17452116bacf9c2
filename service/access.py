"""Who asks, and what a request may read: the :class:`Caller` and the :class:`Scope` every read of passages
is bound to.

A scope travels as an argument from the front end to every Elasticsearch body that reads passages
(:mod:`hopsearch.service.retrieval`): the index, the request's validated filters and the caller, whose
access filter the planner adds once. Nothing of it rides on a context variable or a module global.
"""

from __future__ import annotations

import fnmatch
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: How passages without ``acl`` read (the ``acl_default`` setting): ``private``, admins only; ``public``,
#: everyone. Decided when a search runs, not when a passage is loaded.
AclDefault = Literal["private", "public"]
#: What non-admins get as ``_score`` (the ``api_non_admin_scores`` setting): Elasticsearch's scores, or
#: ``1 / rank`` (BM25 statistics count passages a caller cannot read: scores can hint at them).
ScorePolicy = Literal["scores", "ranks"]
#: The principal every caller has: a passage whose ``acl`` names it is readable by everyone.
PUBLIC = "public"
#: The one ``acl`` value that is no principal: admins only, whatever ``acl_default`` says.
PRIVATE = "private"


def principal(name: str) -> str:
    """A principal in its one spelling (NFKC, casefolded, trimmed): ``ＧＲＯＵＰ:ＨＲ`` is ``group:hr``."""
    return unicodedata.normalize("NFKC", name).casefold().strip()


#: What a key may be allowed to do.
ACTIONS = frozenset({"search", "ask", "outlines", "traces", "admin"})


@dataclass(frozen=True, slots=True)
class Caller:
    """The principals a request is made by. ``admin`` reads everything (admin keys, the CLI without
    ``--key``, an open loopback service); ``subject`` is whom a trace belongs to (an end-user token's
    subject, else the key's name) and ``key`` the API key's name, where known. ``indices`` are the index
    patterns and ``actions`` the actions the caller's key allows; ``namespace`` the outline namespace
    bound to the key (None: the service's)."""

    principals: frozenset[str] = frozenset()
    admin: bool = False
    subject: str | None = None
    key: str | None = None
    indices: tuple[str, ...] = ("*",)
    actions: frozenset[str] = ACTIONS
    namespace: str | None = None

    @classmethod
    def of(cls, names: Iterable[str], **fields: Any) -> Caller:
        return cls(principals=frozenset(principal(n) for n in names if n.strip()), **fields)

    def may(self, action: str) -> bool:
        return self.admin or action in self.actions

    def may_use(self, index: str) -> bool:
        """Whether the key's index patterns cover ``index`` (an admin's cover every index)."""
        return self.admin or any(fnmatch.fnmatchcase(index, pattern) for pattern in self.indices)

    def to_dict(self) -> dict[str, Any]:
        return {"principals": sorted(self.principals), "admin": self.admin, "subject": self.subject, "key": self.key}


#: The caller of the command line (without ``--key``) and of an open loopback service.
ADMIN = Caller(admin=True)


@dataclass(frozen=True, slots=True)
class Scope:
    """What one request reads: the passages ``index`` (an index or alias), the request's validated filter
    clauses (:func:`~hopsearch.service.filters.parse_filters`) and who asks."""

    index: str
    caller: Caller
    filters: tuple[Mapping[str, Any], ...] = ()
    #: How passages without ``acl`` read, and what non-admins get as scores (from the settings).
    acl_default: AclDefault = "private"
    scores: ScorePolicy = "scores"

    def access(self) -> tuple[Mapping[str, Any], ...]:
        """The caller's access filter (none for an admin): in every body that reads or counts passages."""
        return () if self.caller.admin else (access_clause(self.caller, self.acl_default),)

    def clauses(self) -> tuple[Mapping[str, Any], ...]:
        """The filter clauses every passages search of this scope carries: the request's and the access filter."""
        return (*self.filters, *self.access())


def access_clause(caller: Caller, acl_default: AclDefault = "private") -> dict[str, Any]:
    """The passages ``caller`` may read: those whose ``acl`` names one of its principals or ``public``, and,
    where ``acl_default`` is ``public``, those without ``acl`` (made before permissions, or loaded without).
    An index without an ``acl`` field at all reads the same way: ``terms`` on an unmapped field matches
    nothing, ``exists`` on it nothing either."""
    # ``private`` is no principal: a caller said to have it still does not read admins' passages
    named: dict[str, Any] = {"terms": {"acl": sorted((caller.principals - {PRIVATE}) | {PUBLIC})}}
    if acl_default == "private":
        return named
    unset = {"bool": {"must_not": [{"exists": {"field": "acl"}}]}}
    return {"bool": {"should": [named, unset], "minimum_should_match": 1}}


_KINDS = ("user", "group")
_MAX_PRINCIPAL = 256


def document_principal(name: str) -> str:
    """A principal of a passage's ``acl`` in its one spelling (:func:`principal`), or :data:`PRIVATE`;
    ``ValueError`` saying what is wrong with any other: ``public``, ``user:<name>`` or ``group:<name>``, a
    name without control characters, commas or wildcards (a passage names principals, not patterns)."""
    if not isinstance(name, str):
        raise ValueError(f"a principal is a string, not {type(name).__name__} {name!r}")
    value = principal(name)
    if value in (PUBLIC, PRIVATE):
        return value
    kind, sep, rest = value.partition(":")
    if not sep or kind not in _KINDS:
        raise ValueError(f"bad principal {name!r}: public, private, user:<name> or group:<name>")
    if not rest.strip() or rest != rest.strip():
        raise ValueError(f"bad principal {name!r}: the name after {kind}: is empty or padded")
    if len(value) > _MAX_PRINCIPAL:
        raise ValueError(f"bad principal {name[:40]!r}…: longer than {_MAX_PRINCIPAL} characters")
    bad = [c for c in rest if c in ",*?[]" or unicodedata.category(c).startswith("C")]
    if bad:
        raise ValueError(f"bad principal {name!r}: {bad[0]!r} is not allowed in a name")
    return value


def document_acl(names: Iterable[str]) -> list[str]:
    """The ``acl`` of a passage from principals (each checked by :func:`document_principal`), sorted and
    without repeats; :data:`PRIVATE` stands alone. ``ValueError`` naming the bad one; an empty list too (it
    would read as ``acl_default``: say ``private`` for admins only)."""
    acl = sorted({document_principal(name) for name in names})
    if not acl:
        raise ValueError("no principals: name some, or private (admins only)")
    if PRIVATE in acl and len(acl) > 1:
        raise ValueError("private (admins only) cannot be combined with principals")
    return acl
