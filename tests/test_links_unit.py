"""The hop's pure parts (:mod:`hopsearch.service.retrieval.links`): which spans of a text are names, what
named each, and the ranking that puts a linked passage right after the passage that named it."""

from __future__ import annotations

from hopsearch.service.retrieval.links import QUESTION, Candidates, candidates, ranked, spans
from hopsearch.service.types import Hit


def test_spans_start_and_end_with_a_capitalised_word_or_a_number() -> None:
    found = spans("The Seventh Victim is a 1943 film directed by Mark Robson, starring Tom Conway.")
    assert {"The Seventh Victim", "Mark Robson", "Tom Conway", "Mark", "The"} <= set(found)
    assert "film directed" not in found and "is a 1943" not in found
    assert not any("," in name for name in found)  # a name never runs over a comma


def test_a_passage_names_what_it_mentions_but_not_itself() -> None:
    hits = [Hit("a", 2.0, "Jaws", "Jaws was directed by Steven Spielberg."), Hit("b", 1.0, "X", "Nothing named.")]
    found = candidates("Who directed Jaws?", hits)
    assert found.named_by["Jaws"] == (QUESTION,)  # the passage titled Jaws does not name itself
    assert found.named_by["Steven Spielberg"] == ("a",)


def test_a_linked_passage_comes_right_after_the_passage_that_named_it_and_the_list_is_cut_to_k() -> None:
    first = [Hit("a", 3.0, "A", "names B"), Hit("c", 2.0, "C", ""), Hit("d", 1.0, "D", "")]
    linked = [Hit("b", 9.0, "B", "b text"), Hit("c", 9.0, "C", "again")]
    found = Candidates({"B": ("a",), "C": ("a",)})
    hits, links = ranked(first, linked, found, k=3)
    assert [h.id for h in hits] == ["a", "b", "c"]
    assert hits[1].score == 3.0  # its namer's score, not the lookup's
    assert [(x.name, x.source, x.passage) for x in links] == [("B", "a", "b")]  # c was in the first hop already


def test_a_year_alone_or_a_word_the_text_also_writes_in_lower_case_is_no_name() -> None:
    found = spans("The film was made in 1943. Film critics liked the film; Jaws 2 came later.")
    assert "1943" not in found and "The" not in found and "Film" not in found
    assert "Jaws 2" in found and "Jaws" in found


def test_names_and_titles_are_paired_without_regard_to_case_or_a_disambiguation() -> None:
    first = [Hit("m", 2.0, "Baby Face Morgan", "Directed by Arthur Dreifuss; the film Baby Face MORGAN.")]
    linked = [Hit("d", 5.0, "ARTHUR DREIFUSS (director)", "His life.")]  # a lowercase normalizer's key, say
    found = candidates("Who directed it?", first)
    assert "Arthur Dreifuss" in found.named_by and "Baby Face MORGAN" not in found.named_by  # its own title
    hits, links = ranked(first, linked, found, k=3)
    assert [h.id for h in hits] == ["m", "d"]
    assert [(x.name, x.source, x.passage) for x in links] == [("Arthur Dreifuss", "m", "d")]
