"""``HOPSEARCH_VECTOR_INDEX`` and vectors out of ``_source`` (issue 31), on real Elasticsearch 7.17, 8.19, 9.2.

- What ``auto`` picks per version and dimensions, and every explicit value a version lacks refused naming
  the version (pure; the accepted ones were checked against the real 8.19.21 and 9.2.4 nodes below).
- Each value a version supports creates the mapping it names (``index_options.type``), records it in the
  index ``_meta`` and in every dense and hybrid result, and answers dense and hybrid queries (MiniLM).
- Vectors are absent from ``_source`` on 8.19 (``_source.excludes``) and 9.2 (its default): GET a document.
- An ACL change (whole documents re-sent, ``--no-embed``) and a ``--rebuild`` (a new index version, the
  passages it does not rewrite copied client-side) keep dense retrieval: the same top hits, the same
  vectors, none embedded again (read back: ``_source`` on 7.17, by name on 9.2, doc values on 8.19).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from hopsearch.loaders.api import load_docs, load_jsonl
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.errors import ConfigError
from hopsearch.service.retrieval.bodies import fused_body, knn_clause
from hopsearch.service.store import Store
from hopsearch.service.store.esclient import ServerInfo
from hopsearch.service.store.indices import SCHEMA_VERSION
from hopsearch.service.store.vector_index import KINDS, KnnOptions, choose_vector_index, knn_options, vector_bytes
from hopsearch.service.types import RetrievalQuery, SearchResult
from tests.conftest import EsNode
from tests.scopes import bound
from tests.test_loaders_docs import opts
from tests.test_loaders_es import options
from tests.test_permissions_loaders import CountingEmbedder
from tests.vector_readback import held_vectors

CORPUS = [
    ("river", "Rhine", "The Rhine is a river that flows from the Swiss Alps through Germany to the North Sea."),
    ("piano", "Piano", "The piano is a keyboard instrument whose hammers strike strings inside a wooden case."),
    ("volcano", "Etna", "Mount Etna is an active volcano on the east coast of Sicily, erupting lava often."),
    ("bread", "Sourdough", "Sourdough bread is leavened with a fermented starter of flour and water."),
    ("chess", "Chess", "Chess is a board game for two players who move kings, queens, rooks and pawns."),
    ("comet", "Halley", "Halley's Comet is seen from Earth every 75 years as it nears the Sun."),
    ("violin", "Violin", "The violin is a bowed string instrument, the smallest of its family."),
    ("glacier", "Aletsch", "The Aletsch Glacier is the largest glacier of the Alps, in Switzerland."),
]
#: A question and the passage it is about (words shared with the text, so BM25 agrees with dense).
QUESTIONS = [
    ("which volcano erupts on Sicily", "volcano"),
    ("a keyboard instrument with hammers and strings", "piano"),
    ("a river flowing to the North Sea", "river"),
]


class OddEmbedder:
    """An embedder of 385 dimensions (int4 needs an even number); never asked to embed here."""

    model_id = "odd-385"
    dims = 385

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise AssertionError("not embedded: the index is refused first")


def info(number: str) -> ServerInfo:
    return ServerInfo(number, frozenset({"analysis-common", "lang-painless"}))


# --- what each version takes (pure) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "dims", "oversample", "expected"),
    [
        ("7.17.29", 384, 3.0, None),  # no vector index: as before
        ("8.10.4", 384, 3.0, "hnsw"),
        ("8.12.2", 384, 3.0, "int8_hnsw"),
        ("8.17.1", 384, 3.0, "int8_hnsw"),  # bbq, but no rescore_vector to oversample it yet
        ("8.19.21", 384, 3.0, "bbq_hnsw"),
        ("8.19.21", 256, 3.0, "int8_hnsw"),  # below 384 dimensions
        ("8.19.21", 768, 0.0, "int8_hnsw"),  # no oversampling asked: bbq alone loses recall
        ("9.2.4", 384, 3.0, "bbq_hnsw"),
    ],
)
def test_auto_is_the_best_the_version_offers(version: str, dims: int, oversample: float, expected: str) -> None:
    assert choose_vector_index("auto", info(version), dims, oversample) == expected


def test_an_explicit_value_the_version_lacks_is_refused_naming_value_and_version() -> None:
    for kind in KINDS:
        with pytest.raises(ConfigError, match=rf"HOPSEARCH_VECTOR_INDEX={kind}: Elasticsearch 7\.17\.29 has no vector"):
            choose_vector_index(kind, info("7.17.29"), 384)
    refused = [("8.11.4", "int8_hnsw", "8.12"), ("8.12.2", "flat", "8.13"), ("8.14.3", "int4_hnsw", "8.15")]
    refused += [("8.15.5", "bbq_hnsw", "8.16"), ("8.12.2", "int8_flat", "8.13")]
    for version, kind, since in refused:
        with pytest.raises(ConfigError, match=rf"{kind}: Elasticsearch {version} does not offer it .*{since}\+"):
            choose_vector_index(kind, info(version), 384)
    with pytest.raises(ConfigError, match="even number of dimensions"):
        choose_vector_index("int4_hnsw", info("8.19.21"), 385)
    with pytest.raises(ConfigError, match="at least 64 dimensions"):
        choose_vector_index("bbq_hnsw", info("9.2.4"), 32)
    for kind in KINDS:  # every value on the versions tested here
        assert choose_vector_index(kind, info("8.19.21"), 384) == kind == choose_vector_index(kind, info("9.2.4"), 384)


def test_knn_bodies_take_candidates_and_oversampling_from_the_options() -> None:
    query = RetrievalQuery("q", mode="dense", k=5)
    plain = knn_clause(query, [0.1, 0.2], 5)
    assert plain["num_candidates"] == 100 and "rescore_vector" not in plain
    options_ = knn_options("bbq_hnsw", info("8.19.21"), 200, 3.0)
    assert options_ == KnnOptions(200, 3.0)
    clause = knn_clause(query, [0.1, 0.2], 50, knn_options=options_)
    assert clause["num_candidates"] == 500 and clause["rescore_vector"] == {"oversample": 3.0}
    assert knn_clause(query, [0.1], 5000, knn_options=options_)["num_candidates"] == 10_000  # Elasticsearch's limit
    hybrid = fused_body("bool", RetrievalQuery("q", mode="hybrid", k=5), [0.1], "knn", 5, knn_options=options_)
    assert hybrid["query"]["bool"]["should"][1]["knn"]["rescore_vector"] == {"oversample": 3.0}
    # int8 and float are not rescored; neither is anything before 8.18, nor an index that records no type
    assert knn_options("int8_hnsw", info("8.19.21"), 100, 3.0).oversample == 0
    assert knn_options("bbq_hnsw", info("8.17.1"), 100, 3.0).oversample == 0
    assert knn_options(None, info("9.2.4"), 100, 3.0).oversample == 0
    assert [vector_bytes(k, 384) for k in ("hnsw", "int8_hnsw", "int4_hnsw", "bbq_hnsw")] == [1536, 388, 196, 62]


# --- real Elasticsearch ---------------------------------------------------------------------------------


def _store_for(store: Store, suffix: str, **settings: Any) -> Store:
    prefix = f"{store.settings.index_prefix}{suffix}"
    return Store(store.settings.model_copy(update={"index_prefix": prefix, **settings}), store.client, store.info)


def _write_corpus(path: Path, rows: Sequence[tuple[str, str, str]] = CORPUS) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps({"_id": i, "title": t, "text": x}) for i, t, x in rows))
    return path


async def _mapping(store: Store) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``embedding`` field and the ``_source`` of the passages index's mapping."""
    response = await store.client.indices.get_mapping(index=store.settings.passages_alias)
    [body] = dict(getattr(response, "body", response)).values()
    return body["mappings"]["properties"]["embedding"], body["mappings"].get("_source", {})


