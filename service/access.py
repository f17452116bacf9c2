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
from typing import Any


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

    def access(self) -> tuple[Mapping[str, Any], ...]:
        """The caller's access filter (none for an admin): in every body that reads or counts passages."""
        return () if self.caller.admin else (access_clause(self.caller),)

    def clauses(self) -> tuple[Mapping[str, Any], ...]:
        """The filter clauses every passages search of this scope carries: the request's and the access filter."""
        return (*self.filters, *self.access())


def access_clause(caller: Caller) -> dict[str, Any]:
    """The passages ``caller`` may read: those whose ``acl`` names one of its principals."""
    return {"terms": {"acl": sorted(caller.principals)}}
