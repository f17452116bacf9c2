"""What a hit's ``_source`` shows to API clients: server paths and chosen fields kept private.

Documents indexed from a folder carry the server's absolute ``path``, a ``file:`` ``url`` and the
indexed folder itself (``metadata.root``). By default a client sees ``path`` relative to that folder,
no ``file:`` URL and no root (``HOPSEARCH_API_SERVER_PATHS`` shows them as indexed); fields named in
``HOPSEARCH_API_HIDDEN_FIELDS`` are removed, and a non-empty ``HOPSEARCH_API_SOURCE_FIELDS`` keeps only
the fields it names. Names are dotted (``metadata.root``).

Beside ``_source``, every hit has one place for what hopsearch reads of it, whatever the index calls its
fields: the key :data:`MAPPED` (``"hopsearch": {"title", "text", "excerpt"}``), from the fields the index's
field map names (hopsearch's own passages: ``title`` and ``text``; an attached index: its mapped fields).
Each value is there only where the field it comes from is in the ``_source`` the caller is shown (not
hidden, listed where fields are listed, not the ACL field of a non-admin), so it never shows more than
``_source`` does, and an index's own ``title`` or ``text`` fields stay as they are in ``_source``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from hopsearch.service.attached.fieldmap import FieldMap, field_text
from hopsearch.service.config.settings import Settings
from hopsearch.service.types import Hit

#: The key of an API hit that holds its mapped title, text and excerpt. Elasticsearch's hit envelope uses
#: ``_``-prefixed names (``_index``, ``_id``, ``_score``, ``_source`` …) and ``highlight``, ``fields``,
#: ``sort``, ``inner_hits``, ``matched_queries``: never this one.
MAPPED = "hopsearch"

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


def _value(source: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    """Whether ``source`` holds the field ``dotted`` (a key of that name, or objects along its parts), and
    its value."""
    if dotted in source:
        return True, source[dotted]
    head, _, rest = dotted.partition(".")
    inner = source.get(head) if rest else None
    return _value(inner, rest) if isinstance(inner, Mapping) else (False, None)


def mapped(hit: Hit, shown: Mapping[str, Any], fields: FieldMap) -> dict[str, str]:
    """Return what hopsearch reads of ``hit`` through ``fields``, limited to what ``shown`` (the hit's ``_source``
    as the caller sees it) holds: ``title`` (the mapped title field), ``text`` (the mapped text field:
    a passage of hopsearch's own, the whole text of an attached document) and ``excerpt`` (what the
    strategies read and cite: the passage itself, or an attached document's best passages by the query,
    else its opening)."""
    out: dict[str, str] = {}
    has_title, title = _value(shown, fields.title)
    if has_title:
        out["title"] = field_text(title)
    has_text, text = _value(shown, fields.text)
    if has_text:
        out["text"] = field_text(text)
        out["excerpt"] = hit.text
    return out


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
        """Return the source as shown; the hit's own source itself (not a copy) where nothing is changed in it
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

    def mapped(self, hit: Hit, fields: FieldMap) -> dict[str, str]:
        """:func:`mapped` of ``hit`` as the caller is shown its ``_source`` (MCP ``search``, Search-R1)."""
        return mapped(hit, self(hit.source), fields)

    def hit(self, index: str, hit: Hit, fields: FieldMap) -> dict[str, Any]:
        """``hit`` as an API hit: Elasticsearch's envelope and the :data:`MAPPED` key beside ``_source``."""
        source = self(hit.source)
        shown = mapped(hit, source, fields)
        return {"_index": index, "_id": hit.id, "_score": hit.score, "_source": source, MAPPED: shown}
