"""The proxy's policy on hopsearch's own indices: a caller that is not an admin never reaches one.

hopsearch enforces document permissions in the queries it builds (``_retrieve``, ``_ask``); a search
passed straight to the cluster carries none, and on a Basic licence a cluster user with ``read`` reads
every document. So the passages (and their versions), outlines, traces, keys and groups — every index
under the prefix — and any other index :class:`Protected` lists (issue 30's attached indices) are
closed to proxied requests of non-admins, decided on every index expression the request holds
(:func:`~hopsearch.service.api.proxy.esnames.names_of`), each part on its own:

- ``_all``, remote-cluster and selector names (``a:b``, ``logs::failures``) and empty names: refused;
- ``-x`` exclusions are skipped (what the request reads is at most what its other parts name, so
  ``*,-hopsearch-*`` is refused: ``*`` reaches hopsearch's indices); a target with nothing else is refused;
- date math (``<logs-{now/d}>``) is read as the pattern of every date (``logs-*``), so the day the
  cluster evaluates it on does not matter;
- a name or pattern that could match a protected pattern (compared as patterns, case folded: ``*``,
  ``HOPSEARCH-*``, ``*-passages``) is refused without asking the cluster;
- anything else is resolved against the cluster with the service's own credentials (every index,
  hidden and closed ones too): an alias that points at a protected index, an index with a protected
  alias, a data stream's backing index are refused.

A remembered answer may only ever be narrower than the truth: answers (and the attached-index list) are
kept :data:`RESOLVE_TTL_S`, but only to refuse at once — a name that resolved to nothing protected a
moment ago (an alias may have been made over a managed index since, an index added to an alias, an index
attached) is passed only on a fresh ``_resolve/index`` and a fresh attached list, asked once per request;
a request naming more than :data:`MAX_RESOLVED_PARTS` index expressions is refused, so one request
causes at most that many fresh resolutions (the key's request limits bound the rest), and concurrent
requests for one expression share one resolution.

Admins pass untouched (the allow-list still applies to them; the cluster decides with their credentials).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from hopsearch.service.access import Caller
from hopsearch.service.api.proxy.esnames import ProxiedCall, names_of, refusal
from hopsearch.service.errors import AuthorizationError, StoreError, StoreUnavailable

log = logging.getLogger("hopsearch.audit")
#: Seconds a resolution is reused: aliases change rarely and only by admins; a name's answer may be a
#: little stale, never wider than what it was a moment ago.
RESOLVE_TTL_S = 2.0
#: Expressions whose resolution is remembered (the memory is emptied when full).
RESOLVE_CACHE = 4096
#: Index expressions one proxied request may name (each may cost a fresh resolution).
MAX_RESOLVED_PARTS = 64


class Protected(Protocol):
    """The index patterns (``*`` wildcards) no proxied request of a non-admin may reach: the seam where
    other sources join hopsearch's own (issue 30's attached indices, recorded in Elasticsearch)."""

    async def patterns(self, *, fresh: bool = False) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class PrefixIndices:
    """Every index hopsearch manages: the prefix itself, everything under ``<prefix>-``, and the
    backing indices of data streams of those names."""

    prefix: str

    async def patterns(self, *, fresh: bool = False) -> tuple[str, ...]:
        return (self.prefix, f"{self.prefix}-*", f".ds-{self.prefix}-*")


class WithAttached:
    """hopsearch's own indices and the attached ones (issue 30: hopsearch enforces their ACLs; a proxied
    search would not), whose names are read from the store and kept :data:`RESOLVE_TTL_S`."""

    def __init__(
        self, own: Protected, attached: Callable[[], Awaitable[Iterable[str]]], ttl: float = RESOLVE_TTL_S
    ) -> None:
        self.own = own
        self.attached = attached
        self.ttl = ttl
        self._kept: tuple[float, tuple[str, ...]] | None = None

    async def patterns(self, *, fresh: bool = False) -> tuple[str, ...]:
        """Return the protected patterns; ``fresh``: the attached list read now (a kept list may lack an index
        attached since, so it may only refuse)."""
        now = time.monotonic()
        if fresh or self._kept is None or now - self._kept[0] >= self.ttl:
            self._kept = (now, tuple(sorted(await self.attached())))
        return (*await self.own.patterns(), *self._kept[1])


class Resolver(Protocol):
    """Every name one index name or pattern reaches on the cluster (``fresh``: asked now, never remembered)."""

    async def names(self, expression: str, *, fresh: bool = False) -> frozenset[str]: ...


class EsResolver:
    """``_resolve/index`` with the service's own credentials, remembered for :data:`RESOLVE_TTL_S`."""

    def __init__(self, resolve: Callable[[str], Awaitable[dict[str, Any]]], ttl: float = RESOLVE_TTL_S) -> None:
        self._resolve = resolve
        self._ttl = ttl
        self._known: dict[str, tuple[float, frozenset[str]]] = {}
        self._asking: dict[str, asyncio.Future[frozenset[str]]] = {}

    async def names(self, expression: str, *, fresh: bool = False) -> frozenset[str]:
        now = time.monotonic()
        known = self._known.get(expression)
        if not fresh and known is not None and known[0] > now:
            return known[1]
        asking = self._asking.get(expression)
        if asking is not None:  # one resolution for every request asking at once
            return await asyncio.shield(asking)
        future: asyncio.Future[frozenset[str]] = asyncio.get_running_loop().create_future()
        self._asking[expression] = future
        try:
            names = reached(await self._resolve(expression))
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            self._asking.pop(expression, None)
        future.set_result(names)
        if len(self._known) >= RESOLVE_CACHE:
            self._known.clear()
        self._known[expression] = (time.monotonic() + self._ttl, names)
        return names


