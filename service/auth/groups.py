"""Users' groups kept in Elasticsearch, so that end-user tokens stay small.

A company's employees belong to hundreds of groups; a token carries at most ``token_max_principals``
principals. The rest live in ``<prefix>-groups`` (``es_mappings/groups.json``), one document per user,
``_id`` the user's name in its one spelling (:func:`user_key`) and ``groups`` its ``group:<name>``
principals: resolving a user's groups is one real-time GET. Both token verifiers
(:mod:`hopsearch.service.auth.tokens`) add them to the caller's principals server-side. An admin manages
them with ``hopsearch groups``; the index is one of hopsearch's own, closed to proxied requests of
non-admins. A service process reuses a user's groups for ``groups_cache_s`` seconds.

Writes are read-merge-write, conditional on the version read (as outlines are), so two admins adding
groups to one user at once lose neither's.
"""

from __future__ import annotations

import csv
import io
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from hopsearch.service.access import document_principal, principal
from hopsearch.service.errors import IndexMissing, InputError, VersionConflict
from hopsearch.service.store import Store, load_template

log = logging.getLogger(__name__)

#: Conditional writes of one user's groups before a change gives up.
WRITE_ATTEMPTS = 16
#: Users a listing reads per page.
PAGE = 1000
#: Users whose groups one process remembers (emptied when full).
CACHE_SIZE = 10_000


class GroupLookup(Protocol):
    """The ``group:<name>`` principals stored for a user (an empty set for a user with none)."""

    async def groups_of(self, user: str) -> frozenset[str]: ...


def user_key(user: str) -> str:
    """Return a user's name in its one spelling, as the groups index keys it: ``ＡＬＩＣＥ`` and ``user:alice``
    are ``alice``. ``InputError`` for a name that is no user principal's."""
    value = principal(user)
    value = value.removeprefix("user:")
    try:
        document_principal(f"user:{value}")
    except ValueError as exc:
        raise InputError(str(exc), source="user") from exc
    return value


def stored_groups(user: str, values: Iterable[object]) -> frozenset[str]:
    """Return the groups a groups document holds, as principals: a value written around ``hopsearch groups`` that
    is no ``group:<name>`` a passage's ``acl`` may hold (a wildcard ``*``, a comma) is dropped, logged."""
    kept: set[str] = set()
    for value in values:
        try:
            name = document_principal(str(value))
        except ValueError as exc:
            log.warning("groups of [%s]: stored value dropped: %s", user, exc)
            continue
        if name.startswith("group:"):
            kept.add(name)
        else:
            log.warning("groups of [%s]: stored value %r dropped: not a group:<name>", user, name)
    return frozenset(kept)


def group_principal(group: str) -> str:
    """``hr``, ``group:HR`` and ``ｇｒｏｕｐ：ｈｒ`` are all ``group:hr``; ``InputError`` for a bad name."""
    value = principal(group).removeprefix("group:")
    try:
        return document_principal(f"group:{value}")
    except ValueError as exc:
        raise InputError(str(exc), source="group") from exc


def parse_csv(text: str) -> dict[str, set[str]]:
    """Return the groups of each user a CSV names (``hopsearch groups import``): a header line ``user,group``
    (either order, more columns ignored), then one ``user,group`` pair per line; blank lines skipped. An
    :class:`InputError` naming the line (from 1, the header's) for a missing column, an empty cell or a
    name no principal can hold."""
    rows = csv.reader(io.StringIO(text.removeprefix("\ufeff")))
    header = [cell.strip().casefold() for cell in next(rows, [])]
    if "user" not in header or "group" not in header:
        raise InputError(f"line 1: the header must name the columns user and group (found: {', '.join(header)})")
    at_user, at_group = header.index("user"), header.index("group")
    found: dict[str, set[str]] = {}
    for number, row in enumerate(rows, start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) <= max(at_user, at_group):
            raise InputError(f"line {number}: {len(row)} columns, the header names {len(header)}")
        user, group = row[at_user].strip(), row[at_group].strip()
        if not user or not group:
            raise InputError(f"line {number}: the {'user' if not user else 'group'} is empty")
        try:
            found.setdefault(user_key(user), set()).add(group_principal(group))
        except InputError as exc:
            raise InputError(f"line {number}: {exc}") from None
    return found


@dataclass(frozen=True, slots=True)
class UserGroups:
    user: str
    groups: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"user": self.user, "groups": list(self.groups)}


