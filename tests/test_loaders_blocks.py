"""A block on the index during a load (issue 27, item 6): the load stops with an error that names the
block, nothing is dead-lettered for it, and ``--resume`` after the block is lifted indexes every row
exactly once and restores the index's settings.

The blocks are the index-level settings ``index.blocks.write`` and ``index.blocks.read_only_allow_delete``
(what the flood-stage disk watermark sets), on the test's own index: safe on shared nodes. The loads run
as the real CLI in a child process, so the block is set while the load really runs, and a load that
does not stop (it retried the flood stage's 429s for minutes before) fails on the timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from hopsearch.loaders.checkpoint import read_checkpoint
from hopsearch.loaders.history import past_loads
from hopsearch.loaders.refusals import block_advice, cluster_side
from tests.loader_files import write_dpr
from tests.test_cli_index import cli_env  # noqa: F401 (a fixture)

FLOOD = "index.blocks.read_only_allow_delete"
WRITE = "index.blocks.write"
CLOSED = "closed"  # not a block setting: the index is closed (and opened again)


def cli(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", "from hopsearch.cli.main import main; main()", *args]
    return subprocess.Popen(
        command, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def put_block(url: str, index: str, block: str, value: bool | None) -> None:
    if block == CLOSED:
        response = httpx.post(f"{url}/{index}/{'_close' if value else '_open'}", timeout=60)
    else:
        response = httpx.put(f"{url}/{index}/_settings", json={block: value}, timeout=30)
    assert response.status_code == 200, response.text


def settings_of(url: str, index: str) -> dict[str, object]:
    answer = httpx.get(f"{url}/{index}/_settings", params={"flat_settings": "true"}, timeout=30).json()
    return dict(answer[index]["settings"])


def counted(url: str, index: str, ids: list[str]) -> tuple[int, int]:
    """``(documents in the index, documents whose _id is one of ids)``."""
    httpx.post(f"{url}/{index}/_refresh", timeout=60)
    total = httpx.get(f"{url}/{index}/_count", timeout=30).json()["count"]
    found = 0
    for start in range(0, len(ids), 20_000):
        query = {"query": {"ids": {"values": ids[start : start + 20_000]}}}
        found += httpx.post(f"{url}/{index}/_count", json=query, timeout=60).json()["count"]
    return int(total), found


@pytest.fixture
def lifted(cli_env: dict[str, str]) -> Iterator[list[str]]:  # noqa: F811
    """Indices to unblock at the end, whatever happened (so that the cleanup can delete them)."""
    blocked: list[str] = []
    yield blocked
    for index in blocked:
        httpx.post(f"{cli_env['HOPSEARCH_ES_URL']}/{index}/_open", timeout=60)
        httpx.put(f"{cli_env['HOPSEARCH_ES_URL']}/{index}/_settings", json={FLOOD: None, WRITE: None}, timeout=30)


def stopped_by(
    args: list[str], env: dict[str, str], block: str, lifted: list[str], *, checkpoint: Path | None, at: int
) -> tuple[str | None, str]:
    """Run the load; where ``checkpoint`` is given (a glob pattern: the file appears once the load runs),
    set ``block`` on the checkpoint's index once it is past position ``at``. Returns that index and the
    load's error (white space folded), once the load has stopped with exit status 1."""
    load = cli(args, env)
    index = None
    try:
        if checkpoint is not None:
            deadline = time.monotonic() + 120
            while (found := sorted(checkpoint.parent.glob(checkpoint.name))) == [] or (
                (saved := read_checkpoint(found[0])) is None or saved.position < at
            ):
                assert load.poll() is None, "the load ended before the block was set"
                assert time.monotonic() < deadline, "the load made no progress"
                time.sleep(0.01)
            index = saved.index
            lifted.append(index)
            put_block(env["HOPSEARCH_ES_URL"], index, block, True)
        out, err = load.communicate(timeout=150)  # it stops: no retrying a block for minutes
    finally:
        if load.poll() is None:
            load.kill()
            load.communicate()
    assert load.returncode == 1, out + err
    return index, " ".join(err.split())


