"""Attached indices without Elasticsearch: the connectors' identities, the access clause over a mapped ACL
field, the presets and the mapping checks, filters over mapped names, and the bodies the planner builds
from a field map (hopsearch's own passages are the default map, with the same bodies as before)."""

from __future__ import annotations

from typing import Any

import pytest

from hopsearch.service.access import NOTHING, AclRule, Caller, Scope, access_clause, connector_principal
from hopsearch.service.access import connector_values as values_of
from hopsearch.service.attached.checks import check_fields, mapped_fields, title_key, vector_mode
from hopsearch.service.attached.fieldmap import HOPSEARCH_FIELDS, Attachment, FieldMap, LinkKey, TitleKey, field_map
from hopsearch.service.errors import ConfigError
from hopsearch.service.retrieval.bodies import excerpt_of
from hopsearch.service.retrieval.planner import Capabilities, IndexFacts, plan, scoped
from hopsearch.service.retrieval.results import EXCERPT_LIMIT, hits_of
from hopsearch.service.store.esclient import ServerInfo
from hopsearch.service.text.japanese import ja_query
from hopsearch.service.types import RetrievalQuery

CONNECTOR = Attachment("sharepoint", field_map("elastic-connector"), identities="elastic-connector")
CAROL = Caller.of(["user:carol@corp.com", "group:hr-team", "public"])


@pytest.mark.parametrize(
    ("value", "principal"),
    [
        ("email:Carol@Corp.com", "user:carol@corp.com"),
        ("user_id:12345", "user:12345"),
        ("account_id:5b10a2844c20165700ede21g", "user:5b10a2844c20165700ede21g"),
        ("group:HR-Team", "group:hr-team"),
        ("group_id:abc", "group:abc"),
        ("staff-42", "group:staff-42"),
        ("email:", "group:email:"),
    ],
)
def test_connector_values_name_principals(value: str, principal: str) -> None:
    assert connector_principal(value) == principal


def test_connector_values_invert_the_mapping() -> None:
    values = values_of(sorted(CAROL.principals))
    assert {connector_principal(v) for v in values} <= set(CAROL.principals)
    assert "email:carol@corp.com" in values and "hr-team" in values and "group:hr-team" in values
    assert not any(v.startswith("public") for v in values)  # connectors have no public value
    assert values_of(["user:alice"]) == ["account_id:alice", "email:alice", "user:alice", "user_id:alice"]


def test_the_access_clause_over_a_connector_field() -> None:
    clause = access_clause(CAROL, "private", CONNECTOR.acl)
    email, ids = clause["bool"]["should"]
    assert email == {"term": {"_allow_access_control": {"value": "email:carol@corp.com", "case_insensitive": True}}}
    assert {"email:carol@corp.com", *ids["terms"]["_allow_access_control"]} == set(values_of(CAROL.principals))
    assert access_clause(Caller.of(["public"]), "private", CONNECTOR.acl) == NOTHING
    public = access_clause(CAROL, "public", CONNECTOR.acl)
    assert public["bool"]["should"][1] == {"bool": {"must_not": [{"exists": {"field": "_allow_access_control"}}]}}
    # no ACL field: nobody but an admin reads anything, whatever acl_default says
    assert access_clause(CAROL, "public", AclRule(None)) == NOTHING
    assert access_clause(CAROL) == {"terms": {"acl": ["group:hr-team", "public", "user:carol@corp.com"]}}


def test_presets_and_named_fields() -> None:
    crawler = field_map("elastic-crawler")
    assert (crawler.title, crawler.text, crawler.also, crawler.acl) == ("title", "body_content", ("headings",), None)
    connector = field_map("elastic-connector", text="content")
    assert (connector.text, connector.acl, connector.url) == ("content", "_allow_access_control", "url")
    with pytest.raises(ConfigError, match="--text-field is required"):
        field_map(None, title="headline")
    with pytest.raises(ConfigError, match="unknown layout"):
        field_map("sharepoint")
    assert Attachment.from_doc(CONNECTOR.to_doc()) == CONNECTOR


MAPPING = {
    "properties": {
        "title": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
        "body": {"type": "text"},
        "url": {"type": "keyword"},
        "_allow_access_control": {"type": "keyword"},
        "metadata": {"properties": {"author": {"properties": {"name": {"type": "keyword"}}}}},
        "vec": {"type": "dense_vector", "dims": 16, "index": True},
        "flat": {"type": "dense_vector", "dims": 16, "index": False},
    }
}


