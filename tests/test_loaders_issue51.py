"""Issue 51, items 3 and 4: pathological files load in time or are refused by the per-file budget, and
document ids are keyed by the deployment's secret (old SHA-1 ids moved on the next load)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from hopsearch.loaders.config import LoadConfig
from hopsearch.loaders.docs import load_docs
from hopsearch.service.store import Store
from tests.conftest import make_settings
from tests.loader_files import passage
from tests.test_loaders_docs import opts
from tests.test_loaders_es import read_letters

MAX_WORDS, OVERLAP = 200, 30  # the chunker's defaults: a chunk holds max_words of its own plus the overlap


def wide_csv(size: int) -> bytes:
    """N long column names and N rows of one-character cells (the attacker's 240 KiB shape)."""
    n = int((size / 4) ** 0.5)
    width = size // (2 * n)
    header = ",".join(f"column {i} " + "x" * (width - 12) for i in range(n))
    return "\n".join([header, *(",".join(str(i % 10) for i in range(n)) for _ in range(n))]).encode()


def normal_files(root: Path) -> None:
    import random

    (root / "notes.txt").write_text(passage(random.Random(1), 300) + "\n\n" + passage(random.Random(2), 120))
    (root / "guide.md").write_text("# Guide\n\n" + passage(random.Random(3), 150))


async def chunks(store: Store) -> dict[str, list[dict[str, object]]]:
    await store.refresh(store.settings.passages_alias)
    body = {"size": 5000, "_source": ["path", "chunk", "text", "doc_id"]}
    hits = (await store.search(store.settings.passages_alias, body))["hits"]["hits"]
    out: dict[str, list[dict[str, object]]] = {}
    for hit in hits:
        out.setdefault(Path(hit["_source"]["path"]).name, []).append(hit["_source"] | {"_id": hit["_id"]})
    return out


async def test_pathological_shapes_load_whole_and_in_time(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a_wide.csv").write_bytes(wide_csv(240 * 1024))
    reps = 4 * 1024 * 1024 // len("word plant audit order ") + 1  # 4 MiB of one paragraph, no sentence end
    (root / "b_run_on.txt").write_text(" ".join(["word", "plant", "audit", "order"] * reps))
    normal_files(root)
    report = await load_docs(store, root, opts(tmp_path))
    assert report.rejected == 0 and report.indexed == 4, read_letters(report.dead_letter)
    held = await chunks(store)
    assert set(held) == {"a_wide.csv", "b_run_on.txt", "notes.txt", "guide.md"}
    assert len(held["b_run_on.txt"]) >= 4 * reps // MAX_WORDS
    for name, found in held.items():
        assert all(len(str(c["text"]).split()) <= MAX_WORDS + OVERLAP for c in found), name


async def test_budget_turns_a_pathological_file_into_a_dead_letter(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a_wide.csv").write_bytes(wide_csv(64 * 1024))
    normal_files(root)
    budget = LoadConfig.of(store.settings.model_copy(update={"docs_max_text_mb": 0.02}))  # about 21,000 characters
    report = await load_docs(store, root, opts(tmp_path, config=budget))
    letters = {Path(e["file"]).name: e["reason"] for e in read_letters(report.dead_letter)}
    assert set(letters) == {"a_wide.csv"} and "docs_max_text_mb" in letters["a_wide.csv"]
    assert "over the per-file budget" in letters["a_wide.csv"]
    assert set(await chunks(store)) == {"notes.txt", "guide.md"}


async def test_doc_ids_are_keyed_stable_and_old_ids_move(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    normal_files(root)
    first = await load_docs(store, root, opts(tmp_path))
    assert first.indexed == 2
    held = await chunks(store)
    for name, found in held.items():
        path = str((root / name).resolve())
        assert {c["doc_id"] for c in found} != {hashlib.sha1(path.encode()).hexdigest()[:20]}
        assert path not in str(found[0]["doc_id"]) and len({c["doc_id"] for c in found}) == 1
    again = await load_docs(store, root, opts(tmp_path))  # same deployment: same ids, nothing re-sent
    assert (again.indexed, again.skipped) == (0, 2) and await chunks(store) == held

    other = await Store.connect(make_settings(store.settings.es_url[0]))  # another deployment: another secret
    try:
        await load_docs(other, root, opts(tmp_path / "o"))
        theirs = await chunks(other)
        assert {n: {c["doc_id"] for c in f} for n, f in theirs.items()} != {
            n: {c["doc_id"] for c in f} for n, f in held.items()
        }
    finally:
        await other.client.indices.delete(index=f"{other.settings.index_prefix}-*", allow_no_indices=True)
        await other.close()


async def test_an_index_with_old_sha1_ids_is_moved_once_without_duplicates(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    normal_files(root)
    await load_docs(store, root, opts(tmp_path))
    alias = store.settings.passages_alias
    new = await chunks(store)
    for found in new.values():  # rewrite every chunk as the old loader stored it: sha1(path)[:20]-n
        for c in found:
            old_id = hashlib.sha1(str(c["path"]).encode()).hexdigest()[:20]
            doc = await store.get_document(alias, str(c["_id"]))
            assert doc is not None
            await store.put_document(alias, f"{old_id}-{c['chunk']}", doc | {"doc_id": old_id})
            await store.client.delete(index=alias, id=str(c["_id"]))
    await store.refresh(alias)
    total = await store.count()
    moved = await load_docs(store, root, opts(tmp_path))
    assert moved.extra["files_rekeyed"] == 2 and moved.indexed == 2
    assert await store.count() == total
    after = await chunks(store)
    assert {n: sorted(str(c["_id"]) for c in f) for n, f in after.items()} == {
        n: sorted(str(c["_id"]) for c in f) for n, f in new.items()
    }
    steady = await load_docs(store, root, opts(tmp_path))
    assert (steady.indexed, steady.skipped, steady.extra["files_rekeyed"]) == (0, 2, 0)
    assert await store.count() == total
