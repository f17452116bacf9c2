"""Index lifecycle: the indices from ``es_mappings/``, the passages alias over its versions, ``_meta`` and the
embedder guard, index settings, listing and deletion under the prefix.

Index layout (DESIGN §3): ``<prefix>-passages`` is an alias over ``<prefix>-passages-v<N>``; a rebuild
fills a new version and :meth:`IndexLifecycle.swap_alias` moves the alias atomically. The passages index
``_meta.hopsearch`` records the schema version, embedder id, dimensions, analyzer, Japanese analysis
(``ja_analysis``: kuromoji or SudachiPy tokens) and vector mode; :meth:`IndexLifecycle.check_embedder`
refuses vectors from any other embedder.

Schema versions (``_meta.hopsearch.schema_version``; one policy for every change of the passages template):
an index made under an older version keeps answering as it is, every answer that reads it, ``indices
list`` and ``doctor`` say so and name the command that moves it (:func:`schema_note`), and ``hopsearch
indices upgrade`` moves it (:meth:`IndexLifecycle.upgrade_in_place` where the change only adds fields, as
2 does). Versions: 1, the first; 2, ``acl`` (the principals that may read a passage; an index without it
reads every passage as ``acl_default``); 3, the vector index chosen by ``HOPSEARCH_VECTOR_INDEX``
(``_meta.hopsearch.vector_index``, :mod:`.vector_index`) and vectors kept out of ``_source`` on 8.x
(``_source.excludes``; 9.x leaves them out by default and gives them back on request; 7.17 keeps them, its
dense scores read them). Neither can be changed in an existing index: an index of schema 2 answers as it
is (vectors in ``_source``) and a rebuild (``hopsearch index … --rebuild``) makes a new version of schema 3;
``indices upgrade`` moves an index in place to schema 2 at most (:data:`IN_PLACE_VERSION`); 4, ``title.key``, the
title lower-cased (the built-in ``lowercase`` normalizer), where the second hop looks names up without regard
to case (an older index hops by ``title.keyword``, names as written; a rebuild moves it). Within 4, ``names``
(a keyword field of the names a chunk holds, :mod:`hopsearch.service.text.names`) is in every new index and
``_meta.hopsearch.names`` records its recipe; an index without it hops as it did (no names lookup) until a
load adds the field in place (:meth:`IndexLifecycle.add_names_field`), fills it and says so
(:meth:`IndexLifecycle.mark_names`).
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from hopsearch.service.errors import EmbedderMismatch, IndexMissing, StoreError
from hopsearch.service.store.base import Connected
from hopsearch.service.store.esclient import body_of, call
from hopsearch.service.store.vector_index import choose_vector_index
from hopsearch.service.text.japanese import TOKENS, JaAnalysis, ja_analysis_for, ja_mappings
from hopsearch.service.text.names import NAMES_VERSION
from hopsearch.service.types import DenseMethod, Embedder

log = logging.getLogger(__name__)

SCHEMA_VERSION = 4
#: The schema that added ``title.key`` (the title lower-cased: the second hop's case-blind lookups).
TITLE_KEY_VERSION = 4
#: The newest schema an older index reaches in place (``indices upgrade``); later ones need a rebuild.
IN_PLACE_VERSION = 2
#: What each schema version added, for the messages that say how to move an older index.
SCHEMA_CHANGES = {
    2: "document permissions (acl)",
    3: "a chosen vector index and vectors kept out of _source",
    4: "a lower-cased title key for the second hop (title.key)",
}
#: Fields a version added that an older index gets in place (``put_mapping``: nothing is copied).
ADDED_FIELDS: dict[str, Any] = {"embedder": {"type": "keyword"}, "acl": {"type": "keyword"}}


def schema_version(meta: Mapping[str, Any]) -> int:
    """Return the passages schema an index was made (or last upgraded) under; 0 where ``_meta`` names none (not
    a hopsearch passages index)."""
    value = meta.get("schema_version")
    return int(value) if isinstance(value, int) else 0


def schema_note(index: str, meta: Mapping[str, Any], acl_default: str = "private") -> str:
    """Return what to say of an index made under an older passages schema (empty where it is current or not ours):
    what it lacks, how it reads meanwhile, and the command that moves it keeping everything."""
    version = schema_version(meta)
    if not 0 < version < SCHEMA_VERSION:
        return ""
    missing = ", ".join(SCHEMA_CHANGES[v] for v in range(version + 1, SCHEMA_VERSION + 1) if v in SCHEMA_CHANGES)
    head = f"index [{index}] has passages schema {version} < {SCHEMA_VERSION} (made before {missing}): "
    rebuild = (
        f"a rebuild (`hopsearch index … --rebuild`) makes a new version of schema {SCHEMA_VERSION} (its vector "
        "index as HOPSEARCH_VECTOR_INDEX says, vectors out of _source where the version allows)"
    )
    if version >= IN_PLACE_VERSION:
        return head + f"it answers as it is, its vectors kept in _source; {rebuild}"
    readers = "admins only" if acl_default == "private" else "every caller"
    return head + (
        f"its passages read as acl_default={acl_default} ({readers}); `hopsearch indices upgrade {index}` moves it "
        f"to schema {IN_PLACE_VERSION} in place, keeping every passage and vector; {rebuild}"
    )


def load_template(name: str) -> dict[str, Any]:
    """Return a JSON template from the ``es_mappings`` package data."""
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


def embedding_mapping(method: DenseMethod, dims: int, vector_index: str | None = None) -> dict[str, Any]:
    """Return the ``embedding`` field for the server: indexed for kNN (``vector_index``: its ``index_options.type``,
    :func:`~.vector_index.choose_vector_index`), exact script_score, or ``_source`` only."""
    if method == "knn":
        field: dict[str, Any] = {"type": "dense_vector", "dims": dims, "index": True, "similarity": "cosine"}
        if vector_index is not None:
            field["index_options"] = {"type": vector_index}
        return field
    if method == "script_score":
        return {"type": "dense_vector", "dims": dims}
    return {"type": "float", "index": False, "doc_values": False}


class IndexLifecycle(Connected):
    """Creating, finding, describing and deleting indices."""

    @property
    def analyzer(self) -> str:
        if self.settings.analyzer:
            return self.settings.analyzer
        return "english" if self.info.analysis_common else "standard"

    @property
    def ja_analysis(self) -> JaAnalysis:
        """How Japanese text is analysed in new passages indices (see :mod:`hopsearch.service.text.japanese`)."""
        return ja_analysis_for(self.info.modules)

    async def exists(self, name: str) -> bool:
        return bool(await call(self.client.indices.exists(index=name), f"checking whether [{name}] exists"))

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
            body = load_template(template)
            if not await self.exists(name):
                await self._create(name, body)
            else:
                await self._upgrade_side(name, body)
        self._side_indices_ready = True

    async def _upgrade_side(self, name: str, template: Mapping[str, Any]) -> None:
        """Give an outlines or traces index made under an older template the fields added since (in place;
        schema 2 of traces: ``user``, whom a trace belongs to). Fields only ever are added to these
        templates, so the template's properties are put as they are; an index older than the template's
        ``in_place_from`` is left as it is (its readers say how to rebuild it)."""
        wanted = int(template["mappings"]["_meta"]["schema_version"])
        response = body_of(await call(self.client.indices.get_mapping(index=name), f"reading the mapping of [{name}]"))
        for concrete, body in response.items():
            meta = body.get("mappings", {}).get("_meta", {})
            have = int(meta.get("schema_version", 0) or 0)
            if have >= wanted:
                continue
            if have < int(template["mappings"]["_meta"].get("in_place_from", 0)):
                continue  # not movable in place (outlines 1 → 2 nest the facts): it answers as it is
            mapping = {
                "properties": template["mappings"]["properties"],
                "_meta": {**meta, **template["mappings"]["_meta"], "upgraded_from": meta.get("schema_version")},
            }
            await call(
                self.client.indices.put_mapping(index=concrete, body=mapping), f"updating the mapping of [{concrete}]"
            )

    async def ensure_embedder_field(self, index: str) -> None:
        """Add the ``embedder`` keyword (which model made a document's vector) and ``acl`` to a passages
        index made before they existed (:meth:`upgrade_in_place`); a no-op where they are there. ``embedder``
        is written with every vector, it is what an incremental load and a dense search ask to find
        documents without one (``exists`` cannot see a ``_source``-only vector); a load writes ``acl``.
        The mapping is asked first: a block (the flood stage's read-only one) refuses even a put mapping
        that changes nothing, and a load then should fail where the block is named."""
        meta = await self.index_meta(index)
        if schema_version(meta) and schema_version(meta) < IN_PLACE_VERSION:
            await self.upgrade_in_place(index)
            return
        mappings = body_of(
            await call(self.client.indices.get_mapping(index=index), f"reading the mapping of [{index}]")
        )
        if mappings and all("embedder" in m.get("mappings", {}).get("properties", {}) for m in mappings.values()):
            return
        body = {"properties": {"embedder": {"type": "keyword"}}}
        await call(self.client.indices.put_mapping(index=index, body=body), f"updating the mapping of [{index}]")

    async def add_names_field(self, index: str) -> None:
        """Add the ``names`` keyword (:mod:`hopsearch.service.text.names`) to a passages index made before it,
        in place (a new field: ``put_mapping``); ``_meta`` says nothing of it until :meth:`mark_names`."""
        body = {"properties": {"names": {"type": "keyword", "ignore_above": 256}}}
        await call(self.client.indices.put_mapping(index=index, body=body), f"updating the mapping of [{index}]")

    async def mark_names(self, index: str) -> None:
        """Record in ``_meta.hopsearch`` that the chunks of ``index`` hold ``names`` (a load that filled them
        in place is done): its second hop looks them up from now on."""
        meta = {**await self.index_meta(index), "names": NAMES_VERSION}
        body = {"_meta": {"hopsearch": meta}}
        await call(self.client.indices.put_mapping(index=index, body=body), f"updating the _meta of [{index}]")
        self._meta_cache.clear()

    async def upgrade_in_place(self, name: str) -> list[tuple[str, int]]:
        """Move the passages indices ``name`` names (an index, or every index behind an alias) to
        :data:`IN_PLACE_VERSION` where the versions between only add fields: the fields are added
        (``put_mapping``) and ``_meta.hopsearch`` records the version (and ``upgraded_from``). Nothing is
        copied: every passage, vector and token field stays. Returns ``(index, version before)`` of each;
        an index that is current is left alone, one that is not hopsearch's is refused."""
        response = body_of(await call(self.client.indices.get_mapping(index=name), f"reading the mapping of [{name}]"))
        done: list[tuple[str, int]] = []
        for concrete, body in sorted(response.items()):
            meta = dict(body.get("mappings", {}).get("_meta", {}).get("hopsearch", {}))
            before = schema_version(meta)
            if before == 0:
                raise StoreError(f"index [{concrete}] is not a hopsearch passages index (no _meta.hopsearch)")
            if before < IN_PLACE_VERSION:
                meta |= {"schema_version": IN_PLACE_VERSION, "upgraded_from": before}
                meta["upgraded_at"] = datetime.now(UTC).isoformat()
                others = {k: v for k, v in body.get("mappings", {}).get("_meta", {}).items() if k != "hopsearch"}
                mapping = {"properties": ADDED_FIELDS, "_meta": {**others, "hopsearch": meta}}
                await call(
                    self.client.indices.put_mapping(index=concrete, body=mapping),
                    f"updating the mapping of [{concrete}]",
                )
            done.append((concrete, before))
        self._meta_cache.clear()
        return done

    async def require_passages(self, name: str) -> None:
        """Refuse to answer from a passages index or alias that does not exist (asking never creates one)."""
        if not await self.exists(name):
            raise IndexMissing(
                f"no such passages index or alias [{name}]: load passages first (hopsearch index …), "
                "or name an existing one with --index",
                details={"index": name},
            )

    async def create_index(self, name: str, body: Mapping[str, Any]) -> None:
        """Create the index ``name`` (a refusal, an existing index included, raises)."""
        await call(self.client.indices.create(index=name, body=dict(body)), f"creating index [{name}]")

    async def _create(self, name: str, body: Mapping[str, Any]) -> None:
        try:
            await self.create_index(name, body)
        except StoreError as exc:
            if "resource_already_exists_exception" not in str(exc):
                raise

    def passages_body(self, embedder: Embedder | None, *, replicas: int | None = None) -> dict[str, Any]:
        """Return the passages index body for this server and embedder (``_meta`` included): ``passages_shards``
        primaries, ``replicas`` (default: the ``passages_replicas`` setting, else 0) replicas."""
        template = load_template("passages")
        method = self.info.dense_method
        kind = None
        if embedder is not None:
            asked, oversample = self.settings.vector_index, self.settings.knn_oversample
            kind = choose_vector_index(asked, self.info, embedder.dims, oversample)
        values: dict[str, Any] = {
            "ANALYZER": self.analyzer,
            "EMBEDDING": embedding_mapping(method, embedder.dims, kind) if embedder else None,
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
        excludes: list[str] = []
        if self.ja_analysis != "kuromoji":
            properties.update(fields)
            excludes += list(fields)  # searched, never read back
        if kind is not None and self.info.major == 8:  # 9.x leaves vectors out already; 7.17 reads them there
            excludes.append("embedding")
        if excludes:
            body["mappings"]["_source"] = {"excludes": excludes}
        body["mappings"]["_meta"] = {
            "hopsearch": {
                "schema_version": SCHEMA_VERSION,
                "embedder": embedder.model_id if embedder else None,
                "dims": embedder.dims if embedder else None,
                "analyzer": self.analyzer,
                "ja_analysis": self.ja_analysis,
                "ja_tokens": TOKENS,
                "names": NAMES_VERSION,
                "vector_mode": self.info.dense_method if embedder else None,
                "vector_index": kind,
                "created_at": datetime.now(UTC).isoformat(),
            }
        }
        return body

    async def passages_versions(self) -> list[str]:
        pattern = f"{self.settings.passages_alias}-v*"
        response = body_of(
            await call(
                self.client.indices.get(index=pattern, allow_no_indices=True, expand_wildcards="open"),
                f"listing [{pattern}]",
            )
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
        """Return the concrete index behind the passages alias, or ``None``."""
        alias = self.settings.passages_alias
        if not await call(self.client.indices.exists_alias(name=alias), f"checking the alias [{alias}]"):
            return None
        response = body_of(await call(self.client.indices.get_alias(name=alias), f"reading the alias [{alias}]"))
        names = sorted(response)
        return names[-1] if names else None

    async def swap_alias(self, new_index: str, *, delete_old: bool = False) -> list[str]:
        """Point the passages alias at ``new_index`` in one atomic ``_aliases`` call. Where the old version
        is deleted, the other aliases on it (an operator's ``corp-all``) move to ``new_index`` in the same
        call, with their filter and routing, and a warning names them: deleting an index would delete them."""
        alias = self.settings.passages_alias
        old: list[str] = []
        if await call(self.client.indices.exists_alias(name=alias), f"checking the alias [{alias}]"):
            old = sorted(body_of(await call(self.client.indices.get_alias(name=alias), f"reading the alias [{alias}]")))
        gone = [name for name in old if name != new_index]
        actions: list[dict[str, Any]] = [{"remove": {"index": name, "alias": alias}} for name in gone]
        actions.append({"add": {"index": new_index, "alias": alias}})
        if delete_old and gone:
            actions += await self._kept_aliases(gone, new_index)
        await call(
            self.client.indices.update_aliases(body={"actions": actions}),
            f"moving the alias [{alias}] to [{new_index}]",
        )
        if delete_old:
            for name in old:
                if name != new_index:
                    await call(self.client.indices.delete(index=name), f"deleting index [{name}]")
        self._meta_cache.clear()
        return [name for name in old if name != new_index]

    async def _kept_aliases(self, gone: Sequence[str], new_index: str) -> list[dict[str, Any]]:
        """Return the ``_aliases`` actions that move every alias of ``gone`` but the passages alias to ``new_index``."""
        response = body_of(
            await call(
                self.client.indices.get_alias(index=",".join(gone)),
                "reading the aliases of " + ", ".join(f"[{g}]" for g in gone),
            )
        )
        actions: list[dict[str, Any]] = []
        for index, body in sorted(response.items()):
            for name, spec in sorted((body.get("aliases") or {}).items()):
                if name == self.settings.passages_alias:
                    continue
                kept = {k: v for k, v in spec.items() if k in ("filter", "routing", "index_routing", "search_routing")}
                actions.append({"remove": {"index": index, "alias": name}})
                actions.append({"add": {"index": new_index, "alias": name, **kept}})
                log.warning("alias [%s] moved from [%s] (deleted) to [%s]", name, index, new_index)
        return actions

    async def index_meta(self, index: str | None = None) -> dict[str, Any]:
        """``_meta.hopsearch`` of the passages index (or of ``index``; an alias resolves)."""
        name = index or self.settings.passages_alias
        if name in self._meta_cache:
            return self._meta_cache[name]
        if not await self.exists(name):
            raise IndexMissing(f"no such index [{name}]; run `hopsearch init` or index something first")
        response = body_of(await call(self.client.indices.get_mapping(index=name), f"reading the mapping of [{name}]"))
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
                f"refusing vectors of {embedder_id!r} ({dims} dims): rebuild it with this embedder "
                "(hopsearch index ... --rebuild), or configure the index's (HOPSEARCH_EMBEDDER, "
                "HOPSEARCH_EMBED_PRECISION)"
            )

    async def put_settings(self, index: str, settings: Mapping[str, Any]) -> None:
        await call(
            self.client.indices.put_settings(index=index, body={"index": dict(settings)}),
            f"changing the settings of [{index}]",
        )

    async def get_aliases(self, name: str) -> dict[str, Any]:
        """Read each index ``name`` names with its aliases (``GET <name>/_alias``; ``IndexMissing`` where none)."""
        return body_of(await call(self.client.indices.get_alias(index=name), f"reading the aliases of [{name}]"))

    async def get_mapping(self, index: str) -> dict[str, Any]:
        """Read the mapping of each index behind ``index`` (``GET <index>/_mapping``)."""
        return body_of(await call(self.client.indices.get_mapping(index=index), f"reading the mapping of [{index}]"))

    async def get_settings(self, index: str) -> dict[str, Any]:
        response = body_of(
            await call(self.client.indices.get_settings(index=index), f"reading the settings of [{index}]")
        )
        return dict(next(iter(response.values()))["settings"]["index"])

    async def prefix_indices(self) -> list[dict[str, Any]]:
        """Every index under ``<prefix>-``: name, aliases, documents, size, ``_meta.hopsearch``, created."""
        pattern = f"{self.settings.index_prefix}-*"
        found = body_of(await call(self.client.indices.get(index=pattern), f"listing [{pattern}]"))
        stats = body_of(
            await call(
                self.client.indices.stats(index=pattern, metric="docs,store"), f"reading the statistics of [{pattern}]"
            )
        )
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
            await call(self.client.indices.delete(index=name), f"deleting index [{name}]")
        self._meta_cache.clear()

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
            return body_of(await call(request, f"waiting for the shards of [{index}]"))
        except StoreError as exc:  # 408: not reached in time
            return {"status": None, "timed_out": True, "wanted": status, "error": str(exc)}