async def _tops(store: Store, embedder: MiniLMEmbedder, mode: str) -> list[SearchResult]:
    retriever = bound(store, embedder)
    return await retriever.search_many([RetrievalQuery(q, mode=mode, k=3) for q, _ in QUESTIONS])  # type: ignore[arg-type]


def recorded(store: Store) -> list[dict[str, Any]]:
    """The bodies of every ``_msearch`` the store sends from now on (they still go to Elasticsearch)."""
    sent: list[dict[str, Any]] = []
    msearch = store.msearch

    async def recording(searches: Sequence[tuple[str, dict[str, Any]]], **kw: Any) -> list[dict[str, Any]]:
        sent.extend(body for _, body in searches)
        return await msearch(searches, **kw)

    store.msearch = recording  # type: ignore[method-assign]
    return sent


@pytest.fixture
async def each_kind(store: Store) -> AsyncIterator[list[str]]:
    kinds = ["auto", *KINDS] if store.info.knn else ["auto"]
    yield kinds
    for n in range(len(kinds)):
        await store.client.indices.delete(
            index=f"{store.settings.index_prefix}k{n}-*", allow_no_indices=True, ignore_unavailable=True
        )


async def test_each_value_creates_its_mapping_and_answers_dense_and_hybrid(
    store: Store, es_node: EsNode, minilm: MiniLMEmbedder, tmp_path: Path, each_kind: list[str]
) -> None:
    path = _write_corpus(tmp_path / "corpus.jsonl")
    for n, kind in enumerate(each_kind):
        one = _store_for(store, f"k{n}", vector_index=kind)
        report = await load_jsonl(one, path, options(tmp_path / kind), embedder=minilm)
        assert report.indexed == len(CORPUS)
        await one.refresh()
        field, source = await _mapping(one)
        meta = await one.index_meta()
        expected = choose_vector_index(kind, store.info, minilm.dims)
        assert meta["vector_index"] == expected and meta["schema_version"] == SCHEMA_VERSION, kind
        if expected is None:  # 7.17: vectors in _source, no index options, as before
            assert "index_options" not in field and field.get("index") is False
        else:
            assert field["index_options"]["type"] == expected and field["index"] is True, kind
        # vectors out of _source: 8.19 by the mapping, 9.2 by its default; 7.17 keeps them (read there)
        doc = await one.get_document(one.settings.passages_alias, "volcano")
        assert doc is not None and doc["title"] == "Etna"
        assert ("embedding" in doc) == (store.info.major == 7), (kind, sorted(doc))
        assert ("embedding" in source.get("excludes", [])) == (store.info.major == 8)
        sent = recorded(one)
        for mode in ("dense", "hybrid"):
            results = await _tops(one, minilm, mode)
            for result, (question, wanted) in zip(results, QUESTIONS, strict=True):
                assert result.hits and result.hits[0].id == wanted, (kind, mode, question, result.hits[:2])
                assert result.vector_index == (expected or "none"), (kind, mode)
                assert all("embedding" not in hit.source for hit in result.hits)
        # the kNN searches sent: rescored with the float vectors where the type is a coarse quantization
        knns = [b["knn"] for b in sent if "knn" in b]
        knns += [c["knn"] for b in sent for c in b.get("query", {}).get("bool", {}).get("should", []) if "knn" in c]
        assert len(knns) == (2 * len(QUESTIONS) if expected else 0), (kind, len(knns))
        rescored = expected in ("bbq_hnsw", "int4_hnsw")
        assert all(("rescore_vector" in knn) == rescored for knn in knns), kind
        assert all(knn.get("rescore_vector", {}).get("oversample", 3.0) == 3.0 for knn in knns)


