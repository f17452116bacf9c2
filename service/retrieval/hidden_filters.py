"""Filters that would read what hits hide, refused for non-admins.

A filter is an oracle: ``range``/``term`` on a field kept out of hits recovers its value a request at a
time (the server's absolute folder in ~1,800 requests). So for a caller that is no admin, a filter clause
(:func:`~hopsearch.service.retrieval.filters.parse_filters`' output) may not name a field of
``api_hidden_fields`` (or one under it), and, unless ``api_server_paths`` shows server paths:
``metadata.root`` not at all, ``path`` only by the relative path hits show (``term``/``terms`` of relative
values; an absolute value and ``range`` refused), ``url`` neither by ``range`` nor by a ``file:`` value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from hopsearch.service.errors import RequestInvalid

_BOOL_LISTS = ("filter", "should", "must", "must_not")


def _leaves(clause: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """Each ``(kind, field, value)`` a clause filters on (``exists``: its field, value None)."""
    for kind, body in clause.items():
        if kind == "bool" and isinstance(body, Mapping):
            for key in _BOOL_LISTS:
                for sub in body.get(key) or ():
                    yield from _leaves(sub)
        elif kind == "exists" and isinstance(body, Mapping):
            yield kind, str(body.get("field")), None
        elif kind in ("term", "terms", "range") and isinstance(body, Mapping):
            for name, value in body.items():
                yield kind, str(name), value


def _under(name: str, hidden: str) -> bool:
    return name == hidden or name.startswith(f"{hidden}.") or hidden.startswith(f"{name}.")


def _values(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def why_refused(kind: str, name: str, value: Any, hidden: Sequence[str], server_paths: bool) -> str | None:
    """Why a filter on ``name`` reads what hits hide; None where it does not."""
    bare = name.removesuffix(".keyword")
    for field in hidden:
        if _under(bare, field):
            return f"[{name}] is kept out of hits (api_hidden_fields): it cannot be filtered on"
    if server_paths:
        return None
    if _under(bare, "metadata.root"):
        return "[metadata.root] (the server's folder) is kept out of hits: it cannot be filtered on"
    if bare == "path" and kind == "range":
        return "a range on [path] is refused: filter on the relative path hits show (term, terms)"
    if bare == "path" and any(isinstance(v, str) and v.startswith("/") for v in _values(value)):
        return "an absolute [path] is refused: filter on the path relative to its folder, as hits show it"
    if bare == "url" and kind == "range":
        return "a range on [url] is refused (file: URLs are kept out of hits)"
    if bare == "url" and any(isinstance(v, str) and v.lower().startswith("file:") for v in _values(value)):
        return "a file: [url] is refused (file: URLs are kept out of hits)"
    return None


def refuse_hidden(
    clauses: Sequence[Mapping[str, Any]], *, hidden: Sequence[str], server_paths: bool, where: str
) -> None:
    """Raise a 400 naming the first filter (``<where>.<n>``) that reads a field hits hide (module docstring)."""
    for number, clause in enumerate(clauses):
        for kind, name, value in _leaves(clause):
            why = why_refused(kind, name, value, hidden, server_paths)
            if why is not None:
                raise RequestInvalid(why + " (only admins may)", field=f"{where}.{number}")
