"""The MiniLM embedder (ONNX Runtime) gives the numpy oracle's vectors (same weights, same math), in fp32;
int8 stays close and carries its own embedder id."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hopsearch.service.embedders import minilm
from hopsearch.service.embedders.minilm import MiniLMEmbedder, MiniLMEncoder, find_model_dir
from tests.minilm_oracle import NumpyMiniLMEncoder

TEXTS = [
    "Mark Robson was a Canadian film director.",
    "The Seventh Victim is a 1943 American horror film noir directed by Mark Robson and starring Tom Conway.",
    "x",
    "Plants convert sunlight, water and carbon dioxide into sugar and oxygen. " * 30,  # truncated at 256 tokens
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


def test_onnx_vectors_match_numpy(cache: Path) -> None:
    model = find_model_dir()
    ours = MiniLMEncoder(model, cache_dir=cache).encode(TEXTS)
    reference = NumpyMiniLMEncoder(model).encode(TEXTS)
    assert ours.shape == reference.shape == (4, 384)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert float((ours * reference).sum(axis=1).min()) >= 0.999
    embedder = MiniLMEmbedder(cache_dir=cache)
    assert np.allclose(embedder.embed_sync(TEXTS[:2]), ours[:2], atol=1e-5)
    assert [p.name.endswith("-fp32.onnx") for p in (cache / "onnx").iterdir()] == [True]  # built once, cached


def test_int8_is_close_under_its_own_id(cache: Path) -> None:
    fp32 = MiniLMEncoder(cache_dir=cache).encode(TEXTS)
    int8 = MiniLMEncoder(precision="int8", cache_dir=cache).encode(TEXTS)
    cosines = (fp32 * int8).sum(axis=1)
    assert float(cosines.mean()) >= 0.99 and float(cosines.min()) >= 0.98  # recall: README, "Embedders"
    assert MiniLMEmbedder(precision="int8").model_id == minilm.model_id("int8") != MiniLMEmbedder().model_id
    assert MiniLMEmbedder().model_id == "sentence-transformers/all-MiniLM-L6-v2"  # the id existing indices hold
