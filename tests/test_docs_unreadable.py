"""An unreadable subdirectory must not delete what was indexed from it (issue 13, item 1).

The suite runs as root, and root lists a ``chmod 000`` directory anyway (CAP_DAC_READ_SEARCH), so the
folder would not be unreadable at all. The loads therefore run as the real CLI in a child process under
an unprivileged uid (``nobody``, through util-linux ``setpriv``, which also drops every capability),
for which ``chmod 000`` does what it does for any user; when the suite itself runs unprivileged the
child simply runs as the same user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hopsearch.cli.index import EXIT_UNREADABLE_DIR
from tests.conftest import unavailable
from tests.test_cli_index import cli_env, count  # noqa: F401 (cli_env is a fixture)

NOBODY = 65534


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder the unprivileged child can read and write (pytest's tmp_path is root-only)."""
    base = Path(tempfile.mkdtemp(prefix="hopsearch-unreadable-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        for folder, dirs, _ in os.walk(base):
            for d in dirs:
                os.chmod(os.path.join(folder, d), 0o755)
        shutil.rmtree(base, ignore_errors=True)


def hopsearch_as_user(args: list[str], env: dict[str, str], home: Path) -> subprocess.CompletedProcess[str]:
    child_env = {**env, "HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    command = [sys.executable, "-c", "from hopsearch.cli.main import main; main()", *args]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            unavailable("util-linux setpriv (to run the load as an unprivileged uid)")
        command = [str(setpriv), f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]
    return subprocess.run(command, env=child_env, capture_output=True, text=True, timeout=120, cwd=home)


def paths_indexed(env: dict[str, str]) -> set[str]:
    url, prefix = env["HOPSEARCH_ES_URL"], env["HOPSEARCH_INDEX_PREFIX"]
    httpx.post(f"{url}/{prefix}-passages/_refresh")
    body = {"size": 100, "_source": ["path"]}
    hits = httpx.post(f"{url}/{prefix}-passages/_search", json=body).json()["hits"]["hits"]
    return {Path(h["_source"]["path"]).name for h in hits}


def test_unreadable_subfolder_keeps_its_chunks_and_fails_the_run(
    cli_env: dict[str, str],  # noqa: F811
    shared_dir: Path,
) -> None:
    docs = shared_dir / "docs"
    (docs / "private").mkdir(parents=True)
    (docs / "a.md").write_text("# A\n\nAlpha handbook text.\n")
    (docs / "private" / "b.md").write_text("# B\n\nBravo salaries, confidential.\n")
    state = shared_dir / "state"
    state.mkdir()
    if os.geteuid() == 0:
        os.chown(state, NOBODY, NOBODY)
    env = {**cli_env, "HOPSEARCH_STATE_DIR": str(state)}

    first = hopsearch_as_user(["index", "docs", str(docs), "--quiet", "--json"], env, shared_dir)
    assert first.returncode == 0, first.stdout + first.stderr
    assert paths_indexed(env) == {"a.md", "b.md"}

    (docs / "private").chmod(0o000)
    second = hopsearch_as_user(["index", "docs", str(docs), "--quiet", "--json"], env, shared_dir)
    assert second.returncode == EXIT_UNREADABLE_DIR, second.stdout + second.stderr
    assert str(docs / "private") in second.stderr and "could not be read" in second.stderr
    report = json.loads(second.stdout)
    assert report["deleted"] == 0 and report["files_removed"] == 0
    assert report["unreadable_dirs"] == [str(docs / "private")]
    assert paths_indexed(env) == {"a.md", "b.md"}  # unknown, not gone
    assert count(env) == 2
