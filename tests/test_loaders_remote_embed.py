"""A load with a remote embedder (OpenAI-compatible, scripted, real HTTP on loopback) keeps the server
busy (issue 33): batches of the next loader batch are at the server while the last one's are still
there, never more at once than ``embed_concurrency``, and every document gets its own vector."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hopsearch.loaders.api import load_jsonl
from hopsearch.service.embedders.openai import OpenAIEmbedder
from hopsearch.service.store import Store
from tests.scripted_embeddings import ScriptedEmbeddings
from tests.test_loaders_es import options

DOCS = 96
LOADER_BATCH = 12
EMBED_BATCH = 4  # three requests per loader batch


def write_corpus(path: Path) -> Path:
    rows = [
        {"_id": str(i), "title": f"Doc {i}", "text": f"passage number {i} about topic {i % 7}"} for i in range(DOCS)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def loader_batch_of(text: str) -> int:
    return int(text.split("\n", 1)[0].removeprefix("Doc ")) // LOADER_BATCH


async def test_a_load_with_a_remote_embedder_overlaps_its_batches(store8: Store, tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    with ScriptedEmbeddings(dims=8, slots=8, batch_s=0.05) as server:
        embedder = OpenAIEmbedder(server.base_url, "scripted-embed", dims=8, batch_size=EMBED_BATCH, concurrency=5)
        try:
            report = await load_jsonl(
                store8, corpus, options(tmp_path, batch_size=LOADER_BATCH, workers=2), embedder=embedder
            )
        finally:
            await embedder.aclose()
        served = list(server.served)
        assert report.indexed == DOCS and len(served) == DOCS // EMBED_BATCH
        # more than one loader batch's requests were being served at one instant
        crossing = [
            (a, b)
            for a in served
            for b in served
            if loader_batch_of(a.texts[0]) < loader_batch_of(b.texts[0]) and b.start < a.end and a.start < b.end
        ]
        assert crossing, "no request of a later loader batch reached the server while an earlier one's was there"
        assert 3 < server.max_in_flight <= 5  # beyond one loader batch's three, within embed_concurrency
    await store8.refresh()
    body = {"size": DOCS, "_source": ["title"], "docvalue_fields": ["embedding"]}  # 8.19: not in _source
    hits = (await store8.search(store8.settings.passages_alias, body))["hits"]["hits"]
    assert len(hits) == DOCS
    for hit in hits:
        title = hit["_source"]["title"]
        text = f"passage number {title.removeprefix('Doc ')} about topic {int(title.removeprefix('Doc ')) % 7}"
        assert hit["fields"]["embedding"][0] == pytest.approx(server.vector(f"{title}\n{text}"), abs=1e-6)
