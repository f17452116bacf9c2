"""Loaders against real Elasticsearch 7.17 and 8.19 (``store`` is parametrised over both)."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
from pathlib import Path
from typing import Any

import orjson
import pytest

from hopsearch.loaders.api import ensure_qa_contexts, load_dpr, load_jsonl, load_qa_contexts
from hopsearch.loaders.checkpoint import read_checkpoint
from hopsearch.loaders.config import LoadConfig
from hopsearch.loaders.model import LoadOptions
from hopsearch.loaders.questions import read_questions
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.errors import EmbedderMismatch, InputError, StoreUnavailable
from hopsearch.service.store import Store
from tests.loader_files import write_dpr
from tests.vector_readback import held_vectors

BAD_LINES = [
    b'9001\t"unclosed quote\tBroken\n',
    b"9002\tonly two columns\n",
    b"9003\t\xff\xfe not utf-8\tBad\n",
    b"9004\t\tEmpty\n",
]


def options(tmp_path: Path, **kw: Any) -> LoadOptions:
    values: dict[str, Any] = {
        "checkpoint": tmp_path / "load.checkpoint.json",
        "dead_letter": tmp_path / "load.deadletter.jsonl",
        "batch_size": 200,
    }
    values.update(kw)
    return LoadOptions(**values)


def dpr_with_bad_rows(path: Path, rows: int) -> tuple[list[str], list[int]]:
    """``rows`` good passages with the bad lines spliced in; returns good ids and bad line numbers."""
    ids = write_dpr(path, rows)
    lines = path.read_bytes().splitlines(keepends=True)
    bad_at = []
    for k, bad in enumerate(BAD_LINES):
        at = 1 + (k + 1) * rows // (len(BAD_LINES) + 1)
        lines.insert(at, bad)
        bad_at.append(at + 1)
    path.write_bytes(b"".join(lines))
    return ids, bad_at


def read_letters(path: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in Path(path).read_bytes().splitlines()]


async def all_ids(store: Store, index: str | None = None) -> list[str]:
    response = await store.search(
        index or store.settings.passages_alias, {"size": 10000, "_source": False, "query": {"match_all": {}}}
    )
    return sorted(hit["_id"] for hit in response["hits"]["hits"])


async def test_dpr_load_reconciles_dead_letters_and_reruns_idempotently(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "psgs_w100.tsv"
    ids, bad_at = dpr_with_bad_rows(path, 1500)
    collector = gc.get_threshold()
    report = await load_dpr(store, path, options(tmp_path))
    assert gc.get_threshold() == collector and gc.get_freeze_count() == 0  # the load's GC tuning is undone
    assert (report.read, report.indexed, report.rejected, report.skipped) == (1504, 1500, 4, 0)
    assert report.reconciled and report.documents == 1500
    assert await store.count() == 1500
    assert await all_ids(store) == sorted(ids)
    letters = read_letters(report.dead_letter)
    assert sorted(entry["line"] for entry in letters) == bad_at
    assert all(entry["file"] == str(path) and entry["offset"] > 0 and entry["reason"] for entry in letters)
    index = await store.passages_index()
    assert index is not None
    assert (await store.get_settings(index))["refresh_interval"] == "1s"  # restored after the load

    again = await load_dpr(store, path, options(tmp_path, workers=1))
    assert (again.read, again.indexed, again.rejected) == (1504, 1500, 4)
    await store.refresh()
    assert await store.count() == 1500 and await all_ids(store) == sorted(ids)
    assert len(read_letters(again.dead_letter)) == 4  # not appended twice


async def test_elasticsearch_item_rejections_are_dead_lettered(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    rows = [
        {"_id": "a", "title": "A", "text": "alpha", "n": 5},
        {"_id": "b", "title": "B", "text": "beta", "n": {"nested": "object where a number was mapped"}},
        {"_id": "c", "title": "C", "text": "gamma", "n": 7},
    ]
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    first = await load_jsonl(store, path, options(tmp_path, batch_size=3, workers=1))  # one request, item 2 refused
    assert (first.read, first.indexed, first.rejected, first.skipped) == (3, 2, 1, 0)
    letters = read_letters(first.dead_letter)
    assert len(letters) == 1 and letters[0]["line"] == 2 and letters[0]["_id"] == "b"
    assert "HTTP 400" in letters[0]["reason"] and "pars" in letters[0]["reason"]
    assert await all_ids(store) == ["a", "c"]


async def test_qa_contexts_of_a_question_file(store: Store, tmp_path: Path, sample_questions_path: Path) -> None:
    report = await load_qa_contexts(store, sample_questions_path, options(tmp_path))
    assert report.reconciled and report.rejected == 0 and report.indexed > 100
    assert report.skipped > 0  # distractor paragraphs repeat across questions
    assert await store.count() == report.indexed
    again = await load_qa_contexts(store, sample_questions_path, options(tmp_path))
    await store.refresh()
    assert again.indexed == report.indexed and await store.count() == report.indexed


async def test_demo_and_eval_contexts_load_through_the_pipeline(store: Store, tmp_path: Path) -> None:
    # `hopsearch demo` and `hopsearch eval --corpus-from-context` load with ensure_qa_contexts.
    path = tmp_path / "questions.jsonl"
    records = [
        {"_id": "q1", "question": "Who?", "answer": "A", "type": "bridge", "level": "easy",
         "context": [["A", ["A is a film."]], ["B", ["B is a film."]]]},
        {"_id": "q2", "question": "Where?", "answer": "C", "type": "bridge", "level": "easy",
         "context": [["A", ["A is a film."]], ["Empty", [""]], ["C", ["C is a town."]]]},
    ]  # fmt: skip
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in records))
    local = Store(store.settings.model_copy(update={"state_dir": tmp_path / "state"}), store.client, store.info)
    config = LoadConfig(state_dir=tmp_path / "state")
    questions = read_questions(path)
    first = await ensure_qa_contexts(local, path, questions[:1], config=config)
    assert (first.read, first.indexed, first.extra["already_indexed"]) == (2, 2, 0)
    report = await ensure_qa_contexts(local, path, questions, config=config)  # the rest resumes from the checkpoint
    assert report.reconciled and (report.read, report.indexed, report.rejected, report.skipped) == (5, 3, 1, 1)
    assert report.extra["already_indexed"] == 2 and report.resumed_from == 2
    checkpoint = read_checkpoint(Path(str(report.checkpoint)))
    assert checkpoint is not None and checkpoint.indexed == 3
    assert Path(str(report.checkpoint)).parent == tmp_path / "state" / "loads"
    letters = read_letters(report.dead_letter)
    assert len(letters) == 1 and letters[0]["line"] == 2 and "empty paragraph" in letters[0]["reason"]
    again = await ensure_qa_contexts(local, path, questions, config=config)  # already indexed: skipped at once
    assert (again.indexed, again.extra["already_indexed"], again.seconds) == (3, 3, 0.0)
    assert await local.count() == 3


async def test_rebuild_fills_a_new_version_and_swaps(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "psgs.tsv"
    write_dpr(path, 300)
    first = await load_dpr(store, path, options(tmp_path))
    smaller = tmp_path / "psgs_small.tsv"
    ids = write_dpr(smaller, 120, seed=3, start_id=5000)
    rebuilt = await load_dpr(store, smaller, options(tmp_path, rebuild=True))
    assert rebuilt.swapped_alias and rebuilt.index != first.index
    assert await store.passages_index() == rebuilt.index
    assert not await store.exists(first.index)
    assert await all_ids(store) == sorted(ids)


async def test_limit_then_resume_continues(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "psgs.tsv.gz"
    ids = write_dpr(path, 700)
    part = await load_dpr(store, path, options(tmp_path, limit=250))
    assert part.read == 250 and part.indexed == 250
    rest = await load_dpr(store, path, options(tmp_path, resume=True))
    assert rest.resumed_from == 251 and rest.read == 700 and rest.indexed == 700 and rest.reconciled
    assert await all_ids(store) == sorted(ids)


async def test_vectors_with_the_embedder_and_refusal_on_bm25_index(
    store: Store, tmp_path: Path, minilm: MiniLMEmbedder
) -> None:
    path = tmp_path / "c.jsonl"
    rows = [{"_id": f"d{i}", "title": f"T{i}", "text": f"passage number {i} about rivers"} for i in range(12)]
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    report = await load_jsonl(store, path, options(tmp_path, batch_size=5), embedder=minilm)
    assert report.indexed == 12
    held = await held_vectors(store)  # 8.x and 9.2 keep vectors out of _source: read back as each gives them
    assert len(held) == 12 and all(len(vector or []) == minilm.dims for _, vector in held.values())
    assert (await store.index_meta())["embedder"] == minilm.model_id

    other = tmp_path / "other"
    other.mkdir()
    renamed = store.settings.model_copy(update={"index_prefix": store.settings.index_prefix + "b"})
    bm25 = Store(renamed, store.client, store.info)
    await load_jsonl(bm25, path, options(other))
    with pytest.raises(EmbedderMismatch, match="BM25 only"):
        await load_jsonl(bm25, path, options(other), embedder=minilm)
    await bm25.client.indices.delete(index=f"{bm25.settings.index_prefix}-*")


async def test_truncated_gzip_fails_cleanly_with_a_checkpoint(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "psgs.tsv.gz"
    write_dpr(path, 3000)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="cannot read on"):
        await load_dpr(store, path, options(tmp_path, batch_size=100, workers=1))
    saved = read_checkpoint(tmp_path / "load.checkpoint.json")
    assert saved is not None and not saved.done and saved.indexed == saved.read > 0


REFUSED = {"type": "es_rejected_execution_exception", "reason": "rejected by the test proxy"}


def _mark_429(positions: set[int]) -> Any:
    """A ``rewrite`` for the proxy: items at ``positions`` of the FIRST ``_bulk`` answer become 429s."""

    def rewrite(request: Any, seen: int, payload: bytes) -> bytes:
        if not request.path.endswith("/_bulk") or seen != 2:  # request 1 is refused whole (below)
            return payload
        answer = orjson.loads(payload)
        for n in positions:
            [op] = answer["items"][n]
            answer["items"][n] = {op: {"status": 429, "error": REFUSED}}
        answer["errors"] = True
        return orjson.dumps(answer)

    return rewrite


async def _six_loaded_once(store: Store, tmp_path: Path, settle: float = 0.0) -> None:
    """Six DPR rows loaded through ``store`` (one batch, one worker): all indexed, reconciled, no dead letter,
    each id once in the index (after ``settle`` seconds for requests the node may still be given)."""
    path = tmp_path / "psgs.tsv"
    ids = write_dpr(path, 6)
    report = await load_dpr(store, path, options(tmp_path, batch_size=6, workers=1, initial_backoff=0.05))
    assert (report.read, report.indexed, report.rejected, report.documents) == (6, 6, 0, 6)
    assert report.reconciled and read_letters(report.dead_letter) == []
    if settle:
        await asyncio.sleep(settle)
        await store.refresh(report.index)
    assert await all_ids(store) == sorted(ids)


async def test_429s_are_retried_with_back_off_through_a_refusing_proxy(es_node: Any, tmp_path: Path) -> None:
    """A whole-request 429, then 429 items in the answer: all resent, nothing lost or doubled."""
    from tests.conftest import make_settings
    from tests.counting_proxy import CountingProxy

    proxy = CountingProxy(
        es_node.url,
        refuse=lambda request, seen: request.path.endswith("/_bulk") and seen == 1,
        rewrite=_mark_429({1, 3, 4}),
    )
    store = await Store.connect(make_settings(await proxy.start()))
    try:
        await _six_loaded_once(store, tmp_path)
        bulks = sum(n for (method, p), n in proxy.paths.items() if p.endswith("/_bulk"))
        assert bulks == 3  # refused whole, answered with three 429 items, those three resent
    finally:
        await store.client.indices.delete(index=f"{store.settings.index_prefix}-*")
        await store.close()
        await proxy.stop()


async def test_a_bulk_request_that_timed_out_is_sent_again_and_nothing_is_doubled(es_node: Any, tmp_path: Path) -> None:
    """A node busy merging answers a batch after the client's timeout (it did the work): the batch is sent
    again after a back-off, the load goes on, every document is there once; a timeout on every attempt
    stops the load with its checkpoint and says how often it tried."""
    from tests.conftest import make_settings
    from tests.counting_proxy import CountingProxy

    held = {"bulks": 1}  # how many of the first _bulk requests the proxy holds past the timeout
    proxy = CountingProxy(
        es_node.url, delay=lambda request, seen: 9.0 if request.path.endswith("/_bulk") and seen <= held["bulks"] else 0
    )
    settings = make_settings(await proxy.start(), es_request_timeout=6.0)
    store = await Store.connect(settings)
    try:
        await _six_loaded_once(store, tmp_path, settle=4.0)  # the held request reaches the node too
        assert sum(n for (_, p), n in proxy.paths.items() if p.endswith("/_bulk")) == 2

        held["bulks"] = 10**6
        again = tmp_path / "again"
        again.mkdir()
        write_dpr(again / "psgs.tsv", 3)
        opts = options(again, batch_size=3, workers=1, initial_backoff=0.05, max_retries=0)
        with pytest.raises(StoreUnavailable) as stopped:
            await load_dpr(store, again / "psgs.tsv", opts)
        text = str(stopped.value)
        assert "ConnectionTimeout" in text and "after 1 attempts" in text and "--resume" in text, text
        saved = read_checkpoint(opts.checkpoint or again)
        assert saved is not None and saved.position == 0
    finally:
        await store.client.indices.delete(index=f"{store.settings.index_prefix}-*")
        await store.close()
        await proxy.stop()


async def test_items_still_refused_after_the_retries_stop_the_load(es_node: Any, tmp_path: Path) -> None:
    """A 429 left after every retry is the cluster's load, not the document's fault: the load stops with its
    checkpoint, nothing dead-lettered, and ``--resume`` sends the row again (issue 27, item 6: it was a
    dead letter that the resume skipped)."""
    from tests.conftest import make_settings
    from tests.counting_proxy import CountingProxy

    def always_429_for_the_second(request: Any, seen: int, payload: bytes) -> bytes:
        if not request.path.endswith("/_bulk"):
            return payload
        answer = orjson.loads(payload)
        for n, item in enumerate(answer["items"]):
            op, info = next(iter(item.items()))
            if info.get("_id") == "2" or (seen == 1 and n == 1):
                answer["items"][n] = {op: {"_id": "2", "status": 429, "error": REFUSED}}
                answer["errors"] = True
        return orjson.dumps(answer)

    proxy = CountingProxy(es_node.url, rewrite=always_429_for_the_second)
    settings = make_settings(await proxy.start())
    store = await Store.connect(settings)
    try:
        path = tmp_path / "psgs.tsv"
        write_dpr(path, 4)
        opts = options(tmp_path, batch_size=4, workers=1, initial_backoff=0.01, max_retries=2)
        with pytest.raises(StoreUnavailable) as stopped:
            await load_dpr(store, path, opts)
        assert "es_rejected_execution_exception" in str(stopped.value) and "--resume" in str(stopped.value)
        saved = read_checkpoint(opts.checkpoint or tmp_path)
        assert saved is not None and (saved.position, saved.rejected) == (0, 0)  # before the batch of the 429
        assert read_letters(str(opts.dead_letter)) == []
        direct = await Store.connect(settings.model_copy(update={"es_url": [es_node.url]}))
        try:
            report = await load_dpr(direct, path, dataclasses.replace(opts, resume=True))
        finally:
            await direct.close()
        assert (report.read, report.indexed, report.rejected) == (4, 4, 0) and report.reconciled
        await store.refresh(report.index)
        assert await all_ids(store, report.index) == ["1", "2", "3", "4"]
    finally:
        await store.client.indices.delete(index=f"{store.settings.index_prefix}-*")
        await store.close()
        await proxy.stop()
