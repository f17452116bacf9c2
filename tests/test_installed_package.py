"""The product as users install it: the wheel (built through the sdist, from a clean copy of the tree)
in a fresh virtualenv outside the checkout, with nothing of the checkout on ``sys.path``.

Every ``hopsearch.*`` module that exists as a source file imports from the virtualenv; the CLI answers
``--help``, ``config show``, ``init`` and ``index qa`` (the bundled sample, found inside the installed
package); then the Dockerfile's own ``CMD`` serves (with the Dockerfile's ``ENV``), its ``HEALTHCHECK``
turns healthy, and one ``_retrieve`` and one ``_ask`` (scripted LLM) go through the real 8.19 node.
``uv`` builds and installs (the build backend and dependencies come from PyPI or uv's cache).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests import packaging
from tests.conftest import EsNode, unavailable
from tests.packaging import module_names, source_files
from tests.scripted_llm import ScriptedLLM, ScriptRequest

ROOT = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).parent / "uv"
API_KEY = "installed-package-key"


def clean_copy(target: Path) -> Path:
    """The tree as git sees it (tracked and untracked-but-not-ignored files, as they are on disk)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for relative in filter(None, listed.split("\0")):
        source = ROOT / relative
        if source.is_file():
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / relative)
    return target


def uv(*args: str | Path, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(
        [str(UV), *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"uv {' '.join(map(str, args))} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@dataclass(frozen=True)
class Installed:
    tree: Path
    wheel: Path
    sdist: Path
    build_log: str
    venv: Path
    work: Path  # the working directory of every command: outside the tree

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of the installed commands: no PYTHONPATH, no HOPSEARCH_* from outside, no
        path into the checkout; the Dockerfile's ENV, then ``extra``."""
        keep = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("HOPSEARCH_") and key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        }
        path = [p for p in keep.get("PATH", "").split(os.pathsep) if p and not p.startswith(str(ROOT))]
        home = self.work / "home"
        keep.update(PATH=os.pathsep.join([str(self.venv / "bin"), *path]), HOME=str(home))
        keep.update(XDG_CACHE_HOME=str(home / ".cache"), XDG_STATE_HOME=str(home / ".state"))
        keep.update(packaging.runtime().env)
        keep.update(extra)
        return keep

    def run(self, *command: str, env: dict[str, str], timeout: float = 300) -> str:
        done = subprocess.run(
            list(command), cwd=self.work, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    if not UV.is_file():
        unavailable(f"uv not installed next to {sys.executable} (pip install -e '.[dev]')")
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        unavailable("the installed-package test copies the tree that git lists: no git checkout here")
    base = tmp_path_factory.mktemp("installed")
    tree = clean_copy(base / "tree")
    log = uv("build", "--python", sys.executable, "--out-dir", base / "dist", tree, cwd=base)  # sdist, then its wheel
    [wheel] = (base / "dist").glob("hopsearch-*.whl")
    [sdist] = (base / "dist").glob("hopsearch-*.tar.gz")
    venv = base / "venv"
    uv("venv", "--python", sys.executable, venv, cwd=base)
    extra = packaging.runtime().extra_packages
    uv("pip", "install", "--python", venv / "bin" / "python", wheel, cwd=base)
    uv("pip", "install", "--python", venv / "bin" / "python", "--no-deps", *extra, cwd=base)
    (base / "work").mkdir()
    return Installed(tree, wheel, sdist, log, venv, base / "work")


def test_the_sdist_and_the_wheel_carry_every_file_and_build_without_warnings(installed: Installed) -> None:
    files = source_files(installed.tree)
    assert len(files) > 80 and "loaders/data/sample_2wiki.jsonl" in files
    wheel_names = set(zipfile.ZipFile(installed.wheel).namelist())
    assert not [f for f in files if f"hopsearch/{f}" not in wheel_names]
    assert {name.split("/")[0] for name in wheel_names} == {
        "hopsearch",
        installed.wheel.name.rsplit("-", 3)[0] + ".dist-info",
    }
    top = installed.sdist.name.removesuffix(".tar.gz")
    with tarfile.open(installed.sdist) as archive:
        sdist_names = set(archive.getnames())
    assert not [f for f in files if f"{top}/{f}" not in sdist_names]
    assert "Package would be ignored" not in installed.build_log
    assert "BuildBackendWarning" not in installed.build_log and "DeprecationWarning" not in installed.build_log


def test_every_source_module_imports_from_the_virtualenv_alone(installed: Installed) -> None:
    modules = module_names(installed.tree)
    assert len(modules) > 70 and "hopsearch.service.api.app" in modules
    probe = (
        "import importlib, json, sys\n"
        "import hopsearch\n"
        "files = {name: importlib.import_module(name).__file__ for name in sys.argv[1:]}\n"
        "print(json.dumps({'path': sys.path, 'namespace': list(hopsearch.__path__), 'files': files}))\n"
    )
    out = json.loads(installed.run(str(installed.python), "-I", "-c", probe, *modules, env=installed.env()))
    assert not [entry for entry in out["path"] if entry.startswith(str(ROOT))], out["path"]
    site = str(installed.venv)
    assert out["namespace"] and all(entry.startswith(site) for entry in out["namespace"])
    assert sorted(out["files"]) == sorted(modules)
    assert all(str(path).startswith(site) for path in out["files"].values()), out["files"]


@pytest.fixture
def sample_question(installed: Installed) -> dict[str, object]:
    """The first bundled 2Wiki question, read from the installed package's data."""
    probe = (
        "import json; from importlib import resources\n"
        "path = resources.files('hopsearch.loaders').joinpath('data', 'sample_2wiki.jsonl')\n"
        "first = json.loads(path.read_text().splitlines()[0])\n"
        "print(json.dumps({'path': str(path), 'question': first['question'], 'answer': first['answer']}))\n"
    )
    found: dict[str, object] = json.loads(installed.run(str(installed.python), "-I", "-c", probe, env=installed.env()))
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def running(
    installed: Installed, command: list[str], env: dict[str, str]
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """``command`` (the Dockerfile's CMD) in the background; stopped with SIGTERM, as ``docker stop`` does."""
    log = installed.work / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=installed.work, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process, log
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def wait_healthy(installed: Installed, process: subprocess.Popen[bytes], log: Path, env: dict[str, str]) -> int:
    """Run the Dockerfile's HEALTHCHECK until it passes; the number of failed checks before that."""
    check = packaging.runtime().healthcheck
    failures = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the service exited {process.returncode}:\n{log.read_text()}"
        done = subprocess.run(check, cwd=installed.work, env=env, capture_output=True, timeout=30, check=False)
        if done.returncode == 0:
            return failures
        failures += 1
        time.sleep(0.5)
    raise AssertionError(f"the HEALTHCHECK never passed:\n{log.read_text()}")


def test_the_dockerfile_commands_serve_retrieve_and_ask(
    installed: Installed, es8_node: EsNode, sample_question: dict[str, object]
) -> None:
    question, answer = str(sample_question["question"]), str(sample_question["answer"])

    def model(request: ScriptRequest) -> str:  # the answer, then what a model rambles on with
        return f" {answer}\nQuestion: something else"

    port, prefix = free_port(), f"t{uuid.uuid4().hex[:10]}"
    alias = f"{prefix}-passages"
    with ScriptedLLM(model) as llm:
        env = installed.env(
            HOPSEARCH_ES_URL=es8_node.url,
            HOPSEARCH_INDEX_PREFIX=prefix,
            HOPSEARCH_LLM_BASE_URL=llm.base_url,
            HOPSEARCH_LLM_MODEL="scripted",
            HOPSEARCH_API_KEYS=API_KEY,
            HOPSEARCH_API_HOST="127.0.0.1",  # the image listens on 0.0.0.0; here loopback is enough
            HOPSEARCH_API_PORT=str(port),
        )
        try:
            usage = installed.run("hopsearch", "--help", env=env)
            for command in ("serve", "init", "index", "config", "ask", "es"):
                assert f"  {command} " in usage, usage
            shown = json.loads(installed.run("hopsearch", "config", "show", env=env))
            assert shown["es_url"] == [es8_node.url] and shown["api_port"] == port
            assert shown["api_keys"] == ["**********"] and shown["embedder"] == "minilm"
            created = installed.run("hopsearch", "init", env=env)
            assert created.startswith("Elasticsearch 8.19.") and f"passages index {alias}-v1" in created, created
            sample = str(sample_question["path"])
            # the first 20 context paragraphs (the first question's among them), embedded with MiniLM: CPU-light
            loaded = installed.run("hopsearch", "index", "qa", sample, "--limit", "20", "--quiet", "--json", env=env)
            report = json.loads(loaded)
            assert report["indexed"] >= 10 and report["read"] == report["indexed"] + report["skipped"]
            with running(installed, packaging.runtime().cmd, env) as (process, log):
                wait_healthy(installed, process, log, env)
                headers = {"Authorization": f"ApiKey {API_KEY}"}
                with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60) as client:
                    unauthorised = httpx.post(f"http://127.0.0.1:{port}/{alias}/_retrieve", json={"query": "x"})
                    retrieved = client.post(f"/{alias}/_retrieve", json={"query": question, "k": 3, "mode": "hybrid"})
                    asked = client.post(f"/{alias}/_ask", json={"question": question, "strategy": "single"})
            # uvicorn shuts down gracefully on SIGTERM, then re-raises it (exit status -15)
            assert process.returncode in (0, -signal.SIGTERM) and "Application shutdown complete" in log.read_text()
        finally:
            httpx.delete(f"{es8_node.url}/{prefix}-*", params={"allow_no_indices": "true"}, timeout=30)
    assert unauthorised.status_code == 401
    assert retrieved.status_code == 200, retrieved.text
    body = retrieved.json()
    assert body["mode"] == "hybrid" and body["dense_method"] == "knn" and len(body["hits"]["hits"]) == 3
    assert asked.status_code == 200, asked.text
    reply = asked.json()
    assert reply["answer"] == answer and reply["strategy"] == "single" and reply["citations"]
    assert llm.generation_requests >= 1


def test_the_installed_loader_reads_every_format_with_its_installed_library(installed: Installed) -> None:
    """The libraries behind ``index docs`` (imported only when a file of their kind comes) are installed
    with the wheel: an .xlsx and a .pptx written by them are read back by the installed loader."""
    probe = (
        "import io, json, openpyxl, pptx\n"
        "from hopsearch.loaders.extract import EXTRACTORS, extract\n"
        "book = openpyxl.Workbook(); book.active['A1'] = 'sheet value'; xlsx = io.BytesIO(); book.save(xlsx)\n"
        "deck = pptx.Presentation(); slide = deck.slides.add_slide(deck.slide_layouts[5])\n"
        "slide.shapes.title.text = 'slide title'; slide.notes_slide.notes_text_frame.text = 'note text'\n"
        "ppt = io.BytesIO(); deck.save(ppt)\n"
        "files = ((xlsx, '.xlsx'), (ppt, '.pptx'))\n"
        "blocks = [b.text for data, suffix in files for b in extract(suffix, data.getvalue())[1]]\n"
        "print(json.dumps({'suffixes': sorted(EXTRACTORS), 'blocks': blocks}))\n"
    )
    out = json.loads(installed.run(str(installed.python), "-I", "-c", probe, env=installed.env()))
    assert {".docx", ".pdf", ".xlsx", ".pptx"} <= set(out["suffixes"])
    assert out["blocks"] == ["Sheet", "sheet value", "slide title", "note text"]
