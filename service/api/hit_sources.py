"""What a hit's ``_source`` shows to API clients: server paths and chosen fields kept private.

Documents indexed from a folder carry the server's absolute ``path``, a ``file:`` ``url`` and the
indexed folder itself (``metadata.root``). By default a client sees ``path`` relative to that folder,
no ``file:`` URL and no root (``HOPSEARCH_API_SERVER_PATHS`` shows them as indexed); fields named in
``HOPSEARCH_API_HIDDEN_FIELDS`` are removed, and a non-empty ``HOPSEARCH_API_SOURCE_FIELDS`` keeps only
the fields it names. Names are dotted (``metadata.root``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from hopsearch.service.config.settings import Settings

#: Fields a document indexed from a folder has that are rewritten or dropped for clients.
_FOLDER_FIELDS = frozenset({"path", "url", "metadata"})


def _drop(source: dict[str, Any], dotted: str) -> None:
    head, _, rest = dotted.partition(".")
    if not rest:
        source.pop(head, None)
        return
    inner = source.get(head)
    if isinstance(inner, Mapping):
        copy = dict(inner)  # copied before the change: the hit's own source stays as it was
        _drop(copy, rest)
        source[head] = copy


def _pick(source: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for dotted in fields:
        head, _, rest = dotted.partition(".")
        if head not in source:
            continue
        if not rest:
            kept[head] = source[head]
        elif isinstance(source[head], Mapping):
            inner = _pick(source[head], [rest])
            if inner:
                previous = kept.get(head)
                kept[head] = {**previous, **inner} if isinstance(previous, dict) else inner
    return kept


def relative_path(path: str, root: str) -> str | None:
    """``path`` below ``root``, or None where it is not below it."""
    prefix = root.rstrip("/") + "/"
    return posixpath.normpath(path[len(prefix) :]) if path.startswith(prefix) else None


class HitSources:
    """The ``_source`` a client sees, from the settings (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.fields = list(settings.api_source_fields)
        self.hidden = list(settings.api_hidden_fields)
        self.server_paths = settings.api_server_paths

    def __call__(self, source: Mapping[str, Any]) -> dict[str, Any]:
        """The source as shown; the hit's own source itself (not a copy) where nothing is changed in it
        (no folder fields, nothing hidden or picked: the common case, ~10 per ``_retrieve``)."""
        if (
            isinstance(source, dict)
            and not self.fields
            and not self.hidden
            and (self.server_paths or _FOLDER_FIELDS.isdisjoint(source))
        ):
            return source
        shown = dict(source)
        if not self.server_paths:
            meta = shown.get("metadata")
            root = meta.get("root") if isinstance(meta, Mapping) else None
            path = shown.get("path")
            if isinstance(path, str):
                relative = relative_path(path, root) if isinstance(root, str) else None
                if relative is not None:
                    shown["path"] = relative
                elif path.startswith("/"):
                    shown.pop("path")  # an absolute path outside any indexed folder: nothing to show
            url = shown.get("url")
            if isinstance(url, str) and url.startswith("file:"):
                shown.pop("url")
            _drop(shown, "metadata.root")
        for dotted in self.hidden:
            _drop(shown, dotted)
        return _pick(shown, self.fields) if self.fields else shown
