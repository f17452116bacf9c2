"""Chunks loaded with ``--no-embed`` get their vectors on a later load with the embedder (issue 13, item 2),
and dense/hybrid results say when part of the index has no vectors."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from hopsearch.loaders.api import load_docs, load_dpr
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.llm import LLMClient
from hopsearch.service.store import Store
from hopsearch.service.strategies import AskOptions
from hopsearch.service.strategies.registry import build_strategy
from hopsearch.service.traces.recorder import MemoryTraceSink
from hopsearch.service.types import RetrievalQuery, SearchResult
from tests.llm_fixtures import PASSAGES, ListRetriever, server_for, settings_for
from tests.loader_files import write_dpr
from tests.scopes import asking, bound
from tests.test_loaders_docs import build_tree, opts
from tests.test_loaders_es import options
from tests.vector_readback import held_vectors


async def without_vectors(store: Store) -> int:
    """Documents without a vector, read back (:func:`~tests.vector_readback.held_vectors`)."""
    await store.refresh()
    return sum(1 for _, vector in (await held_vectors(store)).values() if not vector)


async def test_docs_no_embed_then_embedding_load_gives_every_chunk_a_vector(
    store: Store, tmp_path: Path, minilm: MiniLMEmbedder
) -> None:
    await store.ensure_indices(minilm)  # an index that holds vectors
    root = tmp_path / "docs"
    build_tree(root)
    bare = await load_docs(store, root, opts(tmp_path))  # --no-embed
    chunks = await store.count()
    assert bare.indexed == 5 and await without_vectors(store) == chunks > 0

    retriever = bound(store, minilm)
    [partial] = await retriever.search_many([RetrievalQuery("quarterly revenue", mode="hybrid", k=3)])
    assert partial.without_vectors == chunks  # the result says so: dense cannot see these chunks

    embedded = await load_docs(store, root, opts(tmp_path), embedder=minilm)
    assert (embedded.indexed, embedded.skipped) == (5, 0)  # same content, but no vectors yet
    assert await store.count() == chunks and await without_vectors(store) == 0
    [full] = await retriever.search_many([RetrievalQuery("quarterly revenue", mode="dense", k=3)])
    assert full.without_vectors == 0 and full.hits

    again = await load_docs(store, root, opts(tmp_path), embedder=minilm)
    assert (again.indexed, again.skipped) == (0, 5)  # now complete: skipped
    no_embed_again = await load_docs(store, root, opts(tmp_path))
    assert (no_embed_again.indexed, no_embed_again.skipped) == (0, 5)  # unchanged files keep their vectors
    assert await without_vectors(store) == 0


async def test_dpr_no_embed_then_resume_with_the_embedder_adds_vectors(
    store: Store, tmp_path: Path, minilm: MiniLMEmbedder
) -> None:
    await store.ensure_indices(minilm)
    path = tmp_path / "psgs.tsv"
    write_dpr(path, 50)
    bare = await load_dpr(store, path, options(tmp_path, resume=True))  # the README's --no-embed --resume
    assert bare.indexed == 50 and await without_vectors(store) == 50
    embedded = await load_dpr(store, path, options(tmp_path, resume=True), embedder=minilm)
    assert embedded.indexed == 50 and embedded.extra.get("restarted")
    assert await store.count() == 50 and await without_vectors(store) == 0


class HalfEmbeddedRetriever(ListRetriever):
    """The list retriever, answering as a hybrid search over an index where 7 documents have no vector."""

    async def search_many(self, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        results = await super().search_many(queries)
        return [dataclasses.replace(r, mode="hybrid", dense_method="knn", without_vectors=7) for r in results]


async def test_a_strategy_trace_says_when_part_of_the_index_has_no_vectors() -> None:
    sink = MemoryTraceSink()
    with server_for("vllm", lambda request: " Richard Donner") as server:
        async with LLMClient(settings_for(server)) as llm:
            single = build_strategy(
                "single", llm=llm, retriever=HalfEmbeddedRetriever(PASSAGES), sink=sink, settings=settings_for(server)
            )
            answer = await single.answer(asking("Who directed Lethal Weapon?", AskOptions(retrieval_mode="hybrid")))
    [step] = [s for s in sink.documents[answer.trace.trace_id]["steps"] if s["kind"] == "retrieve"]
    assert step["details"] == {"without_vectors": 7}
