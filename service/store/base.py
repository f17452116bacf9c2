"""The connection every part of the store shares: settings, the client of the server's major version, what
the server is (:class:`~hopsearch.service.store.esclient.ServerInfo`), what was learnt of the cluster once
(licence, the refusal of the rrf retriever), and the cluster-wide reads (health, root, licence)."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import IndexMissing, StoreError
from hopsearch.service.store.esclient import NdjsonPoster, ServerInfo, body_of, call


@dataclass(frozen=True, slots=True)
class IndexNames:
    """The indices of a store's prefix: what the components over it read and write by default."""

    prefix: str
    passages_alias: str
    outlines: str
    traces: str
    keys: str
    groups: str

    @classmethod
    def of(cls, settings: Settings) -> IndexNames:
        return cls(
            settings.index_prefix,
            settings.passages_alias,
            settings.outlines_index,
            settings.traces_index,
            settings.keys_index,
            settings.groups_index,
        )


@dataclass(frozen=True, slots=True)
class WritePolicy:
    """How the store writes (its settings ``es_request_timeout``, ``es_wait_for_active_shards`` and
    ``passages_replicas``): what a load holds its index to and names in its messages."""

    request_timeout_s: float
    wait_for_active_shards: str | None
    passages_replicas: int | None

    @classmethod
    def of(cls, settings: Settings) -> WritePolicy:
        return cls(settings.es_request_timeout, settings.es_wait_for_active_shards, settings.passages_replicas)


class Connected:
    """A connected store's shared state (see :class:`hopsearch.service.store.Store`)."""

    def __init__(self, settings: Settings, client: Any, info: ServerInfo) -> None:
        self.settings = settings
        self.client = client
        #: the store's index names (its prefix's), for the components over it
        self.names = IndexNames.of(settings)
        #: how it writes, for the loads over it
        self.writes = WritePolicy.of(settings)
        self.info = info
        self._meta_cache: dict[str, dict[str, Any]] = {}
        #: attached index → (when read, its attachment or None): :mod:`.attachments`
        self._attached: dict[str, Any] = {}
        #: (attached index, attached_at) → (until when, its hop's title key), for records made before hops
        self._title_keys: dict[tuple[str, str], Any] = {}
        self._licence: dict[str, Any] | None = None
        #: Why the cluster refused Elasticsearch's rrf retriever, once it has (a capability learnt once per
        #: cluster: later hybrid queries asking for it run client-side RRF without asking again).
        self.rrf_refusal = ""
        self._side_indices_ready = False
        #: ``_msearch`` through the transport (8.x client); None: through the client's API (7.x)
        self._poster = NdjsonPoster(client, settings) if info.major >= 8 and client is not None else None

    @property
    def _helpers(self) -> ModuleType:
        """The bulk helpers of the client library in use (``async_streaming_bulk`` and friends)."""
        if self.info.major >= 8:
            from elasticsearch import helpers

            return helpers
        from elasticsearch7 import helpers as helpers7

        return helpers7

    async def cluster_health(self) -> dict[str, Any]:
        """``GET _cluster/health`` (status, nodes, shards)."""
        return body_of(await call(self.client.cluster.health(), "reading the cluster's health"))

    async def cluster_root(self) -> dict[str, Any]:
        """Return the cluster's ``GET /`` body (name, cluster name and uuid, version, tagline); rebuilt from the
        node info where the node has no root handler (the 8.x and 9.x integ-test zips lack ``rest-root``)."""
        try:
            root = body_of(await call(self.client.info(), "reading the cluster's root (GET /)"))
        except StoreError:
            fields = "nodes.*.name,nodes.*.version,nodes.*.build_flavor,nodes.*.build_type,nodes.*.build_hash"
            nodes = body_of(
                await call(
                    self.client.nodes.info(node_id="_local", filter_path=fields), "reading the node's information"
                )
            )
            node: dict[str, Any] = next(iter(nodes.get("nodes", {}).values()), {})
            health = await self.cluster_health()
            state = body_of(
                await call(
                    self.client.cluster.state(metric="metadata", filter_path="metadata.cluster_uuid"),
                    "reading the cluster's uuid",
                )
            )
            build = {key: node[key] for key in ("build_flavor", "build_type", "build_hash") if key in node}
            root = {
                "name": node.get("name", ""),
                "cluster_name": health.get("cluster_name", ""),
                "cluster_uuid": state.get("metadata", {}).get("cluster_uuid", ""),
                "version": {"number": node.get("version", self.info.number), "build_flavor": "default", **build},
            }
        keys = ("name", "cluster_name", "cluster_uuid", "version")
        return {**{key: root[key] for key in keys if key in root}, "tagline": "You Know, for Search"}

    async def licence(self) -> dict[str, Any]:
        """``GET /_license`` (read once; ``{}`` where the server has no licensing)."""
        if self._licence is None:
            try:
                self._licence = body_of(await call(self.client.license.get(), "reading the cluster's licence"))
            except StoreError:
                self._licence = {}
        return self._licence

    async def refresh(self, index: str | None = None) -> None:
        name = index or self.settings.passages_alias
        await call(self.client.indices.refresh(index=name), f"refreshing [{name}]")

    async def resolve_index(self, expression: str) -> dict[str, Any]:
        """``GET _resolve/index/<expression>`` over every index (hidden and closed ones too): the indices,
        aliases and data streams it names, each with what it stands for; empty lists where nothing of that
        name exists (8.x and 9.x answer 404 for a missing concrete name, 7.17 an empty answer). A name
        Elasticsearch refuses as invalid names nothing either (no index can have it)."""
        try:
            answer = await call(
                self.client.indices.resolve_index(name=expression, expand_wildcards="all"), f"resolving [{expression}]"
            )
        except IndexMissing:
            return {"indices": [], "aliases": [], "data_streams": []}
        except StoreError as exc:
            if exc.details.get("status") == 400 and "invalid_index_name_exception" in str(exc):
                return {"indices": [], "aliases": [], "data_streams": []}
            raise
        return body_of(answer)
