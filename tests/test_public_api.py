"""The curated ``hopsearch`` namespace: every exported name resolves, importing the service does not load
the loaders, and a program written against it opens a runtime, loads, searches and asks."""

from __future__ import annotations

import inspect
import subprocess
import sys
import uuid
from pathlib import Path

import orjson

import hopsearch
from tests.conftest import EsNode
from tests.llm_fixtures import settings_for
from tests.scripted_llm import ScriptedLLM, ScriptRequest


def test_every_exported_name_resolves_and_is_documented() -> None:
    assert hopsearch.__doc__ and "open_runtime" in hopsearch.__doc__
    for name in hopsearch.__all__:
        value = getattr(hopsearch, name)
        assert value is not None, name
        if inspect.isfunction(value) or inspect.isclass(value):
            assert value.__doc__, name
    assert {"open_runtime", "load", "Runtime", "AskOptions", "Answer", "load_settings"} <= set(hopsearch.__all__)


def test_importing_the_service_loads_neither_loaders_nor_cli() -> None:
    code = (
        "import sys, hopsearch, hopsearch.service.app.runtime; "
        "assert not [m for m in sys.modules if m.startswith(('hopsearch.loaders', 'hopsearch.cli'))]"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def answer_from_context(request: ScriptRequest) -> str:
    return " Steven Spielberg" if "Spielberg" in request.prompt else " I do not know"


async def test_open_runtime_load_search_ask(es8_node: EsNode, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    rows = [
        {"_id": "jaws", "title": "Jaws (film)", "text": "Jaws is a 1975 film directed by Steven Spielberg."},
        {"_id": "alien", "title": "Alien (film)", "text": "Alien is a 1979 film directed by Ridley Scott."},
    ]
    corpus.write_bytes(b"\n".join(orjson.dumps(row) for row in rows))
    with ScriptedLLM(answer_from_context) as llm:
        prefix = f"pub{uuid.uuid4().hex[:8]}"
        settings = settings_for(llm, es_url=[es8_node.url], index_prefix=prefix, embedder="none", state_dir=tmp_path)
        async with await hopsearch.open_runtime(settings) as runtime:
            try:
                report = await hopsearch.load(runtime, corpus, kind="jsonl")
                assert report.reconciled and report.indexed == 2
                found = await runtime.search("Who directed Jaws?", k=1)
                answer = await runtime.ask("Who directed Jaws?", strategy="single", options=hopsearch.AskOptions(k=1))
            finally:
                await runtime.store.client.indices.delete(index=f"{prefix}-*", allow_no_indices=True)
    assert [hit.id for hit in found.hits] == ["jaws"]
    answer.raise_for_error()
    assert answer.text == "Steven Spielberg" and [c.id for c in answer.citations] == ["jaws"]
