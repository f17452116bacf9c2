"""The Elasticsearch store: one connection (:mod:`.base`) with its concerns in their own modules — index
lifecycle (:mod:`.indices`), documents and bulk writes (:mod:`.documents`), searches (:mod:`.searches`),
attached indices (:mod:`.attachments`), passages by file (:mod:`.passages`)."""

from __future__ import annotations

import logging

from hopsearch.service.config.settings import Settings
from hopsearch.service.store.attachments import Attachments
from hopsearch.service.store.esclient import error_reason, make_client, probe
from hopsearch.service.store.indices import SCHEMA_VERSION, embedding_mapping, load_template
from hopsearch.service.store.passages import FileState, Passages

log = logging.getLogger(__name__)

__all__ = ["SCHEMA_VERSION", "FileState", "Store", "embedding_mapping", "error_reason", "load_template"]


class Store(Attachments, Passages):
    """A connected store. Build it with :meth:`connect`; close it with :meth:`close`."""

    @classmethod
    async def connect(cls, settings: Settings) -> Store:
        info = await probe(settings)
        log.info("Elasticsearch %s, vector mode %s", info.number, info.dense_method)
        return cls(settings, make_client(settings, info), info)

    async def close(self) -> None:
        await self.client.close()
        # The 7.x client closes only the live connections of its pool: close those marked dead too.
        pool = getattr(getattr(self.client, "transport", None), "connection_pool", None)
        live = list(getattr(pool, "connections", ()))
        for connection in getattr(pool, "orig_connections", ()):
            if connection not in live:
                await connection.close()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
