"""Indices users already have (issue 30): the field map of an attached index, the presets of Elastic's
connectors and web crawler, and the checks of a field map against the index's mapping. Pure: no I/O here
(the store keeps attachments in ``<prefix>-attached``: :mod:`hopsearch.service.store.attachments`; the
checks of a field map against a mapping: :mod:`hopsearch.service.attached.checks`).

An attached index is read as hopsearch reads its own passages — BM25 over the mapped title and text fields
(with the index's own analyzers), dense through the mapped vector field with the named embedder, the
mapped ACL field as the readers — and never written to: nothing of hopsearch's lands in it, its mapping
or its settings. hopsearch's own passages are the default field map, :data:`HOPSEARCH_FIELDS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from hopsearch.service.access import AclDefault, AclRule, Identities, Scope
from hopsearch.service.errors import ConfigError
from hopsearch.service.types import DenseMethod, RetrievalQuery

#: The layouts ``hopsearch indices attach --layout`` knows.
Layout = Literal["elastic-connector", "elastic-crawler"]
#: How a link key's field folds what it holds: ``exact`` (a keyword field without a normalizer) or ``lowercase``
#: (a ``lowercase`` normalizer: names are looked up lower-cased, so case does not matter).
Fold = Literal["exact", "lowercase"]


@dataclass(frozen=True, slots=True)
class LinkKey:
    """Where the second hop (``hops: 1``) looks names up: a ``keyword`` field holding each passage's whole
    title (``title.keyword`` in hopsearch's own passages), and how it folds what is looked up in it."""

    field: str
    fold: Fold = "exact"


@dataclass(frozen=True, slots=True)
class TitleKey:
    """What was found for an attached index's hop: its :class:`LinkKey`, or none and ``why`` (it then
    searches one hop, and says so)."""

    key: LinkKey | None
    why: str = ""

    def to_doc(self) -> dict[str, Any]:
        if self.key is None:
            return {"field": None, "why": self.why}
        return {"field": self.key.field, "fold": self.key.fold}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> TitleKey:
        if not doc.get("field"):
            return cls(None, str(doc.get("why") or "no keyword field of its title was found"))
        return cls(LinkKey(str(doc["field"]), "lowercase" if doc.get("fold") == "lowercase" else "exact"))


@dataclass(frozen=True, slots=True)
class FieldMap:
    """The fields of a passages index: ``title`` and ``text`` (shown as a hit's title and text, searched with
    BM25 together with ``also``), the ``vector`` of its documents, who may read them (``acl``), their
    language (``lang``), ``url`` and the document id shown beside Elasticsearch's ``_id`` (``id``). ``None``:
    the index has no such field."""

    title: str = "title"
    text: str = "text"
    also: tuple[str, ...] = ()
    vector: str | None = "embedding"
    acl: str | None = "acl"
    lang: str | None = "lang"
    url: str | None = "url"
    id: str | None = "doc_id"

    @property
    def searched(self) -> tuple[str, ...]:
        """The fields BM25 searches (``multi_match`` ``best_fields``)."""
        return (self.title, self.text, *self.also)

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "text": self.text,
            "also": list(self.also),
            "vector": self.vector,
            "acl": self.acl,
            "lang": self.lang,
            "url": self.url,
            "id": self.id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FieldMap:
        return cls(
            title=str(data["title"]),
            text=str(data["text"]),
            also=tuple(str(name) for name in data.get("also") or ()),
            vector=_optional(data.get("vector")),
            acl=_optional(data.get("acl")),
            lang=_optional(data.get("lang")),
            url=_optional(data.get("url")),
            id=_optional(data.get("id")),
        )


def _optional(value: Any) -> str | None:
    return str(value) if value else None


#: hopsearch's own passages (``es_mappings/passages.json``).
HOPSEARCH_FIELDS = FieldMap()
#: Where the hop looks titles up in hopsearch's own passages.
#: hopsearch's own passages from schema 4 on: the title lower-cased (the built-in ``lowercase`` normalizer), so a
#: name finds its title whatever the case; :data:`EXACT_LINK_KEY` in an index made before.
HOPSEARCH_LINK_KEY = LinkKey(f"{HOPSEARCH_FIELDS.title}.key", "lowercase")
#: The title as written: the link key of hopsearch's passages made before schema 4 (``--rebuild`` moves them).
EXACT_LINK_KEY = LinkKey(f"{HOPSEARCH_FIELDS.title}.keyword")

#: What the presets map (Elastic's connectors: SharePoint, Confluence, Google Drive, S3 …; the crawler).
PRESETS: dict[str, FieldMap] = {
    "elastic-connector": FieldMap(
        title="title", text="body", vector=None, acl="_allow_access_control", lang=None, url="url", id="id"
    ),
    "elastic-crawler": FieldMap(
        title="title", text="body_content", also=("headings",), vector=None, acl=None, lang=None, url="url", id="id"
    ),
}


@dataclass(frozen=True, slots=True)
class Attachment:
    """An index (or alias) hopsearch answers over without owning it: its field map, the embedder of its
    vectors (``embedder``, ``dims``, how they are searched: ``vector_mode``), its language where no field
    holds it (``lang``), how its ACL values name principals (``identities``) and how documents without
    any read (``acl_default``; an index without an ACL field reads as private: admins only), and where its
    hop looks titles up (``title_key``; ``None``: recorded before hops, found at first use)."""

    index: str
    fields: FieldMap
    embedder: str | None = None
    dims: int | None = None
    vector_mode: DenseMethod | None = None
    lang: str | None = None
    identities: Identities = "hopsearch"
    acl_default: AclDefault = "private"
    layout: str | None = None
    attached_at: str = ""
    checks: Mapping[str, Any] = field(default_factory=dict)
    title_key: TitleKey | None = None

    @property
    def acl(self) -> AclRule:
        return AclRule(self.fields.acl, self.identities)

    def bind(self, scope: Scope) -> Scope:
        """``scope`` over this index: its readers (ACL field, rule, default) and the request's filters
        over its field names."""
        names = filter_names(self.fields)
        lang = self.lang if self.fields.lang is None else None
        filters = tuple(renamed_clause(f, names, lang) for f in scope.filters) if names or lang else scope.filters
        return replace(scope, acl=self.acl, acl_default=self.acl_default, filters=filters)

    def meta(self) -> dict[str, Any]:
        """Return what planning reads of it, in the keys of a hopsearch index's ``_meta.hopsearch`` (no
        ``ja_analysis``: a Japanese question searches the mapped fields with their own analyzers)."""
        return {
            "embedder": self.embedder,
            "dims": self.dims,
            "vector_mode": self.vector_mode,
            "attached": True,
            "lang": self.lang,
        }

    def to_doc(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "fields": self.fields.to_dict(),
            "embedder": self.embedder,
            "dims": self.dims,
            "vector_mode": self.vector_mode,
            "lang": self.lang,
            "identities": self.identities,
            "acl_default": self.acl_default,
            "layout": self.layout,
            "attached_at": self.attached_at,
            "checks": dict(self.checks),
            "title_key": self.title_key.to_doc() if self.title_key is not None else None,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Attachment:
        identities = doc.get("identities") or "hopsearch"
        acl_default = doc.get("acl_default") or "private"
        mode = doc.get("vector_mode")
        return cls(
            index=str(doc["index"]),
            fields=FieldMap.from_dict(doc["fields"]),
            embedder=_optional(doc.get("embedder")),
            dims=int(doc["dims"]) if doc.get("dims") else None,
            vector_mode=mode if mode in ("knn", "script_score", "rerank") else None,
            lang=_optional(doc.get("lang")),
            identities="elastic-connector" if identities == "elastic-connector" else "hopsearch",
            acl_default="public" if acl_default == "public" else "private",
            layout=_optional(doc.get("layout")),
            attached_at=str(doc.get("attached_at") or ""),
            checks=dict(doc.get("checks") or {}),
            title_key=TitleKey.from_doc(doc["title_key"]) if doc.get("title_key") else None,
        )


def field_text(value: Any) -> str:
    """Return a mapped field's value as text: a string as it is, a list's items one per line (the crawler's
    ``headings``), nothing as empty."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(field_text(item) for item in value if item is not None)
    return "" if value is None else str(value)


def field_map(
    layout: str | None,
    *,
    title: str | None = None,
    text: str | None = None,
    also: Sequence[str] = (),
    vector: str | None = None,
    acl: str | None = None,
    lang: str | None = None,
    url: str | None = None,
    id: str | None = None,
) -> FieldMap:
    """Return the field map of a layout preset (or none) with the fields named on top; the title and text fields
    are required without a preset."""
    if layout is not None and layout not in PRESETS:
        raise ConfigError(f"unknown layout [{layout}]: one of {', '.join(sorted(PRESETS))}", details={"layout": layout})
    base = PRESETS[layout] if layout is not None else None
    title = title or (base.title if base else None)
    text = text or (base.text if base else None)
    if not title or not text:
        missing = "--title-field" if not title else "--text-field"
        raise ConfigError(f"{missing} is required (or a --layout that names it)", details={"field": missing})
    return FieldMap(
        title=title,
        text=text,
        also=tuple(also) if also else (base.also if base else ()),
        vector=vector or (base.vector if base else None),
        acl=acl or (base.acl if base else None),
        lang=lang or (base.lang if base else None),
        url=url or (base.url if base else None),
        id=id or (base.id if base else None),
    )


def filter_names(fields: FieldMap) -> dict[str, str]:
    """Return the filterable fields of hopsearch's passages that an attached index holds under other names."""
    names = {"title.keyword": f"{fields.title}.keyword"}
    for ours, theirs in (("lang", fields.lang), ("url", fields.url), ("doc_id", fields.id)):
        if theirs is not None:
            names[ours] = theirs
    return {ours: theirs for ours, theirs in names.items() if ours != theirs}


_EVERY: dict[str, Any] = {"match_all": {}}
_NONE: dict[str, Any] = {"bool": {"must_not": [{"match_all": {}}]}}


def _index_lang(kind: str, value: Mapping[str, Any], lang: str) -> dict[str, Any] | None:
    """Return a ``lang`` clause decided by the language of a whole index (``--lang``), or None if not one."""
    if kind == "exists" and value.get("field") == "lang":
        return _EVERY
    if kind in ("term", "terms") and "lang" in value:
        wanted = value["lang"] if kind == "terms" else [value["lang"]]
        return _EVERY if lang in wanted else _NONE
    return None


def renamed_clause(clause: Mapping[str, Any], names: Mapping[str, str], lang: str | None = None) -> dict[str, Any]:
    """Return a validated filter clause (:func:`~hopsearch.service.retrieval.filters.parse_filters`) over the fields
    ``names`` maps to (a field an index lacks under any name matches nothing, as over hopsearch's own);
    ``lang``: the language of every document of an index without a language field."""
    out: dict[str, Any] = {}
    for kind, value in clause.items():
        decided = _index_lang(kind, value, lang) if lang is not None and kind != "bool" else None
        if decided is not None:
            return decided
        if kind == "bool":
            out[kind] = {
                key: [renamed_clause(sub, names, lang) for sub in subs] if isinstance(subs, list) else subs
                for key, subs in value.items()
            }
        elif kind == "exists":
            out[kind] = {"field": names.get(value["field"], value["field"])}
        elif kind in ("term", "terms", "range"):
            out[kind] = {names.get(name, name): arg for name, arg in value.items()}
        else:
            out[kind] = value
    return out


def renamed(queries: Sequence[RetrievalQuery], fields: FieldMap) -> list[RetrievalQuery]:
    """Return the queries with their own filters over ``fields`` (unchanged over hopsearch's own passages)."""
    names = filter_names(fields) if fields is not HOPSEARCH_FIELDS else {}
    if not names or not any(query.filters for query in queries):
        return list(queries)
    return [replace(q, filters=tuple(renamed_clause(f, names) for f in q.filters)) for q in queries]