class EsGroups:
    """The groups index of a :class:`Store`: the :class:`GroupLookup` of the verifiers and what
    ``hopsearch groups`` changes."""

    def __init__(self, store: Store, *, cache_s: float, index: str | None = None) -> None:
        self.store = store
        self.index = index or store.names.groups
        #: seconds a user's groups are reused (``groups_cache_s``)
        self.cache_s = cache_s
        self._known: dict[str, tuple[float, frozenset[str]]] = {}

    async def ensure(self) -> None:
        """Create the groups index where it is missing (a write never auto-creates it)."""
        if not await self.store.exists(self.index):
            await self.store._create(self.index, load_template("groups"))

    async def groups_of(self, user: str) -> frozenset[str]:
        try:
            key = user_key(user)
        except InputError:
            return frozenset()  # a subject no user principal can name has no stored groups
        now = time.monotonic()
        known = self._known.get(key)
        if known is not None and known[0] > now:
            return known[1]
        found = await self.store.get_document(self.index, key)
        groups = stored_groups(key, (found or {}).get("groups") or ())
        if self.cache_s > 0:
            if len(self._known) >= CACHE_SIZE:
                self._known.clear()
            self._known[key] = (now + self.cache_s, groups)
        return groups

    async def show(self, user: str) -> UserGroups:
        key = user_key(user)
        found = await self.store.get_document(self.index, key)
        return UserGroups(key, tuple(sorted(str(g) for g in (found or {}).get("groups") or ())))

    async def add(self, user: str, groups: Iterable[str]) -> UserGroups:
        """Add ``groups`` to the user's (creating its document); returns them all."""
        wanted = {group_principal(g) for g in groups}
        return await self._change(user_key(user), lambda held: held | wanted)

    async def remove(self, user: str, groups: Iterable[str]) -> UserGroups:
        """Take ``groups`` from the user's (its document goes with the last one); returns those left."""
        gone = {group_principal(g) for g in groups}
        return await self._change(user_key(user), lambda held: held - gone)

    async def put(self, user: str, groups: Iterable[str]) -> UserGroups:
        """Set the user's groups to exactly ``groups`` (none: the user is forgotten)."""
        wanted = {group_principal(g) for g in groups}
        return await self._change(user_key(user), lambda _: set(wanted))

    async def import_groups(self, found: dict[str, set[str]], *, replace: bool = False) -> list[UserGroups]:
        """Each user's groups of a parsed CSV (:func:`parse_csv`) added to those stored (``replace``: set to
        exactly those)."""
        done = []
        for user, groups in sorted(found.items()):
            done.append(await (self.put(user, groups) if replace else self.add(user, groups)))
        return done

    async def _change(self, key: str, change: Callable[[set[str]], set[str]]) -> UserGroups:
        await self.ensure()
        for _ in range(WRITE_ATTEMPTS):
            stored = await self.store.get_versioned(self.index, key)
            held = set(stored[0].get("groups") or ()) if stored else set()
            result = sorted(change(held))
            doc = self._doc(key, result)
            try:
                if stored is None:
                    if result:
                        await self.store.put_document(self.index, key, doc, refresh=True, create=True)
                elif result:
                    _, seq_no, term = stored
                    await self.store.put_document(
                        self.index, key, doc, refresh=True, if_seq_no=seq_no, if_primary_term=term
                    )
                else:
                    await self._delete(key, stored[1], stored[2])
            except VersionConflict:
                continue
            self._known.pop(key, None)
            return UserGroups(key, tuple(result))
        raise VersionConflict(
            f"the groups of user {key!r} kept changing: gave up after {WRITE_ATTEMPTS} conditional writes",
            details={"index": self.index, "id": key},
        )

    @staticmethod
    def _doc(key: str, groups: list[str]) -> dict[str, Any]:
        return {"user": key, "groups": groups, "updated_at": datetime.now(UTC).isoformat()}

    async def _delete(self, key: str, seq_no: int, term: int) -> None:
        what = f"deleting the groups of [{key}]"
        await self.store.delete_document(
            self.index, key, if_seq_no=seq_no, if_primary_term=term, refresh=True, what=what
        )

    async def users(self) -> list[UserGroups]:
        """Every user with stored groups, by name."""
        found: list[UserGroups] = []
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {"size": PAGE, "sort": [{"user": "asc"}], "query": {"match_all": {}}}
            if after is not None:
                body["search_after"] = after
            try:
                hits = (await self.store.search(self.index, body))["hits"]["hits"]
            except IndexMissing:
                return found
            found += [UserGroups(str(h["_source"]["user"]), tuple(h["_source"].get("groups") or ())) for h in hits]
            if len(hits) < PAGE:
                return found
            after = hits[-1]["sort"]