async def test_an_unsupported_value_is_refused_at_index_creation_naming_the_version(
    store: Store, minilm: MiniLMEmbedder, tmp_path: Path
) -> None:
    path = _write_corpus(tmp_path / "corpus.jsonl")
    if store.info.knn:  # 8.19 and 9.2 take every value; what they refuse is a value the vectors cannot take
        refused = _store_for(store, "odd", vector_index="int4_hnsw")
        with pytest.raises(ConfigError, match="int4_hnsw needs an even number of dimensions, not 385"):
            await refused.ensure_indices(OddEmbedder())
        assert not await refused.exists(refused.settings.passages_alias)
        return
    refused = _store_for(store, "old", vector_index="hnsw")
    with pytest.raises(ConfigError, match=rf"HOPSEARCH_VECTOR_INDEX=hnsw: Elasticsearch {store.info.number}"):
        await load_jsonl(refused, path, options(tmp_path), embedder=minilm)
    assert not await refused.exists(refused.settings.passages_alias)  # nothing was made


PARA = "This paragraph is about {topic}. " * 4


async def test_an_acl_change_and_a_rebuild_keep_dense_retrieval(
    store: Store, minilm: MiniLMEmbedder, tmp_path: Path
) -> None:
    # a folder of files (docs) and a corpus of records (jsonl) in one index
    root = tmp_path / "tree"
    root.mkdir()
    topics = {"kiln.md": "firing pottery in a kiln", "orbit.md": "satellites in orbit", "tide.md": "ocean tides"}
    for name, topic in topics.items():
        (root / name).write_text(f"# {topic}\n\n{PARA.format(topic=topic)}")
    (root / ".hopsearch-acl.yaml").write_text('"*": public\n')
    embedder = CountingEmbedder(minilm)
    await load_docs(store, root, opts(tmp_path / "a"), embedder=embedder)
    await load_jsonl(store, _write_corpus(tmp_path / "corpus.jsonl"), options(tmp_path / "j"), embedder=embedder)
    await store.refresh()
    before = await held_vectors(store)
    assert len(before) == len(CORPUS) + len(topics) and all(vector for _, vector in before.values())
    dense = await _tops(store, minilm, "dense")
    tops = [[h.id for h in r.hits] for r in dense]
    assert [t[0] for t in tops] == [wanted for _, wanted in QUESTIONS]

    # an ACL change: the files are re-sent whole, without an embedder (--no-embed): vectors read back
    (root / ".hopsearch-acl.yaml").write_text('"*": [group:staff]\n')
    changed = await load_docs(store, root, opts(tmp_path / "b"))
    assert changed.extra["files_acl_changed"] == len(topics)
    assert changed.extra["vectors"]["from_index"] == changed.documents > 0
    await store.refresh()
    assert await held_vectors(store) == before
    assert [[h.id for h in r.hits] for r in await _tops(store, minilm, "dense")] == tops

    # a rebuild of the folder: a new index version; the records it does not rewrite are copied with their
    # vectors read back from the old version (not embedded again: only the folder's chunks are)
    old = await store.passages_index()
    embedder.texts = 0
    rebuilt = await load_docs(store, root, opts(tmp_path / "c", rebuild=True), embedder=embedder)
    new = await store.passages_index()
    assert new != old and rebuilt.indexed == len(topics)
    assert embedder.texts == rebuilt.documents < len(before)
    await store.refresh()
    after = await held_vectors(store)
    assert after.keys() == before.keys() and all(vector for _, vector in after.values())
    assert all(after[i][1] == before[i][1] for i, _, _ in CORPUS)  # the copied records' vectors as they were
    assert (await store.index_meta(new))["schema_version"] == SCHEMA_VERSION
    assert [[h.id for h in r.hits] for r in await _tops(store, minilm, "dense")] == tops
    hybrid = await _tops(store, minilm, "hybrid")
    assert [r.hits[0].id for r in hybrid] == [wanted for _, wanted in QUESTIONS]
