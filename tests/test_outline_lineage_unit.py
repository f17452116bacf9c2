"""The rules of outline sharing without Elasticsearch (issue 29): the readers of a lineage, what a reader
may use of an outline, what a fact shows to whom, the cap per lineage scope and the namespace a key is
bound to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hopsearch.service.access import ADMIN, Caller
from hopsearch.service.errors import AuthorizationError
from hopsearch.service.outlines.lineage import OutlineReader, bound_namespace, readers_of
from hopsearch.service.outlines.model import MAX_FACTS, AliasSource, EntityOutline, Fact, usable

HR = Caller.of(["group:hr", "public"], subject="alice", key="hr", owner="key:hr/sub:alice")
BOB = Caller.of(["public"], subject="bob", key="low")


def fact(
    summary: str,
    lineage: tuple[str, ...] | None,
    readers: tuple[str, ...] | None,
    *,
    age_s: float = 0,
    key: str | None = None,
    subject: str | None = None,
    owner: str | None = None,
) -> Fact:
    now = datetime.now(UTC) - timedelta(seconds=age_s)
    question, trace = "alice's question", "t-alice"
    return Fact(
        summary,
        question,
        "sq",
        ("p",),
        "m",
        now,
        trace,
        lineage=lineage,
        readers=readers,
        key=key,
        subject=subject,
        owner=owner,
    )


def test_readers_are_the_principals_that_read_every_passage() -> None:
    assert readers_of([("public",), ("public", "group:hr")], "private") == ("public",)
    assert readers_of([("group:hr", "group:board"), ("public",), ("group:hr",)], "private") == ("group:hr",)
    assert readers_of([("group:hr",), ("group:board",)], "private") == ()
    assert readers_of([None, ("public",)], "private") == () and readers_of([None], "public") == ("public",)
    assert readers_of([("private",)], "public") == () and readers_of([], "private") == ("public",)


def test_a_reader_uses_only_facts_and_aliases_whose_whole_lineage_it_reads_now() -> None:
    outline = EntityOutline(
        "ns",
        "CEO",
        ("Taro", "Legacy name"),
        (
            fact("public fact", ("i/pub",), ("public",)),
            fact("hr fact", ("i/pub", "i/hr"), ("group:hr",)),
            fact("legacy fact", None, None),
            fact("revoked fact", ("i/gone",), ("public",)),
        ),
        alias_lineage=(AliasSource("Taro", ("i/hr",), ("group:hr",)),),
    )
    readable = {"i/pub", "i/hr"}
    hr = usable(outline, OutlineReader(HR), readable)
    assert hr is not None and [f.summary for f in hr.facts] == ["public fact", "hr fact"] and hr.aliases == ("Taro",)
    low = usable(outline, OutlineReader(BOB), {"i/pub"})
    assert low is not None and [f.summary for f in low.facts] == ["public fact"] and low.aliases == ()
    assert all(f.question == "" and f.trace_id == "" and f.key is None for f in low.facts)
    admin = usable(outline, OutlineReader(ADMIN), readable)
    assert admin is not None and [f.summary for f in admin.facts] == ["public fact", "hr fact", "legacy fact"]
    assert admin.aliases == ("Taro", "Legacy name") and admin.facts[0].question == "alice's question"
    assert usable(outline, OutlineReader(BOB), set()) is None  # nothing usable: no outline at all


def test_a_fact_shows_its_question_and_trace_to_its_writer_and_admins_only() -> None:
    mine = fact("x", ("i/p",), ("public",), subject="alice", key="hr", owner="key:hr/sub:alice")
    assert mine.shown_to(OutlineReader(HR)).trace_id == "t-alice"
    minted = Caller.of(["public"], subject="alice", key="eng", owner="key:eng/sub:alice")  # same sub, other key
    assert mine.shown_to(OutlineReader(minted)).question == "" and mine.shown_to(OutlineReader(minted)).key is None
    legacy = fact("x", ("i/p",), ("public",), subject="alice", key="hr")  # written before owners: admins' only
    assert legacy.shown_to(OutlineReader(HR)).question == "" and legacy.shown_to(OutlineReader(ADMIN)).question
    assert mine.shown_to(OutlineReader(BOB)).trace_id == "" and mine.shown_to(OutlineReader(BOB)).question == ""
    assert mine.shown_to(OutlineReader(ADMIN)).key == "hr"
    assert Fact.from_dict(mine.to_dict()) == mine


def test_the_cap_is_kept_per_lineage_scope_so_one_key_cannot_push_out_anothers_facts() -> None:
    kept = [fact(f"hr {n}", ("i/hr",), ("group:hr",), key="hr", age_s=1000 - n) for n in range(5)]
    flood = [fact(f"spam {n}", ("i/pub",), ("public",), key="low", age_s=500 - n) for n in range(3 * MAX_FACTS)]
    merged = EntityOutline("ns", "CEO", facts=tuple(kept)).merged(EntityOutline("ns", "CEO", facts=tuple(flood)))
    summaries = [f.summary for f in merged.facts]
    assert all(f"hr {n}" in summaries for n in range(5))
    assert sum(s.startswith("spam") for s in summaries) == MAX_FACTS and "spam 299" in summaries


def test_the_namespace_is_the_keys_and_only_admins_name_another() -> None:
    bound = Caller.of(["public"], key="k", namespace="team-a")
    assert bound_namespace(bound, None, "default") == "team-a" and bound_namespace(BOB, None, "default") == "default"
    assert bound_namespace(bound, "team-a", "default") == "team-a"
    with pytest.raises(AuthorizationError):
        bound_namespace(bound, "team-b", "default")
    assert bound_namespace(ADMIN, "team-b", "default") == "team-b" and bound_namespace(ADMIN, None, "default") is None
