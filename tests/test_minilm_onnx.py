"""The ONNX Runtime MiniLM encoder gives the numpy encoder's vectors (same weights, same math)."""

from __future__ import annotations

import numpy as np

from hopsearch.service.embedders.minilm import MiniLMEmbedder, MiniLMEncoder, find_model_dir, make_encoder
from hopsearch.service.embedders.minilm_onnx import OnnxMiniLMEncoder

TEXTS = [
    "Mark Robson was a Canadian film director.",
    "The Seventh Victim is a 1943 American horror film noir directed by Mark Robson and starring Tom Conway.",
    "x",
    "Plants convert sunlight, water and carbon dioxide into sugar and oxygen. " * 30,  # truncated at 256 tokens
]


def test_onnx_vectors_match_numpy() -> None:
    model = find_model_dir()
    ours = OnnxMiniLMEncoder(model).encode(TEXTS)
    reference = MiniLMEncoder(model).encode(TEXTS)
    assert ours.shape == reference.shape == (4, 384)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert float((ours * reference).sum(axis=1).min()) >= 0.999
    assert isinstance(make_encoder("auto"), OnnxMiniLMEncoder)
    assert isinstance(make_encoder("numpy"), MiniLMEncoder)
    embedder = MiniLMEmbedder(backend="onnx")
    assert np.allclose(embedder.embed_sync(TEXTS[:2]), ours[:2], atol=1e-5)
