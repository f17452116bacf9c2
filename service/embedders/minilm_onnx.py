"""all-MiniLM-L6-v2 through ONNX Runtime: the same weights and math as :mod:`.minilm`, as one ONNX graph
built here from the bundled safetensors (no export tool, no download), run by ONNX Runtime's CPU
kernels (fused layer norms, GELU and matmuls; one thread per core).

Used by :class:`~hopsearch.service.embedders.minilm.MiniLMEmbedder` when ``onnxruntime`` is installed;
vectors match the numpy encoder's (cosine ≥ 0.999, ``benchmarks/bench_embed.py``).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

Array = npt.NDArray[np.float32]
OPSET = 20  # Gelu with approximate="tanh"


def build_graph(weights: dict[str, Array], config: dict[str, Any]) -> bytes:
    """The BERT encoder + masked mean pooling as a serialised ONNX model."""
    from onnx import TensorProto, helper, numpy_helper

    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    head_dim = hidden // heads
    eps = float(config["layer_norm_eps"])
    nodes: list[Any] = []
    inits: list[Any] = []
    counter = [0]

    def const(name: str, value: Array | npt.NDArray[np.int64]) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(kind: str, inputs: list[str], **attrs: Any) -> str:
        counter[0] += 1
        out = f"t{counter[0]}"
        nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def w(name: str) -> str:
        return const(name, weights[name].astype(np.float32))

    def dense(x: str, prefix: str) -> str:
        weight_t = const(prefix + ".weight_t", weights[prefix + ".weight"].T.astype(np.float32).copy())
        return op("Add", [op("MatMul", [x, weight_t]), w(prefix + ".bias")])

    def norm(x: str, prefix: str) -> str:
        return op("LayerNormalization", [x, w(prefix + ".weight"), w(prefix + ".bias")], axis=-1, epsilon=eps)

    x = op(
        "Add",
        [
            op(
                "Add",
                [
                    op("Gather", [w("embeddings.word_embeddings.weight"), "input_ids"]),
                    op("Gather", [w("embeddings.position_embeddings.weight"), "position_ids"]),
                ],
            ),
            op("Gather", [w("embeddings.token_type_embeddings.weight"), "token_type_ids"]),
        ],
    )
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
        scores = op("Add", [op("Mul", [op("MatMul", [q, k]), scale]), bias])
        ctx = op("MatMul", [op("Softmax", [scores], axis=-1), v])
        ctx = op("Reshape", [op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge])
        x = norm(op("Add", [x, dense(ctx, p + "attention.output.dense")]), p + "attention.output.LayerNorm")
        inner = op("Gelu", [dense(x, p + "intermediate.dense")], approximate="tanh")
        x = norm(op("Add", [x, dense(inner, p + "output.dense")]), p + "output.LayerNorm")
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
        "minilm",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, "length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", hidden])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 10
    return bytes(model.SerializeToString())


class OnnxMiniLMEncoder:
    """Encoder with the interface of :class:`~hopsearch.service.embedders.minilm.MiniLMEncoder`."""

    def __init__(self, model_dir: Path, max_length: int = 256, threads: int | None = None) -> None:
        import onnxruntime as ort  # type: ignore[import-untyped]
        from safetensors.numpy import load_file

        config = json.loads((model_dir / "config.json").read_text())
        self.hidden = int(config["hidden_size"])
        weights = {
            k: v for k, v in load_file(str(model_dir / "model.safetensors")).items() if not k.endswith("position_ids")
        }
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads or max(1, len(os.sched_getaffinity(0)))
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(build_graph(weights, config), options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=max_length)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._lock = threading.Lock()

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
        pooled: Array = self.session.run(["pooled"], feeds)[0]
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: Array = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return unit
