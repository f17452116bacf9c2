"""CLI commands through click's runner against the real Elasticsearch: config, init, search,
traces, es status, doctor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

from click.testing import CliRunner

from hopsearch.cli.main import main
from tests.conftest import EsNode
from tests.scripted_embeddings import ScriptedEmbeddings


def env_for(node: EsNode, prefix: str) -> dict[str, str]:
    return {"HOPSEARCH_ES_URL": node.url, "HOPSEARCH_INDEX_PREFIX": prefix, "HOPSEARCH_EMBEDDER": "none"}


def test_config_show_masks_secrets() -> None:
    result = CliRunner().invoke(main, ["config", "show"], env={"HOPSEARCH_ES_API_KEY": "s3cr3t-key"})
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["es_api_key"] == "**********"
    assert "s3cr3t-key" not in result.output


def test_init_search_and_traces(es_node: EsNode) -> None:
    prefix = f"cli{uuid.uuid4().hex[:8]}"
    env = env_for(es_node, prefix)
    runner = CliRunner()
    result = runner.invoke(main, ["init", "--no-embed"], env=env)
    assert result.exit_code == 0, result.output
    assert f"passages index {prefix}-passages-v1" in result.output
    # index two passages straight into ES, then search them through the CLI
    import urllib.request

    for doc_id, title in (("a1", "Glacier"), ("a2", "Desert")):
        body = json.dumps({"title": title, "text": f"{title} facts and figures", "source": "jsonl"}).encode()
        request = urllib.request.Request(
            f"{es_node.url}/{prefix}-passages/_doc/{doc_id}?refresh=true",
            data=body,
            method="PUT",
            headers={"content-type": "application/json"},
        )
        urllib.request.urlopen(request).read()
    result = runner.invoke(main, ["search", "glacier", "--json"], env=env)
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert found["mode"] == "bm25" and [h["_id"] for h in found["hits"]] == ["a1"]

    result = runner.invoke(main, ["traces", "show", "nope"], env=env)
    assert result.exit_code == 1 and "no trace 'nope'" in result.output
    result = runner.invoke(main, ["search", "x", "--mode", "dense"], env=env)
    assert result.exit_code == 1 and "embedder" in result.output.lower()


def test_search_reports_unreachable_elasticsearch() -> None:
    result = CliRunner().invoke(main, ["search", "x"], env={"HOPSEARCH_ES_URL": "http://127.0.0.1:9"})
    assert result.exit_code == 1
    assert "not reachable" in result.output


def test_es_status_reports_not_running(tmp_path: object) -> None:
    result = CliRunner().invoke(
        main, ["es", "status"], env={"HOPSEARCH_ES_PORT": "9", "HOPSEARCH_STATE_DIR": str(tmp_path)}
    )
    assert result.exit_code == 1 and "not running" in result.output


def test_es_up_status_down_as_this_user(tmp_path: object) -> None:
    """`hopsearch es up|status|down` on a node of its own (the suite runs as root in CI)."""
    from hopsearch.cli.local.esnode import free_port

    env = {
        "HOPSEARCH_ES_PORT": str(free_port()),
        "HOPSEARCH_STATE_DIR": str(tmp_path),
        "HOPSEARCH_ES_VERSION": "7.17.29",
    }
    runner = CliRunner()
    try:
        up = runner.invoke(main, ["es", "up"], env=env)
        assert up.exit_code == 0, up.output
        assert "Elasticsearch 7.17.29 is up" in up.output
        status = runner.invoke(main, ["es", "status", "--json"], env=env)
        assert status.exit_code == 0, status.output
        assert json.loads(status.output)["running"] is True
    finally:
        down = runner.invoke(main, ["es", "down"], env=env)
    assert down.exit_code == 0 and "stopped Elasticsearch 7.17.29" in down.output
    after = runner.invoke(main, ["es", "status"], env=env)
    assert after.exit_code == 1


def hopsearch(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command line as a person runs it: its own process, real stderr and exit status."""
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("HOPSEARCH_")}
    command = [sys.executable, "-c", "from hopsearch.cli.main import main; main()", *args]
    return subprocess.run(command, env={**clean, **env}, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_config_show_masks_passwords_inside_urls() -> None:
    env = {
        "HOPSEARCH_ES_URL": "http://elastic:es-pw-1@es1:9200,https://elastic:es-pw-2@es2:9200",
        "HOPSEARCH_LLM_BASE_URL": "http://user:llm-pw-3@llm:8000/v1",
        "HOPSEARCH_EMBED_BASE_URL": "http://user:embed-pw-4@embed:8000/v1",
        "HOPSEARCH_RERANK_URL": "http://user:rerank-pw-5@rerank:8000",
    }
    result = CliRunner().invoke(main, ["config", "show"], env=env)
    assert result.exit_code == 0, result.output
    for secret in ("es-pw-1", "es-pw-2", "llm-pw-3", "embed-pw-4", "rerank-pw-5"):
        assert secret not in result.output
    shown = json.loads(result.output)
    assert shown["es_url"] == ["http://elastic:**********@es1:9200", "https://elastic:**********@es2:9200"]
    assert shown["llm_base_url"] == ["http://user:**********@llm:8000/v1"]
    assert shown["embed_base_url"] == "http://user:**********@embed:8000/v1"
    assert shown["rerank_url"] == "http://user:**********@rerank:8000"


DOCS = [
    {"_id": "glacier", "title": "Glacier", "text": "A glacier is a slow river of ice that carves valleys."},
    {"_id": "desert", "title": "Desert", "text": "A desert gets very little rain and has dunes of sand."},
    {"_id": "harbour", "title": "Harbour", "text": "Ships unload their cargo at the harbour's quays."},
]


def doctor_line(output: str) -> str:
    [line] = [line for line in output.splitlines() if "index vectors" in line]
    return line


def test_doctor_says_what_search_does_with_another_embedders_vectors(es8_node: EsNode, tmp_path: Path) -> None:
    """An index of MiniLM's vectors, e5 configured: doctor says dense and hybrid search embed its queries with
    the index's own embedder (issue 42 item 11), and they do; its ok line is a whole sentence. An index of a
    server's embedder this version cannot make: doctor says dense and hybrid refuse it, and they do. The URL's
    password is masked throughout."""
    prefix, remote = f"doc{uuid.uuid4().hex[:8]}", f"doc{uuid.uuid4().hex[:8]}"
    host = es8_node.url.split("://", 1)[1]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(doc) + "\n" for doc in DOCS), encoding="utf-8")
    env = {
        "HOPSEARCH_ES_URL": f"http://elastic:doctor-pw-7@{host}",  # an open node ignores the credentials
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_LLM_BASE_URL": "http://127.0.0.1:9/v1",
        "HOPSEARCH_HEALTH_TIMEOUT": "1",
        "HOPSEARCH_STATE_DIR": str(tmp_path),
    }
    minilm, e5 = {**env, "HOPSEARCH_EMBEDDER": "minilm"}, {**env, "HOPSEARCH_EMBEDDER": "e5"}
    runner = CliRunner()
    try:
        made = runner.invoke(main, ["index", "jsonl", str(corpus), "--quiet"], env=minilm)
        assert made.exit_code == 0, made.output
        other = runner.invoke(main, ["doctor"], env=e5)
        same = runner.invoke(main, ["doctor"], env=minilm)
        searched = {
            mode: runner.invoke(main, ["search", "a river of ice", "--mode", mode, "--json"], env=e5)
            for mode in ("dense", "hybrid")
        }
        with ScriptedEmbeddings(dims=8, batch_s=0) as server:
            served = {
                **env,
                "HOPSEARCH_INDEX_PREFIX": remote,
                "HOPSEARCH_EMBEDDER": "openai",
                "HOPSEARCH_EMBED_BASE_URL": server.base_url,
                "HOPSEARCH_EMBED_MODEL": "scripted-embed",
                "HOPSEARCH_EMBED_DIMS": "8",
            }
            made = runner.invoke(main, ["index", "jsonl", str(corpus), "--quiet"], env=served)
            assert made.exit_code == 0, made.output
        unknown = runner.invoke(main, ["doctor"], env={**minilm, "HOPSEARCH_INDEX_PREFIX": remote})
        refused = runner.invoke(
            main, ["search", "ice", "--mode", "dense"], env={**minilm, "HOPSEARCH_INDEX_PREFIX": remote}
        )
    finally:
        for name in (prefix, remote):
            urllib.request.urlopen(urllib.request.Request(f"{es8_node.url}/{name}-*", method="DELETE")).read()
    assert "doctor-pw-7" not in other.output + same.output + unknown.output
    assert f"at http://elastic:**********@{host}" in other.output
    told = doctor_line(other.output)
    assert told.startswith("[??] index vectors:") and "refuse" not in told, told
    assert "all-MiniLM-L6-v2" in told and "e5" in told and "dense and hybrid search embed this index's queries" in told
    for mode, result in searched.items():
        assert result.exit_code == 0, (mode, result.output)
        found = json.loads(result.output)
        assert found["mode"] == mode and found["hits"][0]["_id"] == "glacier", (mode, found)
    ok = doctor_line(same.output)
    assert ok.startswith("[ok] index vectors:")
    assert ok.endswith("the configured embedder's: dense and hybrid search use them")  # a whole sentence
    flagged = doctor_line(unknown.output)
    assert flagged.startswith("[!!] index vectors:") and "openai:scripted-embed" in flagged
    assert "dense and hybrid search refuse them" in flagged and unknown.exit_code == 1
    assert refused.exit_code == 1 and "openai:scripted-embed" in refused.output


