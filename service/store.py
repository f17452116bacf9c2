"""The Elasticsearch store: indices from ``es_mappings/``, the passages alias, the embedder guard,
documents, bulk writes and ``_msearch``.

Index layout (DESIGN §3): ``<prefix>-passages`` is an alias over ``<prefix>-passages-v<N>``; a rebuild
fills a new version and :meth:`Store.swap_alias` moves the alias atomically. The passages index
``_meta.hopsearch`` records the schema version, embedder id, dimensions, analyzer, Japanese analysis
(``ja_analysis``: kuromoji or SudachiPy tokens) and vector mode;
:meth:`Store.check_embedder` refuses vectors from any other embedder.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from types import ModuleType
from typing import Any

import orjson

from hopsearch.service.errors import EmbedderMismatch, IndexMissing, StoreError, VersionConflict
from hopsearch.service.esclient import NdjsonPoster, ServerInfo, body_of, call, make_client, probe, translated
from hopsearch.service.japanese import JaAnalysis, ja_analysis_for, ja_mappings
from hopsearch.service.settings import Settings
from hopsearch.service.types import DenseMethod, Embedder

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


def error_reason(err: Any) -> str:
    """``type: reason`` of an Elasticsearch error, with the shard's own cause where the top level
    only says ``all shards failed`` (that cause names the bad value)."""
    if not isinstance(err, dict):
        return str(err)
    reason = f"{err.get('type')}: {err.get('reason')}"
    for shard in err.get("failed_shards") or []:
        cause = (shard.get("reason") or {}) if isinstance(shard, dict) else {}
        cause = cause.get("caused_by") or cause
        if isinstance(cause, dict) and cause.get("reason"):
            return f"{reason} ({cause.get('type')}: {cause.get('reason')})"
    return reason


def load_template(name: str) -> dict[str, Any]:
    """A JSON template from the ``es_mappings`` package data."""
    text = resources.files("hopsearch.es_mappings").joinpath(f"{name}.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def _substitute(node: Any, values: Mapping[str, Any]) -> Any:
    if isinstance(node, str) and node.startswith("$"):
        return values[node[1:]]
    if isinstance(node, dict):
        pairs = ((k, _substitute(v, values)) for k, v in node.items())
        return {k: v for k, v in pairs if v is not None}
    if isinstance(node, list):
        return [_substitute(v, values) for v in node]
    return node


def embedding_mapping(method: DenseMethod, dims: int) -> dict[str, Any]:
    """The ``embedding`` field for the server: indexed HNSW, exact script_score, or ``_source`` only."""
    if method == "knn":
        return {"type": "dense_vector", "dims": dims, "index": True, "similarity": "cosine"}
    if method == "script_score":
        return {"type": "dense_vector", "dims": dims}
    return {"type": "float", "index": False, "doc_values": False}


class Store:
    """A connected store. Build it with :meth:`connect`; close it with :meth:`close`."""

    def __init__(self, settings: Settings, client: Any, info: ServerInfo) -> None:
        self.settings = settings
        self.client = client
        self.info = info
        self._meta_cache: dict[str, dict[str, Any]] = {}
        self._licence: dict[str, Any] | None = None
        self._side_indices_ready = False
        #: ``_msearch`` through the transport (8.x client); None: through the client's API (7.x)
        self._poster = NdjsonPoster(client, settings) if info.major >= 8 and client is not None else None

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

    @property
    def _helpers(self) -> ModuleType:
        """The bulk helpers of the client library in use (``async_streaming_bulk`` and friends)."""
        if self.info.major >= 8:
            from elasticsearch import helpers

            return helpers
        from elasticsearch7 import helpers as helpers7

        return helpers7

    @property
    def analyzer(self) -> str:
        if self.settings.analyzer:
            return self.settings.analyzer
        return "english" if self.info.analysis_common else "standard"

    @property
    def ja_analysis(self) -> JaAnalysis:
        """How Japanese text is analysed in new passages indices (see :mod:`hopsearch.service.japanese`)."""
        return ja_analysis_for(self.info.modules)

    # --- indices ---------------------------------------------------------------------------------
    async def exists(self, name: str) -> bool:
        return bool(await call(self.client.indices.exists(index=name), f"exists {name}"))

    async def ensure_indices(self, embedder: Embedder | None = None) -> str:
        """Create the passages (version 1 + alias), outlines and traces indices where missing.
        Returns the concrete passages index behind the alias."""
        await self.ensure_side_indices()
        current = await self.passages_index()
        if current is None:
            current = await self.create_passages_version(embedder)
            await self.swap_alias(current)
        elif embedder is not None:
            await self.check_embedder(embedder.model_id, embedder.dims, index=current)
        return current

    async def ensure_side_indices(self) -> None:
        """Create the outlines and traces indices where missing (never the passages index); once per
        store: later calls (every DualRAG question's first outline save) cost no round trip."""
        if self._side_indices_ready:
            return
        for name, template in (
            (self.settings.outlines_index, "outlines"),
            (self.settings.traces_index, "traces"),
        ):
            if not await self.exists(name):
                await self._create(name, load_template(template))
        self._side_indices_ready = True

    async def ensure_embedder_field(self, index: str) -> None:
        """Add the ``embedder`` keyword (which model made a document's vector) to a passages index made
        before it existed; a no-op where it is there. Written with every vector, it is what an
        incremental load and a dense search ask to find documents without one (``exists`` cannot see a
        ``_source``-only vector). Asked first: a block (the flood stage's read-only one) refuses even a
        put mapping that changes nothing, and a load then should fail where the block is named."""
        mappings = body_of(await call(self.client.indices.get_mapping(index=index), f"get mapping {index}"))
        if mappings and all("embedder" in m.get("mappings", {}).get("properties", {}) for m in mappings.values()):
            return
        body = {"properties": {"embedder": {"type": "keyword"}}}
        await call(self.client.indices.put_mapping(index=index, body=body), f"put mapping {index}")

    async def require_passages(self, name: str) -> None:
        """Refuse to answer from a passages index or alias that does not exist (asking never creates one)."""
        if not await self.exists(name):
            raise IndexMissing(
                f"no such passages index or alias [{name}]: load passages first (hopsearch index …), "
                "or name an existing one with --index",
                details={"index": name},
            )

    async def _create(self, name: str, body: Mapping[str, Any]) -> None:
        try:
            await call(self.client.indices.create(index=name, body=dict(body)), f"create index {name}")
        except StoreError as exc:
            if "resource_already_exists_exception" not in str(exc):
                raise

    def passages_body(self, embedder: Embedder | None, *, replicas: int | None = None) -> dict[str, Any]:
        """The passages index body for this server and embedder (``_meta`` included): ``passages_shards``
        primaries, ``replicas`` (default: the ``passages_replicas`` setting, else 0) replicas."""
        template = load_template("passages")
        values: dict[str, Any] = {
            "ANALYZER": self.analyzer,
            "EMBEDDING": embedding_mapping(self.info.dense_method, embedder.dims) if embedder else None,
        }
        body: dict[str, Any] = _substitute(copy.deepcopy(template), values)
        if replicas is None:
            replicas = self.settings.passages_replicas or 0
        body["settings"] |= {"number_of_shards": self.settings.passages_shards, "number_of_replicas": replicas}
        fields = ja_mappings(self.ja_analysis)
        properties = body["mappings"]["properties"]
        if self.ja_analysis == "kuromoji":
            for name in ("title", "text"):
                properties[name].setdefault("fields", {}).update(fields)
        else:
            properties.update(fields)
            body["mappings"]["_source"] = {"excludes": list(fields)}  # searched, never read back
        body["mappings"]["_meta"] = {
            "hopsearch": {
                "schema_version": SCHEMA_VERSION,
                "embedder": embedder.model_id if embedder else None,
                "dims": embedder.dims if embedder else None,
                "analyzer": self.analyzer,
                "ja_analysis": self.ja_analysis,
                "vector_mode": self.info.dense_method if embedder else None,
                "created_at": datetime.now(UTC).isoformat(),
            }
        }
        return body

    async def passages_versions(self) -> list[str]:
        pattern = f"{self.settings.passages_alias}-v*"
        response = body_of(
            await call(self.client.indices.get(index=pattern, allow_no_indices=True, expand_wildcards="open"), "list")
        )
        regex = re.compile(re.escape(self.settings.passages_alias) + r"-v(\d+)$")
        found = [(int(m.group(1)), name) for name in response if (m := regex.match(name))]
        return [name for _, name in sorted(found)]

    async def create_passages_index(self, name: str, embedder: Embedder | None) -> str:
        """Create a passages index called ``name`` (outside the alias's versions; ``index … --index``)."""
        await self._create(name, self.passages_body(embedder, replicas=await self.passages_replicas()))
        return name

    async def create_passages_version(self, embedder: Embedder | None) -> str:
        """Create ``<prefix>-passages-v<N+1>`` (not yet behind the alias) and return its name."""
        versions = await self.passages_versions()
        last = int(versions[-1].rsplit("-v", 1)[1]) if versions else 0
        name = f"{self.settings.passages_alias}-v{last + 1}"
        await self._create(name, self.passages_body(embedder, replicas=await self.passages_replicas()))
        return name

    async def passages_index(self) -> str | None:
        """The concrete index behind the passages alias, or ``None``."""
        alias = self.settings.passages_alias
        if not await call(self.client.indices.exists_alias(name=alias), "alias exists"):
            return None
        response = body_of(await call(self.client.indices.get_alias(name=alias), f"get alias {alias}"))
        names = sorted(response)
        return names[-1] if names else None

    async def swap_alias(self, new_index: str, *, delete_old: bool = False) -> list[str]:
        """Point the passages alias at ``new_index`` in one atomic ``_aliases`` call."""
        alias = self.settings.passages_alias
        old: list[str] = []
        if await call(self.client.indices.exists_alias(name=alias), "alias exists"):
            old = sorted(body_of(await call(self.client.indices.get_alias(name=alias), "get alias")))
        actions: list[dict[str, Any]] = [
            {"remove": {"index": name, "alias": alias}} for name in old if name != new_index
        ]
        actions.append({"add": {"index": new_index, "alias": alias}})
        await call(self.client.indices.update_aliases(body={"actions": actions}), f"swap alias {alias}")
        if delete_old:
            for name in old:
                if name != new_index:
                    await call(self.client.indices.delete(index=name), f"delete {name}")
        self._meta_cache.clear()
        return [name for name in old if name != new_index]

    async def index_meta(self, index: str | None = None) -> dict[str, Any]:
        """``_meta.hopsearch`` of the passages index (or of ``index``; an alias resolves)."""
        name = index or self.settings.passages_alias
        if name in self._meta_cache:
            return self._meta_cache[name]
        if not await self.exists(name):
            raise IndexMissing(f"no such index [{name}]; run `hopsearch init` or index something first")
        response = body_of(await call(self.client.indices.get_mapping(index=name), f"get mapping {name}"))
        metas = [m.get("mappings", {}).get("_meta", {}).get("hopsearch", {}) for m in response.values()]
        meta = dict(metas[0]) if metas else {}
        self._meta_cache[name] = meta
        return meta

    async def check_embedder(self, embedder_id: str, dims: int, *, index: str | None = None) -> None:
        """Refuse vectors from another embedder than the one the index ``_meta`` names."""
        meta = await self.index_meta(index)
        name = index or self.settings.passages_alias
        if meta.get("embedder") is None:
            raise EmbedderMismatch(
                f"index [{name}] was created without vectors (BM25 only); rebuild it with the embedder "
                f"{embedder_id!r} (hopsearch index ... --rebuild) to store vectors"
            )
        if meta.get("embedder") != embedder_id or meta.get("dims") != dims:
            raise EmbedderMismatch(
                f"index [{name}] holds vectors of {meta.get('embedder')!r} ({meta.get('dims')} dims); "
                f"refusing vectors of {embedder_id!r} ({dims} dims)"
            )

    async def put_settings(self, index: str, settings: Mapping[str, Any]) -> None:
        await call(self.client.indices.put_settings(index=index, body={"index": dict(settings)}), "put settings")

    async def get_settings(self, index: str) -> dict[str, Any]:
        response = body_of(await call(self.client.indices.get_settings(index=index), "get settings"))
        return dict(next(iter(response.values()))["settings"]["index"])

    async def prefix_indices(self) -> list[dict[str, Any]]:
        """Every index under ``<prefix>-``: name, aliases, documents, size, ``_meta.hopsearch``, created."""
        pattern = f"{self.settings.index_prefix}-*"
        found = body_of(await call(self.client.indices.get(index=pattern), f"get {pattern}"))
        stats = body_of(await call(self.client.indices.stats(index=pattern, metric="docs,store"), "stats"))
        rows = []
        for name, body in sorted(found.items()):
            totals = stats.get("indices", {}).get(name, {}).get("primaries", {})
            created = body.get("settings", {}).get("index", {}).get("creation_date")
            rows.append(
                {
                    "index": name,
                    "aliases": sorted(body.get("aliases", {})),
                    "documents": totals.get("docs", {}).get("count"),
                    "bytes": totals.get("store", {}).get("size_in_bytes"),
                    "created": datetime.fromtimestamp(int(created) / 1000, UTC).isoformat() if created else None,
                    "meta": body.get("mappings", {}).get("_meta", {}).get("hopsearch", {}),
                }
            )
        return rows

    async def delete_indices(self, names: Sequence[str]) -> None:
        """Delete these indices (exact names: no wildcards reach Elasticsearch from here)."""
        for name in names:
            if any(c in name for c in "*?,"):
                raise StoreError(f"refusing to delete [{name}]: exact index names only")
            await call(self.client.indices.delete(index=name), f"delete {name}")
        self._meta_cache.clear()

    # --- documents -------------------------------------------------------------------------------
    def write_params(self) -> dict[str, str]:
        """Query parameters of every write (documents and ``_bulk``): ``wait_for_active_shards`` where the
        ``es_wait_for_active_shards`` setting asks for more than Elasticsearch's default, and a ``timeout``
        for a shard without its copies (a primary on a node that left, copies not yet active) of half the
        client's request timeout, so that Elasticsearch answers ``unavailable_shards_exception`` (a clear
        error) before the client gives up on the request and resends it to the next node for as long."""
        params = {"timeout": f"{max(1, int(self.settings.es_request_timeout / 2))}s"}
        if self.settings.es_wait_for_active_shards:
            params["wait_for_active_shards"] = self.settings.es_wait_for_active_shards
        return params

    async def put_document(
        self,
        index: str,
        doc_id: str,
        body: Mapping[str, Any],
        *,
        refresh: bool = False,
        if_seq_no: int | None = None,
        if_primary_term: int | None = None,
        create: bool = False,
    ) -> None:
        """Index one document. ``if_seq_no``/``if_primary_term`` make it conditional on the version read
        (optimistic concurrency) and ``create`` refuses an existing id; either refusal raises
        :class:`~hopsearch.service.errors.VersionConflict`. Waits for ``es_wait_for_active_shards``."""
        params: dict[str, Any] = {"refresh": "true" if refresh else "false"}
        if if_seq_no is not None and if_primary_term is not None:
            params |= {"if_seq_no": if_seq_no, "if_primary_term": if_primary_term}
        if create:
            params["op_type"] = "create"
        params |= self.write_params()
        await call(
            self.client.index(index=index, id=doc_id, body=dict(body), **params),
            f"index document into {index}",
        )

    async def create_document(self, index: str, doc_id: str, body: Mapping[str, Any], *, refresh: bool = False) -> bool:
        """Write a document that must not exist yet (``op_type=create``); ``False`` where it already did,
        so a retried append never duplicates nor overwrites."""
        try:
            await self.put_document(index, doc_id, body, refresh=refresh, create=True)
        except VersionConflict:
            return False
        return True

    async def get_versioned(self, index: str, doc_id: str) -> tuple[dict[str, Any], int, int] | None:
        """A document's ``_source`` with its ``_seq_no`` and ``_primary_term`` (for a conditional write),
        or ``None``. A real-time get: it sees the latest write without a refresh."""
        try:
            response = body_of(await call(self.client.get(index=index, id=doc_id), f"get {doc_id}"))
        except IndexMissing:
            return None
        source = response.get("_source")
        if not response.get("found") or not isinstance(source, dict):
            return None
        return dict(source), int(response["_seq_no"]), int(response["_primary_term"])

    async def get_sources(self, index: str, ids: Sequence[str], fields: Sequence[str]) -> dict[str, dict[str, Any]]:
        """``fields`` of the documents ``ids`` that exist (one ``_mget``), by id."""
        if not ids:
            return {}
        try:
            response = body_of(
                await call(self.client.mget(index=index, body={"ids": list(ids)}, _source=list(fields)), "mget")
            )
        except IndexMissing:
            return {}
        return {d["_id"]: d.get("_source") or {} for d in response.get("docs", []) if d.get("found")}

    async def get_document(self, index: str, doc_id: str) -> dict[str, Any] | None:
        try:
            response = body_of(await call(self.client.get(index=index, id=doc_id), f"get {doc_id}"))
        except IndexMissing:
            return None
        source = response.get("_source") if response.get("found") else None
        return dict(source) if isinstance(source, dict) else None

    async def refresh(self, index: str | None = None) -> None:
        await call(self.client.indices.refresh(index=index or self.settings.passages_alias), "refresh")

    async def count(self, index: str | None = None, query: Mapping[str, Any] | None = None) -> int:
        body = {"query": dict(query)} if query else None
        response = body_of(
            await call(self.client.count(index=index or self.settings.passages_alias, body=body), "count")
        )
        return int(response["count"])

    async def search(self, index: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return body_of(await call(self.client.search(index=index, body=dict(body)), f"search {index}"))

    async def cluster_health(self) -> dict[str, Any]:
        """``GET _cluster/health`` (status, nodes, shards)."""
        return body_of(await call(self.client.cluster.health(), "cluster health"))

    async def passages_replicas(self) -> int:
        """Replicas of a new passages index: the ``passages_replicas`` setting, else 1 where the cluster has
        more than one data node (a copy survives a node) and 0 on a single node (a replica could never
        be placed there: the index would stay yellow)."""
        if self.settings.passages_replicas is not None:
            return self.settings.passages_replicas
        return 1 if int((await self.cluster_health()).get("number_of_data_nodes", 1)) > 1 else 0

    async def wait_for_health(self, index: str, *, timeout_s: float = 60) -> dict[str, Any]:
        """Wait until every copy of ``index`` that can be placed is (green; yellow where there are
        fewer data nodes than copies, as on a single node). Returns the health, ``timed_out`` included."""
        settings = await self.get_settings(index)
        copies = 1 + int(settings.get("number_of_replicas", 0))
        nodes = int((await self.cluster_health()).get("number_of_data_nodes", 1))
        status = "green" if nodes >= copies else "yellow"
        request = self.client.cluster.health(index=index, wait_for_status=status, timeout=f"{int(timeout_s)}s")
        try:
            return body_of(await call(request, f"health of {index}"))
        except StoreError as exc:  # 408: not reached in time
            return {"status": None, "timed_out": True, "wanted": status, "error": str(exc)}

    async def cluster_root(self) -> dict[str, Any]:
        """The cluster's ``GET /`` body (name, cluster name and uuid, version, tagline); rebuilt from the
        node info where the node has no root handler (the 8.x and 9.x integ-test zips lack ``rest-root``)."""
        try:
            root = body_of(await call(self.client.info(), "info"))
        except StoreError:
            fields = "nodes.*.name,nodes.*.version,nodes.*.build_flavor,nodes.*.build_type,nodes.*.build_hash"
            nodes = body_of(await call(self.client.nodes.info(node_id="_local", filter_path=fields), "nodes info"))
            node: dict[str, Any] = next(iter(nodes.get("nodes", {}).values()), {})
            health = await self.cluster_health()
            state = body_of(
                await call(self.client.cluster.state(metric="metadata", filter_path="metadata.cluster_uuid"), "uuid")
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
                self._licence = body_of(await call(self.client.license.get(), "get licence"))
            except StoreError:
                self._licence = {}
        return self._licence

    async def msearch(
        self, searches: Sequence[tuple[str, Mapping[str, Any]]], *, keep_errors: bool = False
    ) -> list[dict[str, Any]]:
        """Many searches in ONE ``_msearch`` round trip; one response per search, in order.
        A failed search raises with its reason (partial answers are not silently dropped), unless
        ``keep_errors``: then its item (with ``error``) comes back for the caller to handle."""
        if not searches:
            return []
        dumps = orjson.dumps  # one NDJSON body, passed through the client as is
        lines = b"".join([b'{"index":' + dumps(index) + b"}\n" + dumps(body) + b"\n" for index, body in searches])
        if self._poster is not None:
            response = await self._poster.post("/_msearch", lines, "msearch")
        else:  # the 7.x client
            response = body_of(await call(self.client.msearch(body=lines), "msearch"))
        out: list[dict[str, Any]] = []
        for item in response.get("responses", []):
            if "error" in item and not keep_errors:
                reason = error_reason(item["error"])
                cls = IndexMissing if item.get("status") == 404 else StoreError
                raise cls(f"msearch: {reason}", details={"status": item.get("status")})
            out.append(dict(item))
        return out

    async def post_bulk(self, index: str, body: bytes, *, filter_path: str) -> dict[str, Any]:
        """One ``_bulk`` request of a ready NDJSON ``body`` into ``index`` (a refusal keeps its HTTP status
        in the raised error's ``details``)."""
        params = self.write_params()
        if self.info.major >= 8:
            request = self.client.bulk(operations=body, index=index, filter_path=filter_path, **params)
        else:
            request = self.client.bulk(body=body, index=index, filter_path=filter_path, **params)
        return body_of(await call(request, "bulk"))

    async def stream_bulk(
        self,
        actions: Iterable[Any] | AsyncIterable[Any],
        *,
        max_retries: int = 5,
        initial_backoff: float = 1,
        raise_on_exception: bool = False,
        **options: Any,
    ) -> AsyncIterator[tuple[bool, dict[str, Any]]]:
        """``(ok, item)`` per action through the library's ``async_streaming_bulk`` (429s retried with
        back-off; item errors yielded, not raised; :meth:`write_params` apply). An action may be a pair of
        ready NDJSON lines ``(action, source)`` as bytes: the 7.x client is given them as text. ``options``
        go to the helper (``index``, ``filter_path``, ``chunk_size``…)."""
        if self.info.major < 8 and isinstance(actions, Iterable):
            actions = (_as_text(action) for action in actions)
        stream = self._helpers.async_streaming_bulk(
            self.client,
            actions,
            raise_on_error=False,
            raise_on_exception=raise_on_exception,
            max_retries=max_retries,
            initial_backoff=initial_backoff,
            **(self.write_params() | options),
        )
        with translated("bulk"):
            async for success, item in stream:
                yield success, item

    async def bulk(
        self,
        actions: Iterable[Mapping[str, Any]] | AsyncIterable[Mapping[str, Any]],
        *,
        refresh: bool = False,
    ) -> tuple[int, list[dict[str, Any]]]:
        """Index ``actions`` with the library's streaming helper; returns (ok count, per-item errors)."""
        ok = 0
        errors: list[dict[str, Any]] = []
        async for success, item in self.stream_bulk(actions):
            if success:
                ok += 1
            else:
                errors.append(dict(item))
        if refresh:
            await self.refresh()
        return ok, errors


def _as_text(action: Any) -> Any:
    """A pair of NDJSON byte lines as text (the 7.x helper joins lines as ``str``); anything else as is."""
    if isinstance(action, tuple) and all(isinstance(line, bytes) for line in action):
        return tuple(line.decode() for line in action)
    return action