def test_mapping_checks_name_the_field() -> None:
    mapped = mapped_fields(MAPPING)
    assert mapped["title.keyword"]["type"] == "keyword" and mapped["metadata.author.name"]["type"] == "keyword"
    check_fields("sp", field_map("elastic-connector", id="url"), mapped)
    with pytest.raises(ConfigError, match=r"has no field \[id\] \(the id field\)") as missing:
        check_fields("sp", field_map("elastic-connector"), mapped)
    assert missing.value.details == {"index": "sp", "field": "id", "role": "id"}
    with pytest.raises(ConfigError, match=r"field \[url\] of index \[sp\] \(the text field\) is keyword"):
        check_fields(
            "sp", FieldMap(title="title", text="url", vector=None, acl=None, lang=None, url=None, id=None), mapped
        )
    assert vector_mode(mapped["vec"], 8, "knn") == "knn"
    assert vector_mode(mapped["flat"], 8, "knn") == "rerank"  # script_score needs painless: cosine here
    assert vector_mode({"type": "dense_vector", "dims": 16}, 7, "script_score") == "script_score"
    assert vector_mode({"type": "float"}, 7, "rerank") == "rerank"


def test_filters_and_readers_follow_the_attachment() -> None:
    wiki = Attachment(
        "wiki",
        FieldMap(title="headline", text="content", vector="vec", acl=None, lang=None, url="link", id="ref"),
        lang="ja",
    )
    filters = (
        {"term": {"doc_id": "REF-1"}},
        {"bool": {"should": [{"exists": {"field": "url"}}, {"terms": {"title.keyword": ["X"]}}]}},
        {"term": {"metadata.team": "film"}},
        {"terms": {"lang": ["en"]}},
        {"term": {"lang": "ja"}},
    )
    bound = wiki.bind(Scope("wiki", CAROL, filters))
    assert bound.filters == (
        {"term": {"ref": "REF-1"}},
        {"bool": {"should": [{"exists": {"field": "link"}}, {"terms": {"headline.keyword": ["X"]}}]}},
        {"term": {"metadata.team": "film"}},
        {"bool": {"must_not": [{"match_all": {}}]}},  # every document is Japanese (--lang ja)
        {"match_all": {}},
    )
    assert bound.access() == (NOTHING,) and bound.acl_default == "private"


def test_bodies_use_the_field_map_and_our_own_stay_as_they_were() -> None:
    info = ServerInfo(number="8.19.0", modules=frozenset())
    wiki = Attachment(
        "wiki",
        FieldMap(
            title="headline", text="content", also=("tags",), vector="vec", acl=None, lang=None, url=None, id=None
        ),
        embedder="openai:e",
        dims=2,
        vector_mode="knn",
    )
    facts = IndexFacts.attached(wiki)
    queries = [RetrievalQuery("who directed", k=3, mode="hybrid")]
    scope = facts.bind(Scope("wiki", CAROL))
    planned = plan(scoped(queries, scope), scope, facts, Capabilities(info), method="knn", vectors={0: [1.0, 0.0]})
    bm25, dense, gap = (body for _, body in planned.searches)
    assert bm25["query"]["bool"]["must"][0]["multi_match"]["fields"] == ["headline", "content", "tags"]
    assert bm25["query"]["bool"]["filter"] == [NOTHING] and bm25["_source"] == {"excludes": ["vec"]}
    assert dense["knn"]["field"] == "vec" and dense["knn"]["filter"] == [NOTHING]
    assert gap["query"]["bool"]["must_not"] == [{"exists": {"field": "vec"}}]
    # a Japanese question searches an attached index's fields as they are (no SudachiPy tokens there)
    assert ja_query("黒澤明の映画", facts.meta) is None
    ours = IndexFacts("hopsearch-passages", {"embedder": "e", "vector_mode": "knn"})
    assert ours.fields is HOPSEARCH_FIELDS
    own = plan(queries, Scope("p", CAROL), ours, Capabilities(info), method="knn", vectors={0: [1.0, 0.0]})
    assert own.searches[0][1]["query"]["bool"]["must"][0]["multi_match"]["fields"] == ["title", "text"]
    assert own.searches[1][1]["knn"]["field"] == "embedding" and own.searches[1][1]["_source"] == {
        "excludes": ["embedding"]
    }


