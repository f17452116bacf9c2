"""Entity names: a rule-based normaliser (the key an outline is stored under) and alias linking.

:func:`entity_key` casefolds, folds accents, drops a trailing parenthetical qualifier ("Jaws (film)"),
possessives ("Spielberg's"), punctuation and a leading article ("The", "A", "An"), and collapses
whitespace. Two names with the same key are the same entity. Nothing here needs a language model
or spaCy: names in multi-hop questions are titles and proper nouns, where these rules are enough.

A Japanese name (kana or kanji in it) is keyed differently: NFKC (full-width Latin and digits and
half-width kana folded to one width; NFKD plus dropping combining marks, as above, would turn ガ into
カ), the 異体字 NFKC keeps apart folded as in BM25 tokens ("山﨑" is "山崎":
:data:`~hopsearch.service.text.japanese.VARIANTS`), Latin lower-cased, quotes, punctuation and all spaces
dropped ("森川　早苗" is "森川早苗"), a parenthetical qualifier dropped, and an honorific suffix (さん, 様,
さま, 氏, 殿) dropped when two or more characters remain ("源氏" stays).

:class:`EntityLinker` maps new names to entities already known in a run — by key, by the key of a
known alias, or by the model's own ``same_as`` pointer — and records every new spelling as an alias.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

from hopsearch.service.text.japanese import fold_variants
from hopsearch.service.text.lang import detect_lang

_QUALIFIER = re.compile(r"\s*\([^()]*\)\s*$")
_POSSESSIVE = re.compile(r"(?<=\w)['’]s\b|(?<=s)['’](?=\s|$)")
_NON_WORD = re.compile(r"[^\w\s]+")
_ARTICLE = re.compile(r"^(?:the|a|an)\s+")
_SPACE = re.compile(r"\s+")
_HONORIFIC = re.compile(r"(?:さん|様|さま|氏|殿)$")


def _japanese_key(name: str) -> str:
    text = fold_variants(unicodedata.normalize("NFKC", name)).lower()
    stripped = _QUALIFIER.sub("", text)
    text = stripped if stripped.strip() else text
    text = _NON_WORD.sub("", text).replace("_", "")
    text = _SPACE.sub("", text)
    without = _HONORIFIC.sub("", text)
    return without if len(without) >= 2 else text


def entity_key(name: str) -> str:
    """Return the normalised key of an entity name ("" when nothing is left)."""
    if detect_lang(name) == "ja":
        return _japanese_key(name)
    text = unicodedata.normalize("NFKD", name)
    text = "".join(char for char in text if not unicodedata.combining(char)).casefold()
    stripped = _QUALIFIER.sub("", text)
    text = stripped if stripped.strip() else text
    text = _POSSESSIVE.sub("", text)
    text = _NON_WORD.sub(" ", text).replace("_", " ")
    text = _SPACE.sub(" ", text).strip()
    without_article = _ARTICLE.sub("", text)
    return without_article or text


def clean_name(name: str) -> str:
    """Return a display name: surrounding whitespace and quotes removed, inner whitespace collapsed."""
    return _SPACE.sub(" ", name).strip().strip("\"'“”‘’").strip()


@dataclass(slots=True)
class KnownEntity:
    """An entity of the current run (mutable by design: aliases grow as the run proceeds)."""

    key: str
    name: str
    aliases: list[str] = field(default_factory=list)

    def key_set(self) -> set[str]:
        return {self.key, *(entity_key(alias) for alias in self.aliases)}

    def add_alias(self, name: str) -> bool:
        """Record ``name`` as an alias unless it is the entity's name or a known alias."""
        folded = name.casefold()
        if folded == self.name.casefold() or folded in {alias.casefold() for alias in self.aliases}:
            return False
        self.aliases.append(name)
        return True


@dataclass(frozen=True, slots=True)
class Link:
    """Where a name the model wrote landed: the entity, and how it was linked."""

    name: str
    entity: KnownEntity
    how: str  # "new", "key", "alias" or "same_as"


class EntityLinker:
    """Links names to the entities known so far (by key, alias key, or ``same_as``)."""

    def __init__(self, known: Iterable[KnownEntity] = ()) -> None:
        self.entities: dict[str, KnownEntity] = {}
        for entity in known:
            self.entities[entity.key] = entity

    def find(self, name: str) -> tuple[KnownEntity, str] | None:
        key = entity_key(name)
        if not key:
            return None
        if key in self.entities:
            return self.entities[key], "key"
        for entity in self.entities.values():
            if key in entity.key_set():
                return entity, "alias"
        return None

    def link(self, name: str, same_as: str | None = None) -> Link | None:
        """Return the entity ``name`` refers to; a new one when no rule links it. ``None`` for an empty name."""
        name = clean_name(name)
        key = entity_key(name)
        if not key:
            return None
        found = self.find(name)
        if found is None and same_as and entity_key(same_as) != key:
            target = self.find(same_as)
            if target is not None:
                found = (target[0], "same_as")
        if found is not None:
            entity, how = found
            entity.add_alias(name)
            return Link(name, entity, how)
        entity = KnownEntity(key=key, name=name)
        self.entities[key] = entity
        return Link(name, entity, "new")
