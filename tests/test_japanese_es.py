"""Japanese company documents in real Elasticsearch (7.17 and 8.19): character-sized chunks with their
language, SudachiPy-token BM25 against the single-character analysis, mixed English/Japanese folders,
multilingual e5 dense retrieval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hopsearch.loaders.api import load_jsonl
from hopsearch.loaders.docs import load_docs
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.embedders import E5Embedder
from hopsearch.service.outlines.store import EsOutlineStore
from hopsearch.service.retrieval import bm25_body
from hopsearch.service.store import Store
from hopsearch.service.strategies.steps import JAPANESE_NOTE
from hopsearch.service.types import RetrievalQuery
from tests.dual_fixtures import ChatModel, entities, reason
from tests.ja_corpus import build_corpus, questions
from tests.scopes import bound
from tests.test_dualrag_es import ask


def opts(tmp_path: Path, name: str) -> LoadOptions:
    return LoadOptions(checkpoint=tmp_path / f"{name}.ckpt", dead_letter=tmp_path / f"{name}.dl")


async def passages(store: Store) -> list[dict[str, Any]]:
    response = await store.search(store.settings.passages_alias, {"size": 1000, "query": {"match_all": {}}})
    return [hit["_source"] for hit in response["hits"]["hits"]]


def files(hits: Any) -> list[str]:
    return list(dict.fromkeys(Path(str(h.source.get("path") if hasattr(h, "source") else h)).name for h in hits))


async def test_japanese_documents_index_into_character_sized_chunks(store: Store, tmp_path: Path) -> None:
    corpus = build_corpus(tmp_path / "ja")
    long_doc = "# 社員ハンドブック\n\n" + "\n\n".join(
        p.read_text(encoding="utf-8").split("\n\n", 1)[1] for p in sorted(corpus.glob("*.md"))
    )
    (corpus / "handbook.md").write_text(long_doc.replace("\n#", "\n##"), encoding="utf-8")
    report = await load_docs(store, corpus, opts(tmp_path, "ja"))
    assert report.read == 26 and report.rejected == 0
    found = await passages(store)
    assert {p["lang"] for p in found} == {"ja"}
    assert all(len(p["text"]) <= 600 for p in found)
    handbook = sorted((p for p in found if p["path"].endswith("handbook.md")), key=lambda p: p["chunk"])
    assert len(handbook) >= 5 and all(len(p["text"]) >= 150 for p in handbook[:-1])
    assert all("text_ja_tokens" not in p for p in found)  # searched, not stored in _source
    meta = await store.index_meta()
    assert meta["ja_analysis"] == "sudachi"  # the test zips have no kuromoji plugin
    pdf = next(p for p in found if p["path"].endswith("travel-policy.pdf"))
    assert "出張とします。" in pdf["text"] and " " not in pdf["text"]  # wrapped PDF lines joined without spaces
    tokens = await store.search(
        store.settings.passages_alias, {"query": {"match": {"text_ja_tokens": "日当"}}, "_source": ["path"]}
    )
    assert "travel-policy.pdf" in files(h["_source"]["path"] for h in tokens["hits"]["hits"])


async def test_sudachi_bm25_finds_what_single_characters_miss(store: Store, tmp_path: Path) -> None:
    await load_docs(store, build_corpus(tmp_path / "ja"), opts(tmp_path, "ja"))
    by_id = {q.id: q for q in questions()}
    retriever = bound(store)
    for qid, wanted in (("ja17", "sapporo-center.docx"), ("ja06", "offices.html")):
        question = by_id[qid].question
        [result] = await retriever.search_many([RetrievalQuery(question, k=3)])
        assert wanted in files(result.hits), (qid, files(result.hits))
        single = await store.search(store.settings.passages_alias, bm25_body(RetrievalQuery(question), 3, source=True))
        assert wanted not in files(h["_source"]["path"] for h in single["hits"]["hits"]), qid


async def test_mixed_english_and_japanese_folder_loads_in_one_run(store: Store, tmp_path: Path) -> None:
    root = build_corpus(tmp_path / "mixed")
    for path in sorted(root.iterdir())[:12]:  # welfare.txt (last) stays
        path.unlink()
    (root / "en").mkdir()
    (root / "en" / "leave.md").write_text(
        "# Leave policy\n\nStaff get twenty-five days of paid leave a year. Requests go through the HR portal.\n"
    )
    (root / "en" / "canteen.html").write_text(
        "<html><head><title>Canteen</title></head><body><p>The canteen serves lunch from noon.</p></body></html>"
    )
    report = await load_docs(store, root, opts(tmp_path, "mixed"))
    assert report.rejected == 0 and report.read == 15
    langs = {Path(p["path"]).name: p["lang"] for p in await passages(store)}
    assert langs["leave.md"] == "en" and langs["canteen.html"] == "en"
    assert {lang for name, lang in langs.items() if name not in ("leave.md", "canteen.html")} == {"ja"}
    retriever = bound(store)
    english, japanese = await retriever.search_many(
        [
            RetrievalQuery("how many days of paid leave", k=3),
            RetrievalQuery("保養所の一泊の利用料金はいくらですか", k=3),
        ]
    )
    assert files(english.hits)[0] == "leave.md"
    assert files(japanese.hits)[0] == "welfare.txt"


async def test_multilingual_e5_dense_retrieval(store: Store, tmp_path: Path) -> None:
    root = build_corpus(tmp_path / "dense")
    keep = {"welfare.txt", "offices.html", "remote-work.md", "travel-policy.pdf", "org-chart.md"}
    for path in root.iterdir():
        if path.name not in keep:
            path.unlink()
    e5 = E5Embedder()
    await load_docs(store, root, opts(tmp_path, "dense"), embedder=e5)
    assert (await store.index_meta())["embedder"] == e5.model_id
    retriever = bound(store, e5)
    dense, hybrid = await retriever.search_many(
        [
            RetrievalQuery("社員向けの保養所はどこにありますか", k=2, mode="dense"),
            RetrievalQuery("海外出張の日当はいくら", k=2, mode="hybrid"),
        ]
    )
    assert files(dense.hits)[0] == "welfare.txt" and dense.dense_method != "none"
    assert files(hybrid.hits)[0] == "travel-policy.pdf"


SUMMARIES_JA = {
    "かざぐるまプロジェクト": "かざぐるまの責任者は物流システム部長の高木　俊介である。",
    "高木俊介さん": "高木俊介は２０２５年１０月１日付で物流システム部長になった。",
}


async def test_a_japanese_question_keeps_its_trace_and_outline(store: Store, tmp_path: Path) -> None:
    root = build_corpus(tmp_path / "dual")
    await load_docs(store, root, opts(tmp_path, "dual"))
    prompts: list[str] = []

    def summarize(entity: str, prompt: str) -> str:
        prompts.append(prompt)
        return SUMMARIES_JA.get(entity, "None")

    model = ChatModel(
        {
            "reasoner": [reason("かざぐるまの責任者を調べる。", True), reason("高木俊介の役職を調べる。", True)],
            "identifier": [
                entities(("かざぐるまプロジェクト", ["かざぐるま 責任者"])),
                entities(("高木俊介さん", ["高木俊介 人事異動"])),
            ],
        },
        summaries=summarize,
        answer="物流システム部長",
    )
    question = questions()[0].question
    answer, doc = await ask(store, model, question)
    assert answer.text == "物流システム部長"
    assert prompts and all(JAPANESE_NOTE in p for p in prompts)
    retrieved = [s for s in doc["steps"] if s["kind"] == "retrieve"]
    assert [q for s in retrieved for q in s["queries"]] == ["かざぐるま 責任者", "高木俊介 人事異動"]
    assert doc["question"] == question and doc["answer"] == "物流システム部長"
    hits = [h for s in retrieved for h in s["hit_ids"]]
    found = await store.search(
        store.settings.passages_alias, {"query": {"ids": {"values": hits}}, "_source": ["path"], "size": 100}
    )
    names = files(h["_source"]["path"] for h in found["hits"]["hits"])
    assert "project-kazaguruma.md" in names and "hr-transfer-2025-10.html" in names

    outlines = EsOutlineStore(store)
    takagi = await outlines.get("default", "高木　俊介様")  # another spelling, same key
    assert takagi is not None and [f.summary for f in takagi.facts] == [SUMMARIES_JA["高木俊介さん"]]
    assert takagi.facts[0].question == question and takagi.facts[0].trace_id == answer.trace.trace_id
    project = await outlines.get("default", "「かざぐるま」プロジェクト")
    assert project is not None and "高木" in project.facts[0].summary


async def test_jsonl_records_get_their_language_and_tokens(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    rows = [
        {"_id": "ja1", "title": "出張規程", "text": "海外出張の日当は一日六千円です。"},
        {"_id": "ja2", "title": "福利厚生", "text": "保養所は軽井沢町にあります。"},
        {"_id": "en1", "title": "Travel policy", "text": "The daily allowance abroad is 6,000 yen."},
    ]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    report = await load_jsonl(store, path, opts(tmp_path, "jsonl"))
    assert report.indexed == 3
    langs = {
        hit["_id"]: hit["_source"]["lang"]
        for hit in (await store.search(store.settings.passages_alias, {}))["hits"]["hits"]
    }
    assert langs == {"ja1": "ja", "ja2": "ja", "en1": "en"}
    [result] = await bound(store).search_many([RetrievalQuery("海外出張の日当", k=3)])
    assert [h.id for h in result.hits] == ["ja1"]  # token fields: only Japanese passages, only the match
