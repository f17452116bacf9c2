"""The settings a load uses beyond its store's (:class:`LoadConfig`), built by the command line from
:class:`~hopsearch.service.config.settings.Settings` and carried in :class:`~hopsearch.loaders.model.LoadOptions`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hopsearch.loaders.ziplimits import ZipLimits
from hopsearch.service.config.settings import Settings, default_cache_dir, default_state_dir
from hopsearch.service.embedders.factory import LocalEmbedders


@dataclass(frozen=True, slots=True)
class LoadConfig:
    """What a load reads of the settings. The defaults are Settings', but for the vector cache: a load given
    no config uses none (``vector_cache_mb`` 0), so that a library call never writes a cache it was not given."""

    #: where default checkpoints and dead letters go (``state_dir``)
    state_dir: Path = field(default_factory=default_state_dir)
    #: the vector cache (``<cache_dir>/vectors.sqlite3``, ``vector_cache_mb``; 0: none)
    cache_dir: Path = field(default_factory=default_cache_dir)
    vector_cache_mb: int = 0
    #: the limits of zip-based documents (``zip_max_*``)
    zip_limits: ZipLimits = field(default_factory=ZipLimits)
    #: how the embedder of an index built with another one is made
    embedders: LocalEmbedders = field(default_factory=LocalEmbedders)
    #: the characters of text one file may yield (``docs_max_text_mb``); a file over it is a dead letter
    max_text: int = 256 * 2**20

    @classmethod
    def of(cls, settings: Settings) -> LoadConfig:
        return cls(
            state_dir=settings.state_dir,
            cache_dir=settings.cache_dir,
            vector_cache_mb=settings.vector_cache_mb,
            zip_limits=ZipLimits.from_settings(settings),
            embedders=LocalEmbedders.of(settings),
            max_text=int(settings.docs_max_text_mb * 2**20),
        )
