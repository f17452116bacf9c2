"""Local MiniLM embedding speed: the numpy encoder (before) vs ONNX Runtime (after), same vectors.

    .venv/bin/python benchmarks/bench_embed.py [--passages 1000] [--rounds 2]

Passages: the context paragraphs of the shared 2Wiki sample (the bundled slice where it is absent),
repeated up to ``--passages``. Both encoders embed them as the embedder does (sorted by length, batches of
64), rounds interleaved (numpy, onnx, numpy, onnx) so load on a shared machine hits both alike. Prints
passages/s of each, the ratio (target >= 3x) and the cosine of every ONNX vector to its numpy twin
(target >= 0.999).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hopsearch.service.embedders.minilm import Encoder, MiniLMEncoder, find_model_dir  # noqa: E402
from hopsearch.service.embedders.minilm_onnx import OnnxMiniLMEncoder  # noqa: E402

SHARED = ROOT.parent / "shared" / "data" / "2wiki_dev100.jsonl"
BUNDLED = ROOT / "loaders" / "data" / "sample_2wiki.jsonl"


def passages(limit: int) -> list[str]:
    source = SHARED if SHARED.is_file() else BUNDLED
    seen: dict[str, None] = {}
    for line in source.read_text(encoding="utf-8").splitlines():
        for title, sentences in json.loads(line)["context"]:
            seen.setdefault(f"{title}\n{' '.join(sentences)}", None)
    distinct = list(seen)
    return (distinct * (limit // len(distinct) + 1))[:limit]


def embed_all(encoder: Encoder, texts: list[str], batch: int = 64) -> np.ndarray:
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.zeros((len(texts), 384), dtype=np.float32)
    for start in range(0, len(order), batch):
        chunk = order[start : start + batch]
        out[chunk] = encoder.encode([texts[i] for i in chunk])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    texts = passages(args.passages)
    model = find_model_dir()
    before, after = MiniLMEncoder(model), OnnxMiniLMEncoder(model)
    embed_all(before, texts[:64])
    embed_all(after, texts[:64])
    seconds = {"numpy": 0.0, "onnx": 0.0}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(args.rounds):
        for name, encoder in (("numpy", before), ("onnx", after)):
            started = time.perf_counter()
            vectors[name] = embed_all(encoder, texts)
            seconds[name] += time.perf_counter() - started
    rate = {name: args.rounds * len(texts) / spent for name, spent in seconds.items()}
    cosines = (vectors["numpy"] * vectors["onnx"]).sum(axis=1)
    cores = len(os.sched_getaffinity(0))
    print(f"all-MiniLM-L6-v2 on {cores} cores, {len(texts)} passages x {args.rounds} rounds (interleaved)")
    print(f"  before (numpy):        {rate['numpy']:8.1f} passages/s")
    print(f"  after (ONNX Runtime):  {rate['onnx']:8.1f} passages/s")
    print(f"  speed-up: {rate['onnx'] / rate['numpy']:.2f}x (target >= 3x)")
    print(f"  cosine to the numpy vectors: min {cosines.min():.6f}, mean {cosines.mean():.6f} (target >= 0.999)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