def test_misspelt_setting_names_warn_with_the_closest_name(tmp_path: Path) -> None:
    config = tmp_path / "hopsearch.toml"
    config.write_text('embeder = "e5"\nindex_prefix = "fromfile"\n', encoding="utf-8")
    env = {"HOPSEARCH_EMBEDER": "e5", "HOPSEARCH_CONFIG": str(config), "HOPSEARCH_NOTHING_LIKE_IT": "1"}
    result = hopsearch(["config", "show"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["index_prefix"] == "fromfile"  # the file is read; its typo warned
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 3, result.stderr
    assert any("HOPSEARCH_EMBEDER is not a setting; did you mean HOPSEARCH_EMBEDDER?" in w for w in warnings)
    assert any(f"{config}: key 'embeder' is not a setting; did you mean embedder?" in w for w in warnings)
    assert any("HOPSEARCH_NOTHING_LIKE_IT is not a setting; `hopsearch config reference`" in w for w in warnings)


def readme_toml() -> str:
    """The README's example settings file (its Configuration section's TOML block)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Configuration") :]
    start = section.index("```toml\n") + len("```toml\n")
    return section[start : section.index("```", start)]


def test_the_readmes_settings_file_is_read_as_written(tmp_path: Path) -> None:
    config = tmp_path / "hopsearch.toml"
    config.write_text(readme_toml(), encoding="utf-8")
    result = hopsearch(["config", "show"], {"HOPSEARCH_CONFIG": str(config)}, tmp_path)
    assert result.returncode == 0 and "WARNING" not in result.stderr, result.stderr
    shown = json.loads(result.stdout)
    assert shown["es_url"] == ["http://es1:9200", "http://es2:9200"] and shown["index_prefix"] == "intranet"
    assert shown["embedder"] == "e5" and shown["llm_base_url"] == ["http://gpu1:8000/v1"]
    assert shown["api_max_concurrent_asks"] == 8 and shown["acl_default"] == "private"


def test_setting_names_are_read_whatever_their_case_at_the_top_or_in_a_hopsearch_table(tmp_path: Path) -> None:
    """One rule (issue 42 item 12): names match whatever their case, in the file as in the environment,
    without a warning; a ``[hopsearch]`` table's keys are settings; one setting set twice is an error."""
    config = tmp_path / "hopsearch.toml"
    config.write_text('EMBEDDER = "e5"\n\n[hopsearch]\nIndex_Prefix = "fromtable"\n', encoding="utf-8")
    env = {"HOPSEARCH_CONFIG": str(config), "hopsearch_api_max_k": "7"}
    result = hopsearch(["config", "show"], env, tmp_path)
    assert result.returncode == 0 and "WARNING" not in result.stderr, result.stderr
    shown = json.loads(result.stdout)
    assert (shown["embedder"], shown["index_prefix"], shown["api_max_k"]) == ("e5", "fromtable", 7)
    config.write_text('[hopsearch]\nHOPSEARCH_EMBEDDER = "e5"\n\n[llm]\nmodel = "x"\n', encoding="utf-8")
    result = hopsearch(["config", "show"], {"HOPSEARCH_CONFIG": str(config)}, tmp_path)
    assert result.returncode == 0 and json.loads(result.stdout)["embedder"] == "minilm"  # told, not applied
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING")]
    assert any("key 'HOPSEARCH_EMBEDDER' is not a setting; did you mean embedder?" in w for w in warnings)
    assert any("key 'llm' is not a setting" in w for w in warnings) and len(warnings) == 2, warnings
    config.write_text('embedder = "e5"\n[hopsearch]\nEmbedder = "minilm"\n', encoding="utf-8")
    result = hopsearch(["config", "show"], {"HOPSEARCH_CONFIG": str(config)}, tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"Error: {config}: embedder and [hopsearch] Embedder set the same setting; keep one"
    ]


def test_a_named_settings_file_that_is_missing_is_one_line_and_exit_1(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "hopsearch.toml"
    for command in (["config", "show"], ["search", "x"], ["doctor"]):
        result = hopsearch(command, {"HOPSEARCH_CONFIG": str(missing)}, tmp_path)
        assert result.returncode == 1 and result.stdout == "", command
        assert result.stderr.splitlines() == [f"Error: HOPSEARCH_CONFIG names {missing}, which does not exist"]
    result = hopsearch(["config", "show"], {"HOPSEARCH_CONFIG": str(tmp_path)}, tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"Error: HOPSEARCH_CONFIG names {tmp_path}, which is not a file"]


def test_a_url_setting_without_its_scheme_is_a_bad_setting(tmp_path: Path) -> None:
    """``HOPSEARCH_ES_URL=localhost:9200`` is a bad setting naming the variable and what to add, not an
    unreachable node (issue 42 item 13); the LLM's, the embeddings server's and the reranker's URLs too.
    A password in a URL without a scheme stays masked."""
    cases = {
        "HOPSEARCH_ES_URL": ("localhost:9200", "'localhost:9200' has no scheme: add http:// or https://"),
        "HOPSEARCH_LLM_BASE_URL": ("http://gpu1:8000/v1,gpu2:8000/v1", "'gpu2:8000/v1' has no scheme"),
        "HOPSEARCH_EMBED_BASE_URL": ("embed:8000/v1", "'embed:8000/v1' has no scheme"),
        "HOPSEARCH_RERANK_URL": ("ftp://rerank:8000", "has the scheme ftp: use http:// or https://"),
    }
    for variable, (value, said) in cases.items():
        result = hopsearch(["search", "x"], {variable: value}, tmp_path)
        assert result.returncode == 1 and result.stdout == "", (variable, result.stderr)
        [line] = result.stderr.splitlines()
        assert line.startswith(f"Error: bad setting {variable}=") and said in line, line
        assert "reachable" not in line
    result = hopsearch(["doctor"], {"HOPSEARCH_ES_URL": "elastic:es-pw-8@localhost:9200"}, tmp_path)
    assert result.returncode == 1 and "es-pw-8" not in result.stderr and "has no scheme" in result.stderr


def test_a_bad_setting_value_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = hopsearch(["config", "show"], {"HOPSEARCH_EMBEDDER": "e6"}, tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "Error: bad setting HOPSEARCH_EMBEDDER='e6': must be 'minilm', 'e5', 'openai' or 'none'"
    ]
    config = tmp_path / "hopsearch.toml"
    config.write_text("api_max_k = 0\n", encoding="utf-8")
    result = hopsearch(["doctor"], {"HOPSEARCH_CONFIG": str(config)}, tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"Error: bad setting api_max_k=0 in {config}: must be greater than or equal to 1"
    ]
    config.write_text("api_max_k = [\n", encoding="utf-8")
    result = hopsearch(["search", "x"], {"HOPSEARCH_CONFIG": str(config)}, tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"Error: {config} (HOPSEARCH_CONFIG): ")