def reached(answer: dict[str, Any]) -> frozenset[str]:
    """Every name in a ``_resolve/index`` answer: indices with their aliases and data stream, aliases
    with their indices, data streams with their backing indices."""
    names: set[str] = set()
    for index in answer.get("indices", ()):
        names.update([index.get("name", ""), *index.get("aliases", ()), index.get("data_stream", "")])
    for alias in answer.get("aliases", ()):
        names.update([alias.get("name", ""), *alias.get("indices", ())])
    for stream in answer.get("data_streams", ()):
        names.update([stream.get("name", ""), *stream.get("backing_indices", ())])
    names.discard("")
    return frozenset(names)


def overlap(a: str, b: str) -> bool:
    """Whether some name matches both patterns (``*`` any run of characters, the only wildcard of index
    patterns; a plain name is a pattern without one), case folded: ``hop*`` and ``*-passages`` do,
    ``logs-*`` and ``hopsearch-*`` do not."""
    a, b = a.casefold(), b.casefold()
    reach = {(0, 0)}  # pairs of positions both patterns can be at after reading the same text
    seen = set(reach)
    while reach:
        i, j = reach.pop()
        if i == len(a) and j == len(b):
            return True
        steps = []
        if i < len(a) and a[i] == "*":
            steps += [(i + 1, j)] + ([(i, j + 1)] if j < len(b) else [])
        if j < len(b) and b[j] == "*":
            steps += [(i, j + 1)] + ([(i + 1, j)] if i < len(a) else [])
        if i < len(a) and j < len(b) and a[i] == b[j] != "*":
            steps.append((i + 1, j + 1))
        for step in steps:
            if step not in seen:
                seen.add(step)
                reach.add(step)
    return False


def date_math_pattern(part: str) -> str | None:
    """``<logs-{now/d{yyyy.MM.dd}}>`` as the pattern every date gives (``logs-*``); None where it is not
    date math hopsearch reads (an escaped brace, unbalanced braces)."""
    inner = part[1:-1]
    if "\\" in inner:
        return None
    out, depth = [], 0
    for char in inner:
        if char == "{":
            if depth == 0:
                out.append("*")
            depth += 1
        elif char == "}":
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0:
            out.append(char)
    return "".join(out) if depth == 0 else None


