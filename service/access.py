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
from urllib.parse import quote

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
#: How the values of an index's ACL field name principals: ``hopsearch`` (``user:…``, ``group:…``,
#: ``public``) or ``elastic-connector`` (:func:`connector_values`).
Identities = Literal["hopsearch", "elastic-connector"]


def principal(name: str) -> str:
    """Return a principal in its one spelling (NFKC, casefolded, trimmed): ``ＧＲＯＵＰ:ＨＲ`` is ``group:hr``."""
    return unicodedata.normalize("NFKC", name).casefold().strip()


#: What a key may be allowed to do.
ACTIONS = frozenset({"search", "ask", "outlines", "traces", "admin"})


@dataclass(frozen=True, slots=True)
class Caller:
    """The principals a request is made by. ``admin`` reads everything (admin keys, the CLI without
    ``--key``, an open loopback service); ``subject`` is whom a trace belongs to (an end-user token's
    subject, else the key's name) and ``key`` the API key's name, where known. ``indices`` are the index
    patterns and ``actions`` the actions the caller's key allows; ``namespace`` the outline namespace
    bound to the key (None: the service's). ``owner`` is whom the caller's traces and outline facts belong
    to, namespaced by who vouches for the subject (:func:`owner_id`); None: nobody (their traces are for
    admins alone)."""

    principals: frozenset[str] = frozenset()
    admin: bool = False
    subject: str | None = None
    key: str | None = None
    indices: tuple[str, ...] = ("*",)
    actions: frozenset[str] = ACTIONS
    namespace: str | None = None
    owner: str | None = None

    @classmethod
    def of(cls, names: Iterable[str], **fields: Any) -> Caller:
        return cls(principals=frozenset(principal(n) for n in names if n.strip()), **fields)

    def may(self, action: str) -> bool:
        return self.admin or action in self.actions

    def may_use(self, index: str) -> bool:
        """Whether the key's index patterns cover ``index`` (an admin's cover every index)."""
        return self.admin or any(fnmatch.fnmatchcase(index, pattern) for pattern in self.indices)

    def to_dict(self) -> dict[str, Any]:
        return {
            "principals": sorted(self.principals),
            "admin": self.admin,
            "subject": self.subject,
            "key": self.key,
            "owner": self.owner,
        }

    def owns(self, owner: object) -> bool:
        """Whether a trace or fact written by ``owner`` is this caller's (admins': every one). A record
        without an owner (written before owners were namespaced, or by an admin) is no non-admin's."""
        return self.admin or (self.owner is not None and owner == self.owner)


def owner_id(kind: str, by: str | None, subject: str | None = None) -> str:
    """Return an owner, namespaced by who vouches for the subject: ``key:<key>`` (the key itself),
    ``key:<key>/sub:<sub>`` (an end-user token the key signed; by key, not public key id, so rotation
    keeps the owner), ``idp:<issuer>/sub:<sub>`` (the subject exactly as the IdP issued it, unfolded) and
    ``cli/sub:<user>`` (the command line's ``--principal``). ``by`` is percent-encoded, so no key name or
    issuer can reach into the subject's part."""
    base = kind if by is None else f"{kind}:{quote(by, safe='')}"
    return base if subject is None else f"{base}/sub:{subject}"


#: The caller of the command line (without ``--key``) and of an open loopback service.
ADMIN = Caller(admin=True)


@dataclass(frozen=True, slots=True)
class AclRule:
    """Where an index holds the readers of each document (``field``; None: nowhere, every document is
    private to admins) and how its values name principals (``identities``). hopsearch's passages: ``acl``."""

    field: str | None = "acl"
    identities: Identities = "hopsearch"


@dataclass(frozen=True, slots=True)
class Scope:
    """What one request reads: the passages ``index`` (an index or alias), the request's validated filter
    clauses (:func:`~hopsearch.service.retrieval.filters.parse_filters`) and who asks."""

    index: str
    caller: Caller
    filters: tuple[Mapping[str, Any], ...] = ()
    #: How passages without ``acl`` read, and what non-admins get as scores (from the settings).
    acl_default: AclDefault = "private"
    scores: ScorePolicy = "scores"
    #: Where the index holds its readers (an attached index's mapped ACL field and identities).
    acl: AclRule = AclRule()

    def access(self) -> tuple[Mapping[str, Any], ...]:
        """Return the caller's access filter (none for an admin): in every body that reads or counts passages."""
        return () if self.caller.admin else (access_clause(self.caller, self.acl_default, self.acl),)

    def clauses(self) -> tuple[Mapping[str, Any], ...]:
        """Return the filter clauses every passages search of this scope carries: the request's and the access
        filter."""
        return (*self.filters, *self.access())


