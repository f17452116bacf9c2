"""Build the configured embedder from the settings."""

from __future__ import annotations

from hopsearch.service.errors import ConfigError
from hopsearch.service.settings import Settings
from hopsearch.service.types import Embedder


def make_embedder(settings: Settings) -> Embedder | None:
    """The embedder named by ``settings.embedder``; ``None`` for a BM25-only setup."""
    if settings.embedder == "none":
        return None
    if settings.embedder == "minilm":
        from hopsearch.service.embedders.minilm import MiniLMEmbedder

        return MiniLMEmbedder(batch_size=settings.embed_batch_size)
    if settings.embedder == "e5":
        from hopsearch.service.embedders.e5 import E5Embedder

        return E5Embedder(batch_size=settings.embed_batch_size)
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
    )
