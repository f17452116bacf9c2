"""Who may use an outline fact: its lineage, the principals it was readable by when written, and the check
against the passages' current ACLs when it is used.

A fact's **lineage** is every passage it was derived from, each as ``<index>/<id>``: the passages of its
hits and every passage in the lineage of the facts (and aliases) its prompt held, transitively (DualRAG
keeps the run's lineage: everything that entered its prompts). Its **readers** are the principals that
could read every lineage passage when it was written (the intersection of their ``acl``; ``public`` where
everyone could): a filter the outline queries carry, so a search ranks and counts only facts a caller
may be able to use. Whether it may is decided at use, in ONE ``_msearch`` per lookup (an ``ids`` query
with the caller's access filter per index): a fact is usable when every lineage passage still exists
and the caller may read it now, in an index the caller's key may use. A fact without lineage (written
before lineage existed) is usable by admins only. A fact shows its question, trace id and writer to
admins and to its own writer only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hopsearch.service.access import ADMIN, PRIVATE, PUBLIC, AclDefault, Caller, access_clause
from hopsearch.service.errors import AuthorizationError
from hopsearch.service.outlines.provenance import OWNER_PREFIX, owner_readers


def source(index: str, doc_id: str) -> str:
    """Return a lineage entry: the passage ``doc_id`` of ``index`` (an index name never holds ``/``)."""
    return f"{index}/{doc_id}"


def split_source(entry: str) -> tuple[str, str]:
    index, _, doc_id = entry.partition("/")
    return index, doc_id


@dataclass(frozen=True, slots=True)
class OutlineReader:
    """Who reads outlines, and how passages without ``acl`` read (the ``acl_default`` setting). ``index`` and
    ``filters``: where a question's reuse must stay (every lineage passage in that index, matching them)."""

    caller: Caller = ADMIN
    acl_default: AclDefault = "private"
    index: str | None = None
    filters: tuple[Mapping[str, Any], ...] = ()

    def principals(self) -> list[str]:
        """Return the reader values a fact must name one of to be shown to this caller: its principals, ``public``
        and ``owner:<its owner>`` (text kept with its asker, :mod:`~.provenance`); an ``owner:`` value the
        caller's principals name is never its own."""
        names = {p for p in self.caller.principals if not p.startswith(OWNER_PREFIX)} - {PRIVATE}
        return sorted(names | {PUBLIC} | set(owner_readers(self.caller.owner)))


#: The reader of the command line and of internal maintenance: admin, every index.
ADMIN_READER = OutlineReader()


def readers_of(acls: Iterable[Sequence[str] | None], acl_default: AclDefault) -> tuple[str, ...]:
    """Return the principals that may read every passage whose ``acl`` values are ``acls`` (``None``: no ``acl``;
    a missing passage passes ``("private",)``): ``("public",)`` where everyone may, ``()`` admins only."""
    everyone = True
    common: set[str] = set()
    for acl in acls:
        if acl is None:
            values: set[str] | None = None if acl_default == "public" else set()
        elif PUBLIC in acl:
            values = None
        else:
            values = {a for a in acl if a != PRIVATE}
        if values is None:
            continue
        common = values if everyone else common & values
        everyone = False
    return (PUBLIC,) if everyone else tuple(sorted(common))


def may_read(readers: Sequence[str] | None, reader: OutlineReader) -> bool:
    """Apply the prefilter: tell whether a fact written readable by ``readers`` may be shown to ``reader`` (admins:
    any)."""
    if reader.caller.admin:
        return True
    return readers is not None and bool(set(readers) & set(reader.principals()))


def readers_clause(path: str, reader: OutlineReader) -> dict[str, Any]:
    """Return the query filter of :func:`may_read` on the nested ``path`` (``facts`` or ``alias_lineage``)."""
    return {"terms": {f"{path}.readers": reader.principals()}}


class SourceReads(Protocol):
    """The passages reads the check needs (a :class:`~hopsearch.service.store.Store`)."""

    async def msearch(
        self, searches: Sequence[tuple[str, Mapping[str, Any]]], *, keep_errors: bool = False
    ) -> list[dict[str, Any]]: ...

    async def get_sources(self, index: str, ids: Sequence[str], fields: Sequence[str]) -> dict[str, dict[str, Any]]: ...


def _by_index(entries: Iterable[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for entry in sorted(set(entries)):
        index, doc_id = split_source(entry)
        if index and doc_id:
            grouped.setdefault(index, []).append(doc_id)
    return grouped


async def readable_sources(store: SourceReads, reader: OutlineReader, entries: Iterable[str]) -> frozenset[str]:
    """Return the lineage entries ``reader`` may read now: ONE ``_msearch``, per index an ``ids`` query under the
    caller's access filter (and, for an index the reader's request is bound to, its filters). An entry in an
    index the key may not use, that no longer exists, or in a request bound to another index, is not."""
    grouped = _by_index(entries)
    searches: list[tuple[str, dict[str, Any]]] = []
    for index, ids in grouped.items():
        if not reader.caller.may_use(index):
            continue
        if reader.filters and index != reader.index:
            continue
        clauses: list[Mapping[str, Any]] = [{"ids": {"values": ids}}]
        if index == reader.index:
            clauses += list(reader.filters)
        if not reader.caller.admin:
            clauses.append(access_clause(reader.caller, reader.acl_default))
        body = {"size": len(ids), "_source": False, "query": {"bool": {"filter": clauses}}}
        searches.append((index, body))
    responses = await store.msearch(searches, keep_errors=True)
    found: set[str] = set()
    for (index, _), response in zip(searches, responses, strict=True):
        for hit in (response.get("hits") or {}).get("hits") or []:
            found.add(source(index, str(hit["_id"])))
    return frozenset(found)


async def source_acls(store: SourceReads, entries: Iterable[str]) -> dict[str, Sequence[str] | None]:
    """Return the current ``acl`` of each lineage entry (``None``: the passage has none; a missing passage reads
    ``("private",)``): one ``_mget`` per index, concurrently (no search: a question's retrieval stays its
    one ``_msearch``)."""
    grouped = _by_index(entries)
    found = await asyncio.gather(*(store.get_sources(index, ids, ["acl"]) for index, ids in grouped.items()))
    acls: dict[str, Sequence[str] | None] = {}
    for (index, ids), sources in zip(grouped.items(), found, strict=True):
        for doc_id in ids:
            if doc_id not in sources:
                acls[source(index, doc_id)] = (PRIVATE,)
                continue
            value = sources[doc_id].get("acl")
            values = value if isinstance(value, list) else [value]
            acls[source(index, doc_id)] = None if value is None else tuple(str(v) for v in values)
    return acls


def bound_namespace(caller: Caller, asked: str | None, default: str) -> str | None:
    """Return the outline namespace ``caller`` reads and writes: the one bound to its key (``Caller.namespace``,
    else the service's ``default``). Only an admin may name another (``asked``; an admin naming none: None,
    every namespace where a read allows it); a non-admin naming another gets 403."""
    if caller.admin:
        return asked
    own = caller.namespace or default
    if asked is not None and asked != own:
        raise AuthorizationError(
            "only admins may name an outline namespace: this key's outlines are its own namespace's",
            details={"field": "namespace"},
        )
    return own


def reader_for(caller: Caller, acl_default: AclDefault) -> OutlineReader:
    """Return the reader of the outline routes (every index the caller's key may use)."""
    return OutlineReader(caller, acl_default)