#: A clause that matches no document (what a non-admin reads of an index without readers).
NOTHING: dict[str, Any] = {"bool": {"must_not": [{"match_all": {}}]}}


def access_clause(caller: Caller, acl_default: AclDefault = "private", rule: AclRule = AclRule()) -> dict[str, Any]:
    """Return the passages ``caller`` may read: those whose ACL field (``rule``; hopsearch's ``acl``) names one of
    its principals or ``public``, and, where ``acl_default`` is ``public``, those without one (made before
    permissions, or loaded without). An index without that field at all reads the same way: ``terms`` on an
    unmapped field matches nothing, ``exists`` on it nothing either; where ``rule`` names no field, nothing."""
    if rule.field is None:
        return NOTHING
    # ``private`` is no principal: a caller said to have it still does not read admins' passages
    names = sorted((caller.principals - {PRIVATE}) | {PUBLIC})
    named: dict[str, Any]
    if rule.identities == "elastic-connector":
        values = connector_values(names)
        # connectors keep e-mail addresses as the source system spells them (``email:Alice@Corp.com``): those
        # are compared case-insensitively (an automaton per value: ~4x the cost of ``terms``, so ids are not)
        emails = [v for v in values if v.startswith("email:")]
        exact = [v for v in values if not v.startswith("email:")]
        should: list[dict[str, Any]] = [{"term": {rule.field: {"value": v, "case_insensitive": True}}} for v in emails]
        if exact:
            should.append({"terms": {rule.field: exact}})
        named = {"bool": {"should": should, "minimum_should_match": 1}} if should else NOTHING
    else:
        named = {"terms": {rule.field: names}}
    if acl_default == "private":
        return named
    unset = {"bool": {"must_not": [{"exists": {"field": rule.field}}]}}
    return {"bool": {"should": [named, unset], "minimum_should_match": 1}}


#: Elastic connectors' prefixes of ``_allow_access_control`` values, by the principal kind they name.
CONNECTOR_PREFIXES = {"user": ("email:", "user_id:", "user:", "account_id:"), "group": ("group:", "group_id:", "role:")}


def connector_principal(value: str) -> str:
    """Return the principal an Elastic connector's ``_allow_access_control`` value names: ``email:x``,
    ``user_id:x``, ``user:x``, ``account_id:x`` → ``user:x``; ``group:x``, ``group_id:x``, ``role:x`` →
    ``group:x``; a bare value (a group id, as several connectors write them) → ``group:<value>``."""
    spelt = principal(value)
    for kind, prefixes in CONNECTOR_PREFIXES.items():
        for prefix in prefixes:
            if spelt.startswith(prefix) and len(spelt) > len(prefix):
                return f"{kind}:{spelt[len(prefix) :]}"
    return f"group:{spelt}"


def connector_values(principals: Iterable[str]) -> list[str]:
    """Return the ``_allow_access_control`` values that name these principals (:func:`connector_principal`,
    inverted): every prefix of their kind, and a group's bare id. ``public`` names none."""
    values: set[str] = set()
    for name in principals:
        kind, sep, rest = name.partition(":")
        if not sep or not rest or kind not in CONNECTOR_PREFIXES:
            continue
        values.update(f"{prefix}{rest}" for prefix in CONNECTOR_PREFIXES[kind])
        if kind == "group" and not any(rest.startswith(p) for ps in CONNECTOR_PREFIXES.values() for p in ps):
            values.add(rest)
    return sorted(values)


_KINDS = ("user", "group")
_MAX_PRINCIPAL = 256


def document_principal(name: str) -> str:
    """Return a principal of a passage's ``acl`` in its one spelling (:func:`principal`), or :data:`PRIVATE`;
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
    """Return the ``acl`` of a passage from principals (each checked by :func:`document_principal`), sorted and
    without repeats; :data:`PRIVATE` stands alone. ``ValueError`` naming the bad one; an empty list too (it
    would read as ``acl_default``: say ``private`` for admins only)."""
    acl = sorted({document_principal(name) for name in names})
    if not acl:
        raise ValueError("no principals: name some, or private (admins only)")
    if PRIVATE in acl and len(acl) > 1:
        raise ValueError("private (admins only) cannot be combined with principals")
    return acl
