"""``hopsearch index ...`` through click's runner against the real nodes."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from hopsearch.cli.index import EXIT_REJECTED, _print
from hopsearch.cli.main import main
from hopsearch.loaders.model import LoadReport
from tests.conftest import EsNode
from tests.loader_files import make_pdf
from tests.test_loaders_es import dpr_with_bad_rows


@pytest.fixture
def cli_env(es_node: EsNode, tmp_path: Path) -> Iterator[dict[str, str]]:
    prefix = f"cli{uuid.uuid4().hex[:8]}"
    yield {
        "HOPSEARCH_ES_URL": es_node.url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_STATE_DIR": str(tmp_path / "state"),
        "HOPSEARCH_EMBEDDER": "none",
    }
    httpx.delete(f"{es_node.url}/{prefix}-*", timeout=60)  # a busy shared node answers late


def count(env: dict[str, str]) -> int:
    url, prefix = env["HOPSEARCH_ES_URL"], env["HOPSEARCH_INDEX_PREFIX"]
    httpx.post(f"{url}/{prefix}-passages/_refresh")
    return int(httpx.get(f"{url}/{prefix}-passages/_count").json()["count"])


def test_index_dpr_prints_reconciliation_and_resumes(cli_env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "psgs.tsv"
    dpr_with_bad_rows(path, 1000)
    runner = CliRunner()
    result = runner.invoke(main, ["index", "dpr", str(path), "--quiet"], env=cli_env)
    assert result.exit_code == EXIT_REJECTED, result.output  # rejects: a script can tell
    assert "read 1,004 = indexed 1,000 + rejected 4 + skipped 0  [reconciled]" in result.output
    assert "dead letters:" in result.output and "4 records rejected" in result.stderr
    assert count(cli_env) == 1000

    args = ["index", "dpr", str(path), "--resume", "--json", "--quiet", "--allow-rejects"]
    again = runner.invoke(main, args, env=cli_env)
    assert again.exit_code == 0, again.output
    report = json.loads(again.output)
    assert report["reconciled"] and report["read"] == 1004 and report["indexed"] == 1000
    assert report["resumed_from"] > 1000  # the checkpoint said: complete


def test_index_jsonl_qa_and_docs(cli_env: dict[str, str], tmp_path: Path, sample_questions_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "x1", "title": "X", "text": "one"}\n{"_id": "x2", "text": "two"}\n')
    runner = CliRunner()
    result = runner.invoke(main, ["index", "jsonl", str(corpus), "--quiet", "--json"], env=cli_env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["indexed"] == 2
    result = runner.invoke(main, ["index", "qa", str(sample_questions_path), "--quiet", "--json"], env=cli_env)
    assert result.exit_code == 0, result.output
    qa = json.loads(result.output)
    assert qa["reconciled"] and qa["indexed"] > 100
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nSome text about alpha.\n")
    (docs / "b.pdf").write_bytes(make_pdf(["Bravo report"]))
    (docs / "bad.pdf").write_bytes(b"not a pdf at all")
    result = runner.invoke(main, ["index", "docs", str(docs), "--quiet"], env=cli_env)
    assert result.exit_code == EXIT_REJECTED, result.output
    assert "read 3 = indexed 2 + rejected 1 + skipped 0  [reconciled]" in result.output
    assert count(cli_env) == 2 + qa["indexed"] + 2


def test_index_errors_exit_non_zero(cli_env: dict[str, str], tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["index", "dpr", str(tmp_path / "nope.tsv"), "--quiet"], env=cli_env)
    assert missing.exit_code == 1 and "no such file" in missing.output
    down = {**cli_env, "HOPSEARCH_ES_URL": "http://127.0.0.1:9"}
    path = tmp_path / "p.tsv"
    path.write_text("id\ttext\ttitle\n1\tx\ty\n")
    unreachable = runner.invoke(main, ["index", "dpr", str(path), "--quiet"], env=down)
    assert unreachable.exit_code == 1 and "not reachable" in unreachable.output


def test_mismatch_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    report = LoadReport("dpr", "f", "i", read=10, indexed=8, rejected=1, skipped=0, documents=8,
                        seconds=1.0, dead_letter="dl", checkpoint=None)  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        _print(report, as_json=False)
    assert exited.value.code == 1
    assert "MISMATCH" in capsys.readouterr().out


def test_docs_into_a_named_index_a_single_file_and_search_filters(cli_env: dict[str, str], tmp_path: Path) -> None:
    """``index docs --index NAME`` (not only the default alias), one file, and ``search --source/--filter``
    so company documents and DPR passages of one index need not mix (issue 13, item 12)."""
    url, prefix = cli_env["HOPSEARCH_ES_URL"], cli_env["HOPSEARCH_INDEX_PREFIX"]
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "policy.md").write_text("# Policy\n\nThe holiday policy gives staff 25 days of holiday.\n")
    (docs / "other.md").write_text("# Other\n\nSomething else about holiday trips.\n")
    runner = CliRunner()
    named = f"{prefix}-company"
    one = runner.invoke(
        main, ["index", "docs", str(docs / "policy.md"), "--index", named, "--quiet", "--json"], env=cli_env
    )
    assert one.exit_code == 0, one.output
    report = json.loads(one.output)
    assert report["index"] == named and (report["read"], report["indexed"]) == (1, 1)
    httpx.post(f"{url}/{named}/_refresh")
    held = httpx.post(f"{url}/{named}/_search", json={"_source": ["path"]}).json()["hits"]["hits"]
    assert [Path(h["_source"]["path"]).name for h in held] == ["policy.md"]
    assert httpx.head(f"{url}/{prefix}-passages").status_code == 404  # the default alias was not touched

    again = runner.invoke(
        main, ["index", "docs", str(docs / "policy.md"), "--index", named, "--quiet", "--json"], env=cli_env
    )
    assert json.loads(again.output)["skipped"] == 1  # incremental for one file too

    both = runner.invoke(main, ["index", "docs", str(docs), "--quiet"], env=cli_env)  # the default alias
    assert both.exit_code == 0, both.output
    psgs = tmp_path / "psgs.tsv"
    psgs.write_text("id\ttext\ttitle\n1\tA holiday in Rome is a 1953 film.\tRoman Holiday\n")
    assert runner.invoke(main, ["index", "dpr", str(psgs), "--quiet"], env=cli_env).exit_code == 0

    def sources(*args: str) -> list[str]:
        result = runner.invoke(main, ["search", "holiday", "-k", "10", "--json", *args], env=cli_env)
        assert result.exit_code == 0, result.output
        return sorted(h["_source"]["source"] for h in json.loads(result.output)["hits"])

    assert sources() == ["docs", "docs", "dpr"]
    assert sources("--source", "docs") == ["docs", "docs"]
    assert sources("--filter", "source=dpr") == ["dpr"]
    assert sources("--index", named) == ["docs"]
    bad = runner.invoke(main, ["search", "holiday", "--filter", "nonsense"], env=cli_env)
    assert bad.exit_code == 2 and "FIELD=VALUE" in bad.output


def test_a_file_name_that_is_not_utf8_is_one_dead_letter(cli_env: dict[str, str], tmp_path: Path) -> None:
    """``bad\\xff.md`` (a real file whose name is not UTF-8) is one dead letter, its name escaped, and the
    rest of the folder loads and is recorded (issue 27, item 7: it aborted the load with a traceback)."""
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "good.md").write_text("# Good\n\nAlpha handbook text.\n")
    (docs / "sub" / "fine.txt").write_text("Bravo handbook text.\n")
    with open(os.path.join(os.fsencode(docs), b"bad\xff.md"), "wb") as bad:
        bad.write(b"# Bad\n\nCharlie text under a name that is not UTF-8.\n")
    runner = CliRunner()
    result = runner.invoke(main, ["index", "docs", str(docs), "--quiet"], env=cli_env)
    assert result.exit_code == EXIT_REJECTED, result.output
    assert "read 3 = indexed 2 + rejected 1 + skipped 0  [reconciled]" in result.output
    assert count(cli_env) == 2
    listed = runner.invoke(main, ["loads", "list", "--json"], env=cli_env)
    assert listed.exit_code == 0, listed.output
    [load] = json.loads(listed.output)
    assert load["dead_letters"] == 1 and load["report"]["indexed"] == 2
    [letter] = [json.loads(line) for line in Path(load["report"]["dead_letter"]).read_text().splitlines()]
    assert letter["file"] == str(docs) + "/bad\\xff.md"
    assert "not valid UTF-8" in letter["reason"]
    again = runner.invoke(main, ["index", "docs", str(docs), "--quiet", "--allow-rejects"], env=cli_env)
    assert again.exit_code == 0, again.output
    assert "read 3 = indexed 0 + rejected 1 + skipped 2  [reconciled]" in again.output


def test_rebuild_for_vectors_keeps_every_other_source(cli_env: dict[str, str], tmp_path: Path) -> None:
    """Vectors for a folder added to a BM25-only index: the refusal names the command that keeps every
    passage, and that ``--rebuild`` copies the other sources' passages (with vectors) into the new version
    before the old one goes (issue 27, item 8: it kept only the new folder's). A later rebuild of one folder
    replaces that folder's passages alone."""
    url, prefix = cli_env["HOPSEARCH_ES_URL"], cli_env["HOPSEARCH_INDEX_PREFIX"]
    handbook, new = tmp_path / "handbook", tmp_path / "new"
    for folder, names in ((handbook, ["a1", "a2", "a3"]), (new, ["b1", "b2"])):
        folder.mkdir()
        for name in names:
            (folder / f"{name}.md").write_text(f"# {name}\n\nThe {name} policy says what {name} means.\n")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(f'{{"_id": "j{n}", "title": "J{n}", "text": "jsonl passage {n}"}}\n' for n in range(3)))
    runner = CliRunner()
    for args in (["docs", str(handbook)], ["jsonl", str(corpus)]):
        loaded = runner.invoke(main, ["index", *args, "--quiet"], env=cli_env)
        assert loaded.exit_code == 0, loaded.output
    assert count(cli_env) == 6

    vectors = {**cli_env, "HOPSEARCH_EMBEDDER": "minilm"}
    refused = runner.invoke(main, ["index", "docs", str(new), "--quiet"], env=vectors)
    assert refused.exit_code == 1, refused.output
    command = f"hopsearch index docs {new.resolve()} --rebuild"
    assert command in refused.output and "copies every other passage" in refused.output, refused.output

    rebuilt = runner.invoke(main, [*command.split()[1:], "--quiet", "--json"], env=vectors)
    assert rebuilt.exit_code == 0, rebuilt.output
    report = json.loads(rebuilt.output)
    assert (report["indexed"], report["copied"], report["index"]) == (2, 6, f"{prefix}-passages-v2")
    assert httpx.head(f"{url}/{prefix}-passages-v1").status_code == 404  # the old version went, nothing with it

    def held() -> list[tuple[str, str, bool]]:
        httpx.post(f"{url}/{prefix}-passages/_refresh")
        body = {"size": 100, "_source": ["source", "path", "doc_id", "embedder"]}
        hits = httpx.post(f"{url}/{prefix}-passages/_search", json=body).json()["hits"]["hits"]
        return sorted(
            (h["_source"]["source"], Path(h["_source"].get("path") or h["_source"]["doc_id"]).name,
             bool(h["_source"].get("embedder")))
            for h in hits
        )  # fmt: skip

    docs = [("docs", f"{name}.md", True) for name in ("a1", "a2", "a3", "b1", "b2")]
    assert held() == docs + [("jsonl", f"j{n}", True) for n in range(3)]  # all kept, all with vectors

    (handbook / "a3.md").unlink()
    again = runner.invoke(main, ["index", "docs", str(handbook), "--rebuild", "--quiet", "--json"], env=vectors)
    assert again.exit_code == 0, again.output
    assert (json.loads(again.output)["indexed"], json.loads(again.output)["copied"]) == (2, 5)
    assert held() == [d for d in docs if d[1] != "a3.md"] + [("jsonl", f"j{n}", True) for n in range(3)]
