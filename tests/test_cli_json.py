"""Every command's ``--json`` is UTF-8 with text as it is (issue 42 item 13): a Japanese corpus in a folder
with a Japanese name, loaded, searched, listed, and keys and groups with Japanese principals, each
command run as its own process against Elasticsearch 8.19; no ``\\uXXXX`` escape anywhere. Every
command that has ``--json`` prints through the one function that does so."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import click
import httpx

from hopsearch.cli.main import main
from tests.conftest import EsNode

CLI = Path(__file__).resolve().parents[1] / "cli"
DOCS = [
    {"_id": "kisoku", "title": "就業規則", "text": "就業規則は、社員の労働時間と休暇を定める。"},
    {"_id": "kyuka", "title": "休暇", "text": "年次有給休暇は二十日。"},
]


def hopsearch(args: list[str], env: dict[str, str], cwd: Path) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("HOPSEARCH_")}
    command = [sys.executable, "-c", "from hopsearch.cli.main import main; main()", *args]
    done = subprocess.run(command, env={**clean, **env}, cwd=cwd, capture_output=True, timeout=300)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout.decode("utf-8")


def test_json_output_keeps_japanese_as_it_is(es8_node: EsNode, tmp_path: Path) -> None:
    prefix = f"cj{uuid.uuid4().hex[:10]}"
    folder = tmp_path / "社内文書"
    folder.mkdir()
    corpus = folder / "規程.jsonl"
    corpus.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in DOCS), encoding="utf-8")
    env = {
        "HOPSEARCH_ES_URL": es8_node.url,
        "HOPSEARCH_INDEX_PREFIX": prefix,
        "HOPSEARCH_EMBEDDER": "none",
        "HOPSEARCH_STATE_DIR": str(tmp_path / "state"),
        "HOPSEARCH_LLM_MODEL": "日本語モデル",
    }
    try:
        printed = {
            "index": hopsearch(["index", "jsonl", str(corpus), "--json", "--quiet"], env, tmp_path),
            "search": hopsearch(["search", "就業規則", "--json"], env, tmp_path),
            "loads list": hopsearch(["loads", "list", "--json"], env, tmp_path),
            "keys create": hopsearch(["keys", "create", "hr", "--principal", "group:人事", "--json"], env, tmp_path),
            "keys list": hopsearch(["keys", "list", "--json"], env, tmp_path),
            "groups add": hopsearch(["groups", "add", "山田", "人事", "--json"], env, tmp_path),
            "groups list": hopsearch(["groups", "list", "--json"], env, tmp_path),
            "config show": hopsearch(["config", "show"], env, tmp_path),
        }
    finally:
        httpx.delete(f"{es8_node.url}/{prefix}-*")
    for command, output in printed.items():
        assert "\\u" not in output, (command, output)
        json.loads(output)
    assert "社内文書/規程.jsonl" in printed["index"] and "社内文書" in printed["loads list"]
    assert "就業規則は、社員の労働時間" in printed["search"]
    assert "group:人事" in printed["keys create"] and "group:人事" in printed["keys list"]
    assert "山田" in printed["groups add"] and "人事" in printed["groups list"]
    assert "日本語モデル" in printed["config show"]


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], click.Command]:
    found: dict[tuple[str, ...], click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found |= _commands(command, (*path, name))
        else:
            found[(*path, name)] = command
    return found


def test_no_command_escapes_what_it_prints_as_json() -> None:
    """Every ``json.dumps`` of the command modules keeps text as it is (``ensure_ascii=False``): the
    ``--json`` options print through ``echo_json``, which does; ``cli/local`` (the processes' own files)
    prints for no person."""
    with_json = [path for path, c in _commands(main).items() if any("--json" in p.opts for p in c.params)]
    assert len(with_json) >= 15, with_json
    escaping = []
    for module in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "dumps":
                kept = any(
                    k.arg == "ensure_ascii" and isinstance(k.value, ast.Constant) and k.value.value is False
                    for k in node.keywords
                )
                if not kept:
                    escaping.append(f"{module.name}:{node.lineno}")
    assert escaping == []