@pytest.mark.parametrize(
    ("block", "when"),
    [(WRITE, "mid-load"), (FLOOD, "mid-load"), (WRITE, "before"), (FLOOD, "before"), (CLOSED, "mid-load")],
)
def test_a_block_stops_the_load_and_resume_finishes_it(
    cli_env: dict[str, str],  # noqa: F811
    lifted: list[str],
    tmp_path: Path,
    block: str,
    when: str,
) -> None:
    url, prefix = cli_env["HOPSEARCH_ES_URL"], cli_env["HOPSEARCH_INDEX_PREFIX"]
    rows = 60_000 if when == "mid-load" else 3_000
    path = tmp_path / "psgs_w100.tsv"
    ids = write_dpr(path, rows, words=30)
    checkpoint, letters = tmp_path / "dpr.checkpoint.json", tmp_path / "dpr.deadletter.jsonl"
    args = ["index", "dpr", str(path), "--quiet", "--checkpoint", str(checkpoint), "--dead-letter", str(letters)]
    args += ["--batch-size", "200", "--workers", "2"]
    index = f"{prefix}-passages-v1"
    if when == "before":  # the index exists, blocked, before the load starts
        made = subprocess.run(
            [sys.executable, "-c", "from hopsearch.cli.main import main; main()", "init"],
            env={**os.environ, **cli_env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert made.returncode == 0, made.stdout + made.stderr
        lifted.append(index)
        put_block(url, index, block, True)
    blocked, message = stopped_by(
        args, cli_env, block, lifted, checkpoint=checkpoint if when == "mid-load" else None, at=2_000
    )
    index = blocked or index
    if block == CLOSED:
        assert f"index [{index}] is closed" in message and f"POST /{index}/_open" in message, message
    else:
        assert block in message and f"index [{index}] is blocked" in message, message
        assert "flood-stage" in message and "watermark" in message  # what sets a read-only block, named either way
    assert "--resume" in message and str(checkpoint) in message
    saved = read_checkpoint(checkpoint)
    assert saved is not None and not saved.done and saved.index == index
    assert saved.position < rows + 1  # the block stopped it before the end
    assert saved.rejected == 0 and saved.indexed == saved.read  # nothing was dead-lettered for the block
    written = letters.read_bytes().splitlines() if letters.exists() else []  # 7.17's block refused even the start
    assert not [line for line in written if orjson.loads(line)["position"] <= saved.position]
    during = settings_of(url, index)
    if during.get("index.refresh_interval") == "-1":  # the block refused the restore: the error says so
        assert "could not be restored" in message and "--resume restores them" in message, message

    put_block(url, index, block, None)
    assert counted(url, index, ids)[0] >= saved.indexed  # what the checkpoint counts is in the index
    resumed = cli([*args, "--resume", "--json"], cli_env)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out + err
    report = orjson.loads(out)
    assert report["resumed_from"] == saved.position
    assert (report["read"], report["indexed"], report["rejected"], report["skipped"]) == (rows, rows, 0, 0)
    assert counted(url, index, ids) == (rows, rows)  # every row, each once
    after = settings_of(url, index)
    assert after.get("index.refresh_interval") == "1s" and after.get("index.number_of_replicas") == "0"
    assert block not in after
    state = Path(cli_env["HOPSEARCH_STATE_DIR"])
    assert [past.report["indexed"] for past in past_loads(state, prefix)] == [rows]


def item(status: int, kind: str, reason: str = "") -> dict[str, object]:
    return {"_id": "1", "status": status, "error": {"type": kind, "reason": reason}}


def test_refusals_about_the_cluster_are_told_from_bad_documents() -> None:
    """The item answers Elasticsearch gives (as in the answers above, and 429s left after every retry):
    about the cluster, never dead letters; about the document, dead letters."""
    for about_the_cluster in (
        item(429, "es_rejected_execution_exception", "rejected execution of coordinating operation"),
        item(429, "circuit_breaking_exception", "[parent] Data too large"),
        item(503, "unavailable_shards_exception", "[p][0] primary shard is not active"),
        item(400, "index_closed_exception", "closed"),
        item(403, "security_exception", "action [indices:data/write/bulk[s]] is unauthorized"),
        item(403, "cluster_block_exception", "index [p] blocked by: [FORBIDDEN/8/index write (api)];"),
        {"_id": "1", "status": 429},  # a whole request refused with 429, after its retries
    ):
        assert cluster_side(about_the_cluster), about_the_cluster
    for about_the_document in (
        item(400, "mapper_parsing_exception", "failed to parse field [chunk] of type [integer]"),
        item(400, "document_parsing_exception", "[1:2] failed to parse"),
        item(400, "strict_dynamic_mapping_exception", "mapping set to strict, dynamic introduction of [x]"),
        item(400, "illegal_argument_exception", "Document contains at least one immense term"),
    ):
        assert not cluster_side(about_the_document), about_the_document
    cluster_wide = "blocked by: [FORBIDDEN/13/cluster read-only / allow delete (api)];"
    assert "PUT /_cluster/settings" in str(block_advice(f"cluster_block_exception: {cluster_wide}", "p"))
    assert block_advice("mapper_parsing_exception: failed to parse", "p") is None


@pytest.mark.parametrize("block", [WRITE, FLOOD])
def test_a_block_stops_a_docs_load_and_running_it_again_finishes_it(
    cli_env: dict[str, str],  # noqa: F811
    lifted: list[str],
    tmp_path: Path,
    block: str,
) -> None:
    """``index docs`` has no ``--resume``: a docs load the block stopped says to run it again, and that run
    indexes the files the block refused (none was dead-lettered) and restores the index's settings."""
    url = cli_env["HOPSEARCH_ES_URL"]
    files = 2_000
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(files):
        (docs / f"note{n:05d}.md").write_text(f"# Note {n}\n\nThe handbook says item {n} matters.\n")
    args = ["index", "docs", str(docs), "--quiet", "--batch-size", "20", "--workers", "1"]
    checkpoint = Path(cli_env["HOPSEARCH_STATE_DIR"]) / "loads" / "*.checkpoint.json"
    index, message = stopped_by(args, cli_env, block, lifted, checkpoint=checkpoint, at=100)
    assert index is not None
    assert f"index [{index}] is blocked by {block}" in message and "run it again" in message, message
    assert "--resume" not in message
    if settings_of(url, index).get("index.refresh_interval") == "-1":
        assert "the same command (it goes on where the index stands) restores them" in message, message
    put_block(url, index, block, None)
    again = cli([*args, "--json"], cli_env)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, out + err
    report = orjson.loads(out)
    assert report["read"] == files and report["rejected"] == 0 and report["indexed"] + report["skipped"] == files
    assert 0 < report["skipped"] < files  # what the stopped load indexed stays; the rest came now
    assert counted(url, index, [])[0] == files
    after = settings_of(url, index)
    assert after.get("index.refresh_interval") == "1s" and after.get("index.number_of_replicas") == "0"