def test_hits_of_an_attached_index_carry_excerpts_of_whole_documents() -> None:
    fields = FieldMap(title="headline", text="content", vector="vec", acl=None, lang=None, url=None, id=None)
    whole = " ".join(f"word{n}" for n in range(2000))
    raw = {"_id": "d1", "_score": 2.0, "_source": {"headline": ["A", "B"], "content": whole, "vec": [0.1, 0.2]}}
    found = {"hits": {"hits": [raw, {**raw, "_id": "d2", "highlight": {"content": ["word7 word8", "word99"]}}]}}
    opening, excerpts = hits_of(found, fields)
    assert opening.title == "A\nB" and "vec" not in opening.source and opening.source["content"] == whole
    assert (
        opening.text.startswith("word0 word1")
        and opening.text.endswith(" …")
        and len(opening.text) <= EXCERPT_LIMIT + 2
    )
    assert excerpts.text == "word7 word8 … word99"
    assert excerpt_of("content")["fields"]["content"]["number_of_fragments"] == 3


RAW = {"type": "keyword"}
FOLDED = {"type": "keyword", "normalizer": "lowercase"}


@pytest.mark.parametrize(
    ("title", "normalizers", "key"),
    [
        ({"type": "keyword"}, {}, LinkKey("name")),  # the title field itself
        ({"type": "text", "fields": {"raw": RAW}}, {}, LinkKey("name.raw")),  # a sub-field of any name
        ({"type": "text", "fields": {"a": RAW, "keyword": RAW}}, {}, LinkKey("name.keyword")),
        ({"type": "text", "fields": {"a": FOLDED, "z": RAW}}, {}, LinkKey("name.z")),  # exact first
        ({"type": "text", "fields": {"lc": FOLDED}}, {}, LinkKey("name.lc", "lowercase")),
        (
            {"type": "text", "fields": {"lc": {"type": "keyword", "normalizer": "mine"}}},
            {"mine": {"type": "custom", "filter": ["lowercase"]}},
            LinkKey("name.lc", "lowercase"),
        ),
    ],
)
def test_the_hop_looks_titles_up_in_a_keyword_field_of_the_title(
    title: dict[str, Any], normalizers: dict[str, Any], key: LinkKey
) -> None:
    mapped = mapped_fields({"properties": {"name": title, "body": {"type": "text"}}})
    assert title_key("name", mapped, normalizers) == TitleKey(key)


def test_an_index_without_a_keyword_title_field_cannot_hop_and_says_why() -> None:
    text_only = mapped_fields({"properties": {"name": {"type": "text"}}})
    assert title_key("name", text_only) == TitleKey(None, "its title field [name] is text without a keyword sub-field")
    folding = {"type": "keyword", "normalizer": "folding"}
    odd = mapped_fields({"properties": {"name": {"type": "text", "fields": {"f": folding}}}})
    found = title_key("name", odd, {"folding": {"filter": ["lowercase", "asciifolding"]}})
    assert found.key is None and "[name.f] normalizer [folding]" in found.why
    attachment = Attachment("kb", FieldMap(title="name", text="body"), title_key=found)
    facts = IndexFacts.attached(attachment)
    assert facts.link_key is None and facts.hop_note.startswith("index [kb] cannot hop: the keyword fields")


def test_the_title_key_is_recorded_and_an_old_record_has_none() -> None:
    fields = FieldMap(title="name", text="body")
    found = Attachment("kb", fields, title_key=TitleKey(LinkKey("name.lc", "lowercase")))
    again = Attachment.from_doc(found.to_doc())
    assert again == found and IndexFacts.attached(again).link_key == LinkKey("name.lc", "lowercase")
    none = Attachment("kb", fields, title_key=TitleKey(None, "why not"))
    assert Attachment.from_doc(none.to_doc()) == none
    old = {key: value for key, value in found.to_doc().items() if key != "title_key"}  # attached before hops
    assert Attachment.from_doc(old).title_key is None
    assert IndexFacts.managed("hopsearch-passages", {"schema_version": 3}).link_key == LinkKey("title.keyword")
    assert IndexFacts.managed("hopsearch-passages", {"schema_version": 4}).link_key == LinkKey("title.key", "lowercase")
