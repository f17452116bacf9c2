"""Where a load writes and the index settings it runs under.

The target is the concrete index behind the passages alias, a new passages version for ``--rebuild``
(the alias moves to it atomically once it is full), or the index a checkpoint names on ``--resume``.
While a load runs the index has ``refresh_interval: -1`` and no replicas (unless
``es_wait_for_active_shards`` asks every write to reach ``n`` copies: then ``n - 1`` replicas stay, as a
write could never be acknowledged otherwise); the previous values (the ``passages_replicas`` setting
where it is set) are restored afterwards, also when the load fails (if Elasticsearch cannot be reached
then, the values stay in the checkpoint and the resumed load restores them). After the restore of a load
that finished, the load waits for the replicas to be placed (green; yellow where there are fewer data
nodes than copies, as on a single node) and warns where that does not happen in a minute; a load that
failed does not wait (its index may lack a primary until a node comes back: the resumed load waits).
"""

from __future__ import annotations

import logging
from typing import Any

from hopsearch.loaders.checkpoint import Checkpoint
from hopsearch.service.embedders.factory import LocalEmbedders, embedder_for_id
from hopsearch.service.errors import ConfigError, StoreError
from hopsearch.service.store import Store
from hopsearch.service.types import Embedder

log = logging.getLogger(__name__)

LOAD_SETTINGS = {"refresh_interval": "-1", "number_of_replicas": 0}


def load_settings(wait_for_active_shards: str | None) -> dict[str, Any]:
    """Return the index settings during a load: :data:`LOAD_SETTINGS`, with the replicas a numeric
    ``wait_for_active_shards`` needs (``2`` keeps one replica; ``all`` means the copies there are)."""
    copies = int(wait_for_active_shards) if wait_for_active_shards and wait_for_active_shards.isdigit() else 1
    return {**LOAD_SETTINGS, "number_of_replicas": max(0, copies - 1)}


async def open_target(
    store: Store, embedder: Embedder | None, *, rebuild: bool, previous: Checkpoint | None, named: str | None = None
) -> tuple[str, bool]:
    """``(index, swap_alias_when_done)``; refuses vectors of another embedder than the index's. ``named``:
    an index or alias of the caller's choosing instead of the default alias (created if missing). An
    attached index is refused: hopsearch never writes to one (nor to its mapping)."""
    for name in (previous.index if previous is not None else None, named):
        if name is not None and await store.attachment(name) is not None:
            raise ConfigError(
                f"[{name}] is an attached index: hopsearch reads it and never writes to it; load into "
                "another index (--index), or into hopsearch's passages alias",
                details={"index": name},
            )
    if previous is not None:
        if not await store.exists(previous.index):
            raise ConfigError(
                f"the checkpoint names index [{previous.index}], which no longer exists; "
                "run the load again without --resume"
            )
        if embedder is not None:
            await store.check_embedder(embedder.model_id, embedder.dims, index=previous.index)
        await store.ensure_embedder_field(previous.index)
        return previous.index, previous.swap_alias
    if named is not None:
        if rebuild:
            raise ConfigError("--rebuild swaps the default passages alias; it cannot be combined with --index")
        if not await store.exists(named):
            await store.create_passages_index(named, embedder)
        elif embedder is not None:
            await store.check_embedder(embedder.model_id, embedder.dims, index=named)
        await store.ensure_embedder_field(named)
        return named, False
    if rebuild:
        return await store.create_passages_version(embedder), True
    index = await store.ensure_indices(embedder)
    await store.ensure_embedder_field(index)
    return index, False


async def embedder_of_index(
    store: Store,
    embedder: Embedder | None,
    *,
    rebuild: bool,
    index: str | None = None,
    embedders: LocalEmbedders | None = None,
) -> Embedder | None:
    """Return the embedder a load into ``index`` (default: the passages alias) embeds with: ``embedder``, or,
    where the index already holds vectors of another embedder this version knows (an older id, the
    other precision), that one, so an index never mixes them and a change of the configured embedder
    strands no index; ``--rebuild`` moves the index to ``embedder``."""
    if embedder is None or rebuild:
        return embedder
    name = index or store.names.passages_alias
    if not await store.exists(name):
        return embedder
    stored = (await store.index_meta(name)).get("embedder")
    if not isinstance(stored, str) or stored == embedder.model_id:
        return embedder
    found = embedder_for_id(stored, embedders or LocalEmbedders(), configured=embedder)
    if found is None:
        return embedder  # open_target refuses it with the index's and the embedder's ids
    log.warning(
        "index [%s] holds vectors of %s: this load embeds with it too (rebuild with --rebuild to move the index to %s)",
        name,
        stored,
        embedder.model_id,
    )
    return found


class LoadSettings:
    """``async with LoadSettings(store, index, restore):`` the load settings while the body runs, the
    settings to restore (``restore``: the checkpoint's, else read by :meth:`remember`) afterwards.

    A restore that Elasticsearch refuses (unreachable, or a block: under ``read_only_allow_delete`` the
    settings are read-only too, on 7.x) is not raised: ``unrestored`` says why, for the load's error to
    say so; the values stay in the checkpoint and the resumed load restores them."""

    def __init__(self, store: Store, index: str, restore: dict[str, Any] | None) -> None:
        self.store = store
        self.index = index
        self.restore = restore
        self.unrestored: str | None = None

    async def remember(self) -> dict[str, Any]:
        """Return the settings to restore after the load (recorded in the checkpoint before anything changes)."""
        if self.restore is None:
            current = await self.store.get_settings(self.index)
            refresh = current.get("refresh_interval")
            if refresh == "-1":
                # Left over from a load that could not restore it: reset to the server default.
                log.warning("index %s had refresh_interval -1 before the load; it will be reset", self.index)
                refresh = None
            replicas = self.store.writes.passages_replicas
            self.restore = {
                "refresh_interval": refresh,
                "number_of_replicas": current.get("number_of_replicas", "1") if replicas is None else replicas,
            }
        return self.restore

    async def __aenter__(self) -> LoadSettings:
        resumed = self.restore is not None
        await self.remember()
        try:
            await self.store.put_settings(self.index, load_settings(self.store.writes.wait_for_active_shards))
        except StoreError as exc:
            if resumed:  # what the interrupted load left stays until a load gets through
                self.unrestored = str(exc)
            raise
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *_: object) -> None:
        try:
            await self.store.put_settings(self.index, await self.remember())
        except StoreError as exc:
            self.unrestored = str(exc)
            log.warning("could not restore the settings of %s (%s); the next load of it restores them", self.index, exc)
        else:
            if kind is None:
                await _wait_placed(self.store, self.index)


async def _wait_placed(store: Store, index: str) -> None:
    """Wait for the restored replicas to be placed; a miss is a warning."""
    try:
        health = await store.wait_for_health(index)
    except StoreError as exc:
        health = {"timed_out": True, "error": str(exc)}
    if health.get("timed_out"):
        log.warning("index %s did not reach %s after the load: %s", index, health.get("wanted"), health)
