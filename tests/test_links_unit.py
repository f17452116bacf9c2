"""The hop's pure parts (:mod:`hopsearch.service.retrieval.links`): which spans of a text are names (English
and Japanese), what named each, the bodies that look them up, and the ranking that puts a linked passage right
after the passage that named it and gives a repeated document's place to a mention."""

from __future__ import annotations

from hopsearch.service.attached.fieldmap import LinkKey
from hopsearch.service.retrieval.links import (
    PREFIXES,
    QUESTION,
    Candidates,
    candidates,
    lookup_body,
    mention_body,
    mentioned_by,
    ranked,
    spans,
)
from hopsearch.service.text.japanese import tokenizer
from hopsearch.service.types import Hit, RetrievalQuery


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


def test_a_possessive_ends_a_name_and_an_initial_gets_its_full_stop() -> None:
    found = spans("When was Karijotas's father born? Music by Sundar C Babu and Lau Lauritzen Sr. directed it.")
    assert "Karijotas" in found and "Karijotas's" not in found
    assert "Sundar C. Babu" in found and "Lau Lauritzen Sr." in found and "Lau Lauritzen Sr" in found
    assert "C" not in found  # one letter names nothing


def test_the_lookup_asks_each_name_as_a_whole_title_and_with_a_disambiguation_under_the_filters() -> None:
    query = RetrievalQuery("q", k=5, filters=({"terms": {"acl": ["public"]}},))
    key = LinkKey("title.key", "lowercase")
    body = lookup_body(query, ["Mark Robson", "Robson"], key, True, scored_by={"match": {"text": "q"}})
    titled, scope = body["query"]["bool"]["filter"]
    assert scope == {"terms": {"acl": ["public"]}}
    assert titled["bool"]["should"] == [
        {"terms": {"title.key": ["mark robson", "robson"]}},  # the key holds titles lower-cased
        {"prefix": {"title.key": "mark robson ("}},  # one word's disambiguations are no names
    ]
    assert body["query"]["bool"]["should"] == [{"match": {"text": "q"}}]  # scored by the question only
    exact = lookup_body(query, ["Mark Robson"], LinkKey("title.keyword"), True)["query"]["bool"]["filter"][0]
    assert exact["bool"]["should"][0] == {"terms": {"title.keyword": ["Mark Robson"]}}  # before schema 4
    many = [f"Name {n}" for n in range(PREFIXES + 5)]
    assert len(lookup_body(query, many, key, True)["query"]["bool"]["filter"][0]["bool"]["should"]) == PREFIXES + 1


def test_a_passage_the_question_names_leads_and_names_too() -> None:
    first = [
        Hit("x", 9.0, "Other", "Unrelated."),
        Hit("f", 5.0, "Divergence (film)", "Divergence is directed by Benny Chan."),
    ]
    found = candidates("Who directed Divergence (Film)?", first, namers=1)  # f is no top-1 passage
    assert found.named_by["Benny Chan"] == ("f",)
    linked = [Hit("b", 1.0, "Benny Chan (film director)", "Born 1961.")]
    hits, links = ranked(first, linked, found, k=3)
    assert [h.id for h in hits] == ["f", "b", "x"]
    assert [(x.name, x.source, x.passage) for x in links] == [("Benny Chan", "f", "b")]


def test_one_passage_of_a_linked_title_and_a_repeated_document_gives_its_place_to_a_mention() -> None:
    def chunk(pid: str, doc: str, title: str, text: str = "") -> Hit:
        return Hit(pid, 1.0, title, text, {"doc_id": doc})

    first = [chunk("a0", "A", "Minutes", "The plant Hokuriku Works stopped."), chunk("a1", "A", "Minutes")]
    first += [chunk("c0", "C", "Org chart")]
    found = candidates("Which plant stopped?", first, mentions=True)
    assert found.mentions["Hokuriku Works"] == "a0"
    mentioned = [("Hokuriku", chunk("h0", "H", "Site: Hokuriku Works")), ("Hokuriku Works", chunk("c1", "C", "x"))]
    hits, links = ranked(first, [], found, k=3, mentioned=mentioned)
    assert [h.id for h in hits] == ["a0", "h0", "c0"]  # a1 (A again) gave its place; C kept its own
    assert [(x.name, x.source, x.passage) for x in links] == [("Hokuriku", "a0", "h0")]
    assert ranked(first, [], found, k=3)[0] == first  # nothing mentioned: the first hop as it was


def test_a_mention_search_names_each_phrase_and_keeps_the_scope() -> None:
    query = RetrievalQuery("q", k=5, filters=({"terms": {"acl": ["public"]}},))
    body = mention_body(query, [("北陸 工場", ("title_ja_tokens", "text_ja_tokens"))], ["A"], True)
    bool_query = body["query"]["bool"]
    assert bool_query["filter"] == [{"terms": {"acl": ["public"]}}]
    assert bool_query["must_not"] == [{"terms": {"doc_id": ["A"]}}]
    clauses = bool_query["must"][0]["bool"]["should"]
    assert clauses[0] == {"match_phrase": {"title_ja_tokens": {"query": "北陸 工場", "_name": "0", "boost": 2.0}}}
    assert mentioned_by({"matched_queries": ["1", "0"]}, ["北陸", "北陸工場"]) == "北陸工場"  # the longest


def test_japanese_names_are_runs_of_nouns_with_a_proper_noun_a_code_or_katakana_variants_folded() -> None:
    names = tokenizer().names("書記：石井 由香。防水材「アクアボンドＸ２」を北陸工場で製造。責任者は山﨑部長。")
    assert {"石井由香", "アクアボンドX2", "北陸工場", "山崎"} <= set(names)  # 﨑 folded; full width to ASCII
    assert "書記" not in names and "製造" not in names  # common nouns alone name nothing
    for name in ("石井由香", "北陸工場", "山崎"):  # each with its words as the SudachiPy fields hold them
        assert names[name] == tokenizer().joined(name), name
