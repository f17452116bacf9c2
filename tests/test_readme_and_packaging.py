"""The README's configuration reference matches the settings object; the console script runs. (The built
wheel and sdist: tests/test_installed_package.py.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from hopsearch.cli.config import reference_markdown

ROOT = Path(__file__).resolve().parents[1]


def test_readme_config_reference_is_generated_from_settings() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- config-reference:start -->\n(.*?)<!-- config-reference:end -->", readme, re.S)
    assert match, "README lacks the config-reference markers"
    assert match.group(1) == reference_markdown(), "run: hopsearch config reference, and paste it into README"


def test_readme_gives_the_two_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make demo" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_console_script_runs() -> None:
    out = subprocess.run(
        [str(Path(sys.executable).parent / "hopsearch"), "--help"], check=True, capture_output=True, text=True
    )
    for command in ("es", "demo", "eval", "config"):
        assert command in out.stdout
