"""Company documents into real Elasticsearch: extraction, rejections, incremental re-runs.

Unreadable files: the tests run as root, which reads chmod-000 files, so unreadability is produced in
ways root cannot get around: a broken symlink (``gone.md``), a FIFO (``pipe.txt``; it is never opened,
so nothing blocks) and a file that vanishes between the directory walk and the read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hopsearch.loaders.docs import DocsSource, load_docs
from hopsearch.loaders.model import LoadOptions
from hopsearch.service.store import Store
from tests.loader_files import make_docx, make_pdf, passage
from tests.test_loaders_es import read_letters


def section(n: int, words: int = 150) -> str:
    import random

    return f"## Section {n}\n\n" + passage(random.Random(n), words) + "\n\n"


def build_tree(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("# Handbook\n\n" + "".join(section(n) for n in range(5)))
    (root / "sub" / "b.txt").write_text("Plain notes.\n\nSecond paragraph of the notes.\n")
    (root / "c.html").write_text(
        "<html><head><title>Page</title></head><body><h1>Hi</h1><p>Web text.</p></body></html>"
    )
    (root / "d.pdf").write_bytes(make_pdf(["Quarterly report", "Revenue grew."], title="Q3"))
    make_docx(root / "e.docx", "Policy", [("Leave", ["Staff get 25 days of leave."])])
    (root / "corrupt.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog broken")
    (root / "empty.txt").write_bytes(b"")
    (root / "gone.md").symlink_to(root / "does-not-exist.md")
    os.mkfifo(root / "pipe.txt")
    (root / "ignored.bin").write_bytes(b"\x00\x01")


def opts(tmp_path: Path, **kw: Any) -> LoadOptions:
    return LoadOptions(checkpoint=tmp_path / "docs.ckpt.json", dead_letter=tmp_path / "docs.dl.jsonl", **kw)


async def chunks_by_path(store: Store) -> dict[str, list[tuple[int, str]]]:
    response = await store.search(
        store.settings.passages_alias, {"size": 1000, "_source": ["path", "chunk", "content_sha"]}
    )
    out: dict[str, list[tuple[int, str]]] = {}
    for hit in response["hits"]["hits"]:
        src = hit["_source"]
        out.setdefault(Path(src["path"]).name, []).append((src["chunk"], src["content_sha"]))
    return {name: sorted(chunks) for name, chunks in out.items()}


async def test_docs_rejections_and_incremental_reruns(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    build_tree(root)
    first = await load_docs(store, root, opts(tmp_path))
    assert (first.read, first.indexed, first.rejected, first.skipped) == (9, 5, 4, 0)
    assert first.reconciled
    letters = {Path(e["file"]).name: e["reason"] for e in read_letters(first.dead_letter)}
    assert set(letters) == {"corrupt.pdf", "empty.txt", "gone.md", "pipe.txt"}
    assert "broken symlink" in letters["gone.md"] and "not a regular file" in letters["pipe.txt"]
    assert "PDF" in letters["corrupt.pdf"] and "no text" in letters["empty.txt"]
    held = await chunks_by_path(store)
    assert set(held) == {"a.md", "b.txt", "c.html", "d.pdf", "e.docx"}
    assert len(held["a.md"]) >= 4 and [c for c, _ in held["a.md"]] == list(range(len(held["a.md"])))
    doc = await store.get_document(store.settings.passages_alias, f"{await _doc_id(store, root / 'a.md')}-1")
    assert doc is not None and doc["title"] == "Handbook" and doc["headings"]
    assert doc["metadata"]["chunks"] == len(held["a.md"]) and doc["url"].startswith("file://")
    count = await store.count()

    unchanged = await load_docs(store, root, opts(tmp_path))
    assert (unchanged.read, unchanged.indexed, unchanged.rejected, unchanged.skipped) == (9, 0, 4, 5)
    assert await store.count() == count and await chunks_by_path(store) == held

    (root / "a.md").write_text("# Handbook\n\n" + section(9, 60))  # shorter: fewer chunks
    (root / "sub" / "b.txt").unlink()
    changed = await load_docs(store, root, opts(tmp_path))
    assert (changed.read, changed.indexed, changed.rejected, changed.skipped) == (8, 1, 4, 3)
    after = await chunks_by_path(store)
    assert "b.txt" not in after
    assert len(after["a.md"]) == 1 and after["a.md"][0][1] != held["a.md"][0][1]
    assert changed.deleted == len(held["a.md"]) - 1 + len(held["b.txt"])
    assert await store.count() == count - changed.deleted


async def _doc_id(store: Store, path: Path) -> str:
    from hopsearch.loaders.docs import doc_id_of
    from hopsearch.service.auth.deployment import deployment_secret

    return doc_id_of(str(path.resolve()), await deployment_secret(store))  # noqa: ASYNC240


def test_file_that_vanishes_between_walk_and_read(tmp_path: Path) -> None:
    (tmp_path / "stay.md").write_text("# Stay\n\nStill here.")
    (tmp_path / "vanish.md").write_text("# Vanish\n\nGone soon.")
    source = DocsSource(tmp_path, {})
    (tmp_path / "vanish.md").unlink()
    batches = list(source.batches(0, 100, None))
    rejected = [r for b in batches for r in b.rejections]
    assert [Path(str(r.where["file"])).name for r in rejected] == ["vanish.md"]
    assert "disappeared" in rejected[0].reason
    assert sum(b.read for b in batches) == 2 and sum(len(b.ids) for b in batches) == 1