class ManagedIndices:
    """Refuses (403, before anything reaches the cluster) a non-admin's proxied request that names a
    protected index anywhere; see the module's docstring."""

    def __init__(self, protected: Protected, resolver: Resolver) -> None:
        self.protected = protected
        self.resolver = resolver

    async def check(self, call: ProxiedCall, caller: Caller) -> None:
        if caller.admin:
            return
        try:
            parts = self._parts(call, caller)
            await self._decide_all(call, parts, fresh=False)  # remembered answers: a refusal at once
            await self._decide_all(call, parts, fresh=True)  # a pass only on answers asked now
        except AuthorizationError as exc:
            log.info(
                "proxy refused",
                extra={
                    "event": "proxy_refused",
                    "subject": caller.subject,
                    "key": caller.key,
                    "owner": caller.owner,
                    "reason": str(exc),
                },
            )
            raise

    def _parts(self, call: ProxiedCall, caller: Caller) -> list[tuple[str, str]]:
        """``(part, where)`` for every index expression the request names (exclusions skipped)."""
        parts: list[tuple[str, str]] = []
        for named in names_of(call):
            positive = [part for part in named.parts if not part.startswith("-")]
            if not positive:
                raise refusal(call, f"{named.where} names no index but exclusions: every index would be read")
            for part in positive:
                if not caller.may_use(part):
                    why = f"{named.where} names [{part}], which the API key [{caller.key}] may not use"
                    raise refusal(call, f"{why} (its index patterns: {', '.join(caller.indices)})", part)
                parts.append((part, named.where))
        if len({part for part, _ in parts}) > MAX_RESOLVED_PARTS:
            raise refusal(call, f"the request names more than {MAX_RESOLVED_PARTS} index expressions")
        return parts

    async def _decide_all(self, call: ProxiedCall, parts: Iterable[tuple[str, str]], *, fresh: bool) -> None:
        patterns = await self.protected.patterns(fresh=fresh)
        asked: dict[str, frozenset[str]] = {}
        for part, where in parts:
            await self._decide(call, part, where, patterns, fresh=fresh, asked=asked)

    async def _decide(
        self,
        call: ProxiedCall,
        part: str,
        where: str,
        patterns: Iterable[str],
        *,
        fresh: bool = False,
        asked: dict[str, frozenset[str]] | None = None,
    ) -> None:
        if part == "_all":
            raise refusal(call, f"{where} names every index (`_all`)", part)
        if part == "" or ":" in part:
            why = "an empty index name" if part == "" else f"[{part}], a remote cluster's or a selector's name"
            raise refusal(call, f"{where} names {why}, which hopsearch does not decide on", part)
        pattern = part
        if part.startswith("<") and part.endswith(">"):
            read = date_math_pattern(part)
            if read is None:
                raise refusal(call, f"{where} names [{part}], date math hopsearch does not read", part)
            pattern = read
        for protected in patterns:
            if overlap(pattern, protected):
                why = f"{where} names [{part}], which may reach [{protected}], managed by hopsearch"
                raise refusal(call, why, part)
        try:
            seen = asked.get(pattern) if asked is not None else None
            names = seen if seen is not None else await self.resolver.names(pattern, fresh=fresh)
            if asked is not None:
                asked[pattern] = names
        except StoreUnavailable:
            raise
        except StoreError as exc:
            raise refusal(call, f"{where} names [{part}], which the cluster did not resolve ({exc})", part) from exc
        for name in sorted(names):
            for protected in patterns:
                if overlap(name, protected):
                    raise refusal(call, f"{where} names [{part}], which reaches [{name}], managed by hopsearch", part)
