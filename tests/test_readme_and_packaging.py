"""The README's configuration reference matches the settings object; the package installs cleanly."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
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


def test_wheel_has_every_source_and_data_file_and_only_the_hopsearch_namespace(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = list(tmp_path.glob("hopsearch-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"hopsearch", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    for needed in ("passages", "outlines", "traces"):
        assert f"hopsearch/es_mappings/{needed}.json" in names
    assert "hopsearch/loaders/data/sample_2wiki.jsonl" in names
    shipped = [
        path.relative_to(ROOT).as_posix()
        for folder in ("service", "loaders", "cli", "es_mappings")
        for path in sorted((ROOT / folder).rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    ]
    assert len(shipped) > 80
    missing = [path for path in shipped if f"hopsearch/{path}" not in names]
    assert not missing, f"source files missing from the wheel: {missing}"


def test_console_script_runs() -> None:
    out = subprocess.run(
        [str(Path(sys.executable).parent / "hopsearch"), "--help"], check=True, capture_output=True, text=True
    )
    for command in ("es", "demo", "eval", "config"):
        assert command in out.stdout
