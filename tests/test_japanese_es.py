"""Japanese company documents in real Elasticsearch (7.17 and 8.19): character-sized chunks with their
language, SudachiPy-token BM25 against the single-character analysis, mixed English/Japanese folders,
multilingual e5 dense retrieval."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hopsearch.loaders.docs import load_docs
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.embedders import E5Embedder
from hopsearch.service.retrieval import EsRetriever, bm25_body
from hopsearch.service.store import Store
from hopsearch.service.types import RetrievalQuery
from tests.ja_corpus import build_corpus, questions


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
    retriever = EsRetriever(store)
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
    retriever = EsRetriever(store)
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
    retriever = EsRetriever(store, e5)
    dense, hybrid = await retriever.search_many(
        [
            RetrievalQuery("社員向けの保養所はどこにありますか", k=2, mode="dense"),
            RetrievalQuery("海外出張の日当はいくら", k=2, mode="hybrid"),
        ]
    )
    assert files(dense.hits)[0] == "welfare.txt" and dense.dense_method != "none"
    assert files(hybrid.hits)[0] == "travel-policy.pdf"
