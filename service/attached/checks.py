"""The checks of a field map (:mod:`hopsearch.service.attached.fieldmap`) against an index's mapping, made when an
index is attached: each mapped field exists with a type hopsearch can use, how its vectors are searched, and
which keyword field of its title the second hop looks names up in (:func:`title_key`). Pure: the store reads
the mapping (:meth:`hopsearch.service.store.attachments.Attachments.attach`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hopsearch.service.attached.fieldmap import FieldMap, Fold, LinkKey, TitleKey
from hopsearch.service.errors import ConfigError
from hopsearch.service.types import DenseMethod

TEXT_TYPES = frozenset({"text", "match_only_text"})
KEYWORD_TYPES = frozenset({"keyword", "constant_keyword", "wildcard"})


def mapped_fields(mapping: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every field of a mapping's ``properties`` by its dotted name (sub-fields ``title.keyword`` and the
    fields of objects and nested objects too), with its mapping (``type`` ``object`` where none is given)."""
    out: dict[str, dict[str, Any]] = {}

    def walk(properties: Mapping[str, Any], prefix: str) -> None:
        for name, body in properties.items():
            dotted = f"{prefix}{name}"
            out[dotted] = {"type": body.get("type", "object"), **body}
            for sub, sub_body in (body.get("fields") or {}).items():
                out[f"{dotted}.{sub}"] = {"type": sub_body.get("type", "object"), **sub_body}
            if "properties" in body:
                walk(body["properties"], f"{dotted}.")

    walk(mapping.get("properties") or {}, "")
    return out


def check_fields(index: str, fields: FieldMap, mapped: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse a field map whose fields the index lacks or holds with a type hopsearch cannot use: a
    :class:`ConfigError` naming the field, what it should be and what the index has."""
    wanted: list[tuple[str, str, frozenset[str]]] = [
        ("title", fields.title, TEXT_TYPES | KEYWORD_TYPES),
        ("text", fields.text, TEXT_TYPES),
        *[("also", name, TEXT_TYPES | KEYWORD_TYPES) for name in fields.also],
    ]
    for role, name in (("acl", fields.acl), ("lang", fields.lang), ("url", fields.url), ("id", fields.id)):
        if name is not None:
            wanted.append((role, name, KEYWORD_TYPES | TEXT_TYPES if role == "url" else KEYWORD_TYPES))
    for role, name, types in wanted:
        found = mapped.get(name)
        if found is None:
            raise ConfigError(
                f"index [{index}] has no field [{name}] (the {role} field); its fields: {_some(mapped)}",
                details={"index": index, "field": name, "role": role},
            )
        if found["type"] not in types:
            raise ConfigError(
                f"field [{name}] of index [{index}] (the {role} field) is {found['type']}, not "
                f"{' or '.join(sorted(types))}",
                details={"index": index, "field": name, "role": role, "type": found["type"]},
            )


def vector_mapping(index: str, name: str, mapped: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
    """Return the mapping of the vector field ``name``: a ``dense_vector``, or numbers kept in ``_source`` (a
    server without vectors, such as the 7.17 OSS build); a clear error otherwise."""
    found = mapped.get(name)
    if found is None:
        raise ConfigError(
            f"index [{index}] has no field [{name}] (the vector field); its fields: {_some(mapped)}",
            details={"index": index, "field": name, "role": "vector"},
        )
    if found["type"] not in ("dense_vector", "float", "half_float", "double"):
        raise ConfigError(
            f"field [{name}] of index [{index}] (the vector field) is {found['type']}, not dense_vector",
            details={"index": index, "field": name, "role": "vector", "type": found["type"]},
        )
    return found


def vector_mode(found: Mapping[str, Any], major: int, server: DenseMethod) -> DenseMethod:
    """How the vectors of a field mapped as ``found`` are searched on a server whose own method is
    ``server``: kNN over an indexed ``dense_vector`` (8.x indexes them by default from 8.11), exact
    ``script_score`` on 7.17, else cosine here over BM25 candidates (numbers in ``_source``, or a
    ``dense_vector`` that is not indexed on 8.x, whose ``script_score`` needs painless)."""
    if found["type"] != "dense_vector":
        return "rerank"
    if server == "knn":
        return "knn" if bool(found.get("index", major >= 8)) else "rerank"
    return "script_score" if server == "script_score" else "rerank"


def _keyword_fields(title: str, mapped: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str | None]]:
    """Return the ``keyword`` fields that hold the title field's whole value, each with its normalizer: the field
    itself where it is one, then its sub-fields (``keyword`` first, then by name)."""
    found = mapped.get(title) or {}
    out: list[tuple[str, str | None]] = []
    if found.get("type") == "keyword":
        out.append((title, found.get("normalizer")))
    subs = sorted((found.get("fields") or {}).items(), key=lambda item: (item[0] != "keyword", item[0]))
    out += [(f"{title}.{sub}", body.get("normalizer")) for sub, body in subs if body.get("type") == "keyword"]
    return out


def custom_normalizers(title: str, mapped: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """Return the normalizers of the title's keyword fields that are not built in (their definitions are in the
    index's settings, ``index.analysis.normalizer``)."""
    return {name for _, name in _keyword_fields(title, mapped) if name is not None and name != "lowercase"}


def _fold(name: str | None, normalizers: Mapping[str, Any]) -> Fold | None:
    """How a keyword field with the normalizer ``name`` folds names, or None where hopsearch cannot fold a
    name the same way (it then could not tell which name found which passage)."""
    if name is None:
        return "exact"
    custom = normalizers.get(name)
    if custom is None:
        return "lowercase" if name == "lowercase" else None
    filters = custom.get("filter") or []
    filters = [filters] if isinstance(filters, str) else list(filters)
    return "lowercase" if filters == ["lowercase"] and not custom.get("char_filter") else None


def title_key(
    title: str, mapped: Mapping[str, Mapping[str, Any]], normalizers: Mapping[str, Any] | None = None
) -> TitleKey:
    """Where the second hop looks titles up in an index mapped as ``mapped`` (custom ``normalizers`` from
    its settings): the title field itself if it is a ``keyword``, else a ``keyword`` sub-field of it (of
    any name), one without a normalizer before one with a ``lowercase`` normalizer; none, and why, where
    there is no such field or each folds names in a way hopsearch does not."""
    candidates = _keyword_fields(title, mapped)
    if not candidates:
        kind = (mapped.get(title) or {}).get("type", "missing")
        return TitleKey(None, f"its title field [{title}] is {kind} without a keyword sub-field")
    folds = [(field, _fold(name, normalizers or {})) for field, name in candidates]
    for wanted in ("exact", "lowercase"):
        for field, fold in folds:
            if fold == wanted:
                return TitleKey(LinkKey(field, wanted))
    named = ", ".join(f"[{field}] normalizer [{name}]" for field, name in candidates)
    return TitleKey(None, f"the keyword fields of its title fold names in ways hopsearch does not ({named})")


def _some(mapped: Mapping[str, Any]) -> str:
    names = sorted(mapped)
    return ", ".join(names[:30]) + (f" … ({len(names)} in all)" if len(names) > 30 else "")
