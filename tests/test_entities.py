"""Entity-name normalisation and linking, and the outline rendering and merge rules (no I/O)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from hopsearch.service.outlines.entities import EntityLinker, entity_key
from hopsearch.service.outlines.model import EntityOutline, Fact, render_outline


def test_entity_key_rules() -> None:
    same = ["Steven Spielberg", "steven spielberg", "Steven Spielberg's", "STEVEN  SPIELBERG.", " Steven-Spielberg "]
    assert {entity_key(name) for name in same} == {"steven spielberg"}
    assert entity_key("The Seventh Victim") == entity_key("Seventh Victim") == "seventh victim"
    assert entity_key("Jaws (film)") == entity_key("Jaws") == "jaws"
    assert entity_key("Fernando Fernán Gómez") == "fernando fernan gomez"
    assert entity_key("James' Gang") == "james gang"
    assert entity_key("A") == "a" and entity_key("The") == "the"  # never empty for a real name
    assert entity_key("(film)") == "film" and entity_key("  ...  ") == ""
    assert entity_key("Theodore") == "theodore" and entity_key("Anne") == "anne"  # articles are whole words


@given(st.text(min_size=1, max_size=40))
def test_entity_key_is_idempotent_and_case_blind(name: str) -> None:
    key = entity_key(name)
    assert re.fullmatch(r"(?:[^\W_]+(?: [^\W_]+)*)?", key), key  # words, single spaces, no punctuation
    if name.isascii():
        assert entity_key(name.upper()) == entity_key(name.lower()) == key


def test_linker_links_by_key_alias_and_same_as() -> None:
    linker = EntityLinker()
    first = linker.link("Steven Spielberg")
    assert first is not None and first.how == "new"
    assert (link := linker.link("steven spielberg's")) is not None and link.how == "key"
    assert link.entity is first.entity and first.entity.aliases == ["steven spielberg's"]
    assert (by_pointer := linker.link("Spielberg", same_as="Steven Spielberg")) is not None
    assert by_pointer.how == "same_as" and "Spielberg" in first.entity.aliases
    assert (by_alias := linker.link("SPIELBERG")) is not None and by_alias.how == "alias"
    assert by_alias.entity is first.entity and first.entity.aliases == ["steven spielberg's", "Spielberg"]
    unknown_pointer = linker.link("Ridley Scott", same_as="Someone Else")
    assert unknown_pointer is not None and unknown_pointer.how == "new"
    assert linker.link("  ") is None and len(linker.entities) == 2


def fact(summary: str, ids: tuple[str, ...], age_s: float = 0.0) -> Fact:
    return Fact(summary, "q", "sq", ids, "m", datetime.now(UTC) - timedelta(seconds=age_s), "t")


def test_outline_render_merge_and_freshness() -> None:
    assert render_outline([("A", ["one", "two  lines\nhere"]), ("B", []), ("C", ["three"])]) == (
        "## A\n- one\n- two lines here\n\n## C\n- three"
    )
    old, new = fact("old", ("p1",), age_s=7200), fact("new", ("p2",))
    outline = EntityOutline("ns", "Richard Donner", ("Dick Donner",), (old,))
    merged = outline.merged(EntityOutline("ns", "richard donner", ("Donner", "dick donner"), (old, new)))
    assert merged.aliases == ("Dick Donner", "Donner") and [f.summary for f in merged.facts] == ["old", "new"]
    assert merged.keys() == ["richard donner", "dick donner", "donner"]
    assert merged.fresh_facts(3600) == (new,) and merged.fresh_facts(3 * 3600) == (old, new)
    back = EntityOutline.from_document(merged.to_document())
    assert back.facts == merged.facts and back.aliases == merged.aliases
