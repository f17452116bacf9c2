"""Japanese text without Elasticsearch: language detection, line joins, character chunking, SudachiPy
tokens, the kuromoji mapping and query bodies, the multilingual e5 embedder."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import pytest

from hopsearch.loaders.chunking import chunk_blocks_ja, chunk_document
from hopsearch.loaders.extract import Block, extract
from hopsearch.service.config.settings import Settings
from hopsearch.service.embedders import E5Embedder
from hopsearch.service.outlines.entities import EntityLinker, entity_key
from hopsearch.service.retrieval import bm25_body
from hopsearch.service.store import Store
from hopsearch.service.store.esclient import ServerInfo
from hopsearch.service.strategies.deeprag import DEMONSTRATIONS, FINAL
from hopsearch.service.strategies.dualrag_knowledge import EntitySearch, rerank
from hopsearch.service.strategies.dualrag_prompts import (
    answer_prompt,
    identifier_prompt,
    reasoner_prompt,
    summarizer_prompt,
)
from hopsearch.service.strategies.hyde import decompose_prompt, hyde_prompt
from hopsearch.service.strategies.iterative import assess_prompt
from hopsearch.service.strategies.steps import JAPANESE_NOTE, context_line, single_prompt
from hopsearch.service.text.japanese import annotate, ja_query, tokenizer
from hopsearch.service.text.lang import detect_lang
from hopsearch.service.types import Hit, RetrievalQuery
from tests.ja_corpus import BINARY, PLAIN


def test_language_from_the_script() -> None:
    assert detect_lang("経費精算の締め日はいつですか？") == "ja"
    assert detect_lang("カタカナだけ") == "ja"
    assert detect_lang("Hopsearchの料金") == "ja"  # a Japanese sentence naming an English product
    assert detect_lang("When is the expense deadline?") == "en"
    assert detect_lang("The Tokyo office (東京) opens at nine every weekday morning.") == "en"
    assert detect_lang("") == "en"


def test_japanese_lines_join_without_spaces_and_keep_their_structure() -> None:
    _, blocks = extract(
        ".txt", "経費精算は毎月２５日に締め切り\nます。領収書を添付します。\n・一件五万円まで\n".encode()
    )
    assert blocks == [Block("経費精算は毎月２５日に締め切ります。領収書を添付します。\n・一件五万円まで")]
    _, english = extract(".txt", b"An English line\nwraps here.\n")
    assert english == [Block("An English line wraps here.")]
    _, names = extract(".md", "# 組織\n\n部長：森川　早苗".encode())
    assert names[1].text == "部長：森川　早苗"  # the ideographic space is kept


def _long_paragraphs() -> list[Block]:
    blocks = []
    for path in sorted([*PLAIN.glob("*.md"), *BINARY.glob("*.md")]):
        _, found = extract(".md", path.read_bytes())
        blocks += [b for b in found if not b.level]
    return blocks


def test_japanese_chunks_are_sized_in_characters_with_sentence_overlap() -> None:
    blocks = [Block("長い規程", 1), *_long_paragraphs()]
    assert sum(len(b.text) for b in blocks) > 4000
    chunks = chunk_blocks_ja(blocks)
    assert len(chunks) >= 7
    assert all(len(c.text) <= 600 and c.words == len(c.text) for c in chunks)
    assert all(len(c.text) >= 300 for c in chunks[:-1])
    assert all(c.headings == ("長い規程",) for c in chunks)
    for first, second in itertools.pairwise(chunks):
        head = second.text.split("。")[0]
        assert head in first.text  # the next chunk starts with the previous one's last sentence(s)
    assert all(c.text.rstrip()[-1] in "。！？）」" for c in chunks)  # cut at sentence ends


def test_headings_close_japanese_chunks_and_english_is_unchanged() -> None:
    blocks = [Block("規程", 1), Block("あ" * 200 + "。"), Block("第二章", 2), Block("い" * 100 + "。")]
    chunks = chunk_document(blocks, "ja")
    assert [c.headings for c in chunks] == [("規程",), ("規程", "第二章")]
    english = [Block("Policy", 1), Block(" ".join(["word"] * 250))]
    assert [c.words for c in chunk_document(english, "en")] == [200, 80]


def test_a_sentence_longer_than_the_maximum_is_cut() -> None:
    chunks = chunk_blocks_ja([Block("あ" * 1500)])
    assert [len(c.text) for c in chunks] == [600, 600, 300]


def test_sudachi_tokens_fold_width_and_drop_particles() -> None:
    tokens = tokenizer().tokens("株式会社ハルカゼ精工の森川さんは、２０２５年にＨＫ－３００を導入した。")
    assert "2025" in tokens and "hk" in tokens and "300" in tokens
    assert "の" not in tokens and "は" not in tokens and "、" not in tokens and "。" not in tokens
    assert {"株式", "会社", "導入"} <= set(tokens)
    long_text = "経費精算は毎月２５日に締め切ります。" * 2000  # past Sudachi's own input limit
    assert len(tokenizer().tokens(long_text)) > 10000


def test_annotate_adds_language_and_tokens_by_index_analysis() -> None:
    ja: dict[str, Any] = {"title": "出張規程", "text": "海外出張の日当は一日六千円です。"}
    annotate(ja, "sudachi")
    assert ja["lang"] == "ja" and "日当" in ja["text_ja_tokens"].split() and ja["title_ja_tokens"] == "出張 規程"
    kuro: dict[str, Any] = {"title": "出張規程", "text": "日当は六千円です。"}
    annotate(kuro, "kuromoji")
    assert kuro["lang"] == "ja" and "text_ja_tokens" not in kuro
    en: dict[str, Any] = {"title": "Travel", "text": "The daily allowance is 6000 yen."}
    annotate(en, "sudachi")
    assert en["lang"] == "en" and "text_ja_tokens" not in en
    old: dict[str, Any] = {"title": "出張", "text": "日当", "lang": "ja"}
    annotate(old, None)  # an index made before languages were stored has no lang field
    assert "lang" not in old


def _store(modules: set[str]) -> Store:
    info = ServerInfo(number="8.19.21", modules=frozenset(modules))
    return Store(Settings(es_url=["http://127.0.0.1:9"], embedder="none"), None, info)  # type: ignore[call-arg]


def test_kuromoji_cluster_gets_kuromoji_sub_fields_and_raw_queries() -> None:
    body = _store({"analysis-common", "analysis-kuromoji"}).passages_body(None)
    props = body["mappings"]["properties"]
    assert props["text"]["fields"]["ja"] == {"type": "text", "analyzer": "kuromoji"}
    assert props["title"]["fields"]["ja"] == {"type": "text", "analyzer": "kuromoji"}
    assert "text_ja_tokens" not in props and "_source" not in body["mappings"]
    assert body["mappings"]["_meta"]["hopsearch"]["ja_analysis"] == "kuromoji"
    assert props["lang"] == {"type": "keyword"}
    question = "海外出張の日当はいくらですか"
    match = bm25_body(RetrievalQuery(question), 5, ja=ja_query(question, {"ja_analysis": "kuromoji"}))
    multi = match["query"]["bool"]["must"][0]["multi_match"]
    assert multi["fields"] == ["title.ja", "text.ja"] and multi["query"] == question


def test_cluster_without_kuromoji_gets_token_fields_and_tokenised_queries() -> None:
    body = _store({"analysis-common"}).passages_body(None)
    props = body["mappings"]["properties"]
    assert props["text_ja_tokens"] == {"type": "text", "analyzer": "whitespace"}
    assert "fields" not in props["text"]
    assert body["mappings"]["_source"] == {"excludes": ["title_ja_tokens", "text_ja_tokens"]}
    assert body["mappings"]["_meta"]["hopsearch"]["ja_analysis"] == "sudachi"
    question = "海外出張の日当はいくらですか"
    multi = bm25_body(RetrievalQuery(question), 5, ja=ja_query(question, {"ja_analysis": "sudachi"}))["query"]
    match = multi["bool"]["must"][0]["multi_match"]
    assert match["fields"] == ["title_ja_tokens", "text_ja_tokens"]
    assert match["query"] == "海外 出張 日当 いくら"
    assert ja_query("What is the daily allowance?", {"ja_analysis": "sudachi"}) is None  # English: standard fields
    assert ja_query(question, {}) is None  # an index made before languages were stored


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    return E5Embedder()


async def test_e5_uses_query_and_passage_prefixes(e5: E5Embedder) -> None:
    passages = await e5.embed(["経費精算の締め日は毎月２５日です。", "保養所は軽井沢町にあります。"])
    queries = await e5.embed_queries(["経費精算の締め日はいつですか？"])
    assert e5.dims == 384 and all(len(v) == 384 for v in passages + queries)
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-3) for v in passages + queries)

    def dot(a: list[float], b: list[float]) -> float:
        return math.fsum(x * y for x, y in zip(a, b, strict=True))

    assert dot(queries[0], passages[0]) > dot(queries[0], passages[1])
    same_text_as_passage = await e5.embed(["経費精算の締め日はいつですか？"])
    assert dot(same_text_as_passage[0], queries[0]) < 0.999  # the prefixes differ


def test_japanese_entity_keys_fold_width_spaces_and_honorifics() -> None:
    assert entity_key("森川　早苗さん") == entity_key("森川早苗") == entity_key("森川 早苗様") == "森川早苗"
    assert entity_key("ﾊﾙｶｾﾞ精工") == entity_key("ハルカゼ精工") == "ハルカゼ精工"  # dakuten kept
    assert entity_key("ガラス") != entity_key("カラス")
    assert entity_key("「かざぐるま」プロジェクト") == "かざぐるまプロジェクト"
    assert entity_key("東邦ロジスティクス（取引先）") == "東邦ロジスティクス"
    assert entity_key("山田氏") == "山田" and entity_key("源氏") == "源氏"  # one character left: kept
    assert entity_key("ＨＫ－３００") == entity_key("HK-300")
    assert entity_key("Jaws (film)") == "jaws" and entity_key("Spielberg's") == "spielberg"
    linker = EntityLinker()
    first = linker.link("高木　俊介")
    second = linker.link("高木俊介さん")
    assert first is not None and second is not None and second.how == "key" and second.entity is first.entity


def test_prompts_ask_for_answers_in_the_question_language() -> None:
    ja, en = "かざぐるまの責任者は誰ですか？", "Who leads the project?"
    hits = [Hit("p1", 1.0, "かざぐるま", "責任者は高木です。")]
    ja_prompts = [
        single_prompt(ja, context_line(hits)),
        reasoner_prompt(ja, "", []),
        identifier_prompt(ja, "", [], []),
        summarizer_prompt(ja, "かざぐるま", "", [], hits),
        answer_prompt(ja, "", []),
        assess_prompt(ja, hits, [ja]),
        decompose_prompt(ja),
        hyde_prompt(ja),
    ]
    assert all(p.startswith(JAPANESE_NOTE) for p in ja_prompts)
    assert single_prompt(ja, "Context:").endswith("Answer:")  # the answer format is unchanged
    en_prompts = [single_prompt(en, "Context:"), answer_prompt(en, "", []), hyde_prompt(en), assess_prompt(en, [], [])]
    assert not any(JAPANESE_NOTE in p for p in en_prompts)
    assert "Follow up:" in DEMONSTRATIONS and FINAL == "\nSo the final answer is:"  # DeepRAG keeps its markers


async def test_dualrag_rerank_embeds_entity_names_as_queries(e5: E5Embedder) -> None:
    calls: list[str] = []

    class Recording(E5Embedder):
        async def embed(self, texts: Sequence[str]) -> list[list[float]]:
            calls.append("passage")
            return await super().embed(texts)

        async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
            calls.append("query")
            return await super().embed_queries(texts)

    hits = [
        Hit("a", 1.0, "拠点一覧", "本社は横浜市西区にあります。"),
        Hit("b", 0.9, "福利厚生", "保養所は軽井沢町にあり、一泊三千円で利用できます。"),
    ]
    searches = [EntitySearch("保養所", "保養所", ("保養所 料金",))]
    ranked = await rerank(Recording(), searches, {"保養所": hits})
    assert [h.id for h in ranked["保養所"]] == ["b", "a"]
    assert calls == ["query", "passage"]
