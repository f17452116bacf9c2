"""Attached indices in the store: their field maps kept in ``<prefix>-attached`` (one document per index,
so every service process sees the same), read once per index per process and kept :data:`ATTACHED_TTL_S`.

The attached indices themselves are only ever read (searches; ``_mapping``, ``_settings`` where a custom
normalizer is named, and a sample of documents at attach time; the mapping once per process for a record
made before hops, :meth:`Attachments.with_title_key`): nothing here or anywhere else writes to them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from hopsearch.service.access import Scope
from hopsearch.service.attached.checks import (
    check_fields,
    custom_normalizers,
    mapped_fields,
    title_key,
    vector_mapping,
    vector_mode,
)
from hopsearch.service.attached.fieldmap import HOPSEARCH_FIELDS, Attachment, FieldMap, TitleKey, field_text
from hopsearch.service.errors import ConfigError, IndexMissing, StoreError
from hopsearch.service.store.documents import Documents
from hopsearch.service.store.esclient import body_of, call
from hopsearch.service.store.indices import IndexLifecycle, load_template
from hopsearch.service.store.searches import Searches
from hopsearch.service.types import Embedder

#: Seconds an attachment (or its absence) is reused before it is read again: an attach or detach reaches
#: every process within it.
ATTACHED_TTL_S = 5.0
#: Documents re-embedded at attach time, and how close (mean cosine) their stored vectors must be.
SAMPLE_SIZE = 8
MIN_COSINE = 0.95


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


class Attachments(IndexLifecycle, Documents, Searches):
    """Attaching, reading and detaching indices users already have."""

    def _attached_cache(self) -> dict[str, tuple[float, Attachment | None]]:
        return self._attached

    async def attachment(self, index: str) -> Attachment | None:
        """Return the attachment of ``index`` (an index or alias name, as attached), or None where it is not one."""
        if index == self.settings.passages_alias or index.startswith(f"{self.settings.index_prefix}-"):
            return None  # hopsearch's own indices are never attached
        cache = self._attached_cache()
        now = time.monotonic()
        kept = cache.get(index)
        if kept is not None and now - kept[0] < ATTACHED_TTL_S:
            return kept[1]
        doc = await self.get_document(self.settings.attached_index, index)
        found = Attachment.from_doc(doc) if doc else None
        if len(cache) > 1024:
            cache.clear()
        cache[index] = (now, found)
        return found

    async def field_map(self, index: str) -> FieldMap:
        """Return the fields ``index`` is read through: an attached index's field map, else hopsearch's own."""
        attachment = await self.attachment(index)
        return HOPSEARCH_FIELDS if attachment is None else attachment.fields

    async def attachments(self) -> list[Attachment]:
        """Every attached index, by name."""
        body = {"size": 1000, "sort": [{"index": "asc"}], "query": {"match_all": {}}}
        try:
            found = await self.search(self.settings.attached_index, body)
        except IndexMissing:
            return []
        return [Attachment.from_doc(hit["_source"]) for hit in found.get("hits", {}).get("hits", [])]

    async def save_attachment(self, attachment: Attachment) -> None:
        """Record ``attachment`` (replacing an earlier one of the same index) in ``<prefix>-attached``."""
        name = self.settings.attached_index
        if not await self.exists(name):
            await self._create(name, load_template("attached"))
        await self.put_document(name, attachment.index, attachment.to_doc(), refresh=True)
        self._attached_cache().pop(attachment.index, None)

    async def delete_attachment(self, index: str) -> bool:
        """Forget the field map of ``index`` (the index itself is left as it is); False where none was kept."""
        try:
            await call(
                self.client.delete(index=self.settings.attached_index, id=index, refresh="true"),
                f"forgetting the field map of [{index}]",
            )
        except IndexMissing:
            return False
        except StoreError as exc:
            if exc.details.get("status") == 404:
                return False
            raise
        finally:
            self._attached_cache().pop(index, None)
        return True

    async def _mappings(self, index: str) -> dict[str, dict[str, dict[str, Any]]]:
        """Return the fields of each index behind ``index``
        (:func:`~hopsearch.service.attached.checks.mapped_fields`)."""
        response = body_of(
            await call(self.client.indices.get_mapping(index=index), f"reading the mapping of [{index}]")
        )
        return {concrete: mapped_fields(body.get("mappings") or {}) for concrete, body in sorted(response.items())}

    async def mapping_fields(
        self, index: str, mappings: dict[str, dict[str, dict[str, Any]]] | None = None
    ) -> dict[str, dict[str, Any]]:
        """Return the fields of ``index`` (every index behind an alias: a field must be in each, with one type)."""
        merged: dict[str, dict[str, Any]] = {}
        for concrete, fields in (mappings if mappings is not None else await self._mappings(index)).items():
            if not merged:
                merged = dict(fields)
                continue
            for name in list(merged):
                if name not in fields:
                    del merged[name]
                elif fields[name]["type"] != merged[name]["type"]:
                    raise StoreError(
                        f"field [{name}] is {merged[name]['type']} in one index behind [{index}] and "
                        f"{fields[name]['type']} in [{concrete}]",
                        details={"index": index, "field": name},
                    )
        return merged

    async def title_key(
        self, index: str, title: str, mappings: dict[str, dict[str, dict[str, Any]]] | None = None
    ) -> TitleKey:
        """Where the second hop looks titles up in ``index`` (:func:`~hopsearch.service.attached.checks.title_key`):
        the same field in every index behind an alias, else none. ``_settings`` is read only where a custom
        normalizer is named."""
        mappings = mappings if mappings is not None else await self._mappings(index)
        custom = set().union(*(custom_normalizers(title, fields) for fields in mappings.values()))
        normalizers: dict[str, Any] = {}
        if custom:
            response = body_of(
                await call(self.client.indices.get_settings(index=index), f"reading the settings of [{index}]")
            )
            for concrete, body in response.items():
                analysis = body.get("settings", {}).get("index", {}).get("analysis", {})
                normalizers[concrete] = analysis.get("normalizer") or {}
        keys = {concrete: title_key(title, fields, normalizers.get(concrete)) for concrete, fields in mappings.items()}
        if len(set(keys.values())) == 1:
            return next(iter(keys.values()))
        found = ", ".join(f"[{concrete}] {key.key.field if key.key else 'none'}" for concrete, key in keys.items())
        return TitleKey(None, f"the indices behind it look titles up in different fields ({found})")

    async def with_title_key(self, attachment: Attachment) -> Attachment:
        """``attachment`` with where its hop looks titles up: as recorded when it was attached, or, for a
        record made before hops, found in the index's mapping once per process (as attaching it again would
        find it; where the mapping cannot be read: none, and why, read again after :data:`ATTACHED_TTL_S`)."""
        if attachment.title_key is not None:
            return attachment
        now = time.monotonic()
        wanted = (attachment.index, attachment.attached_at)
        kept: tuple[float, TitleKey] | None = self._title_keys.get(wanted)
        if kept is None or kept[0] < now:
            try:
                kept = (math.inf, await self.title_key(attachment.index, attachment.fields.title))
            except StoreError as exc:
                why = f"it was attached before hops and its mapping could not be read ({exc})"
                kept = (now + ATTACHED_TTL_S, TitleKey(None, why))
            if len(self._title_keys) > 1024:
                self._title_keys.clear()
            self._title_keys[wanted] = kept
        return replace(attachment, title_key=kept[1])

    async def bound(self, scope: Scope) -> Scope:
        """``scope`` over its index as attached (its ACL field and rule, its ``acl_default``); as it is over
        hopsearch's own indices."""
        attachment = await self.attachment(scope.index)
        return scope if attachment is None else attachment.bind(scope)

    async def attach(self, attachment: Attachment, embedder: Embedder | None = None) -> Attachment:
        """Check ``attachment`` against its index and record it: every mapped field exists with a usable
        type (:func:`~hopsearch.service.attached.fieldmap.check_fields`); a vector field is a ``dense_vector`` of
        ``embedder``'s dimensions, and a sample of documents re-embedded with it lands close to their stored
        vectors (MiniLM and e5 are both 384-d: only the vectors tell them apart); the keyword field of the
        title that the second hop looks names up in is found (:meth:`title_key`). Reads only, then one
        document in ``<prefix>-attached``. Returns the attachment as recorded (embedder, mode, checks, title key)."""
        index = attachment.index
        if index == self.settings.passages_alias or index.startswith(f"{self.settings.index_prefix}-"):
            raise ConfigError(f"[{index}] is hopsearch's own index: it needs no attaching", details={"index": index})
        if any(c in index for c in "*?,") or index.startswith(("-", "_", ".")):
            raise ConfigError(
                f"[{index}]: attach one index or alias by its exact name (no wildcards, lists or hidden names)",
                details={"index": index},
            )
        if not await self.exists(index):
            raise IndexMissing(f"no such index or alias [{index}] to attach", details={"index": index})
        mappings = await self._mappings(index)
        mapped = await self.mapping_fields(index, mappings)
        fields = attachment.fields
        check_fields(index, fields, mapped)
        attachment = replace(attachment, title_key=await self.title_key(index, fields.title, mappings))
        if fields.vector is None:
            if embedder is not None:
                raise ConfigError("--embedder needs --vector-field (the field holding its vectors)")
            attachment = replace(attachment, embedder=None, dims=None, vector_mode=None)
        else:
            if embedder is None:
                raise ConfigError(f"--vector-field {fields.vector} needs --embedder (the model of its vectors)")
            found = vector_mapping(index, fields.vector, mapped)
            dims = found.get("dims")
            if dims is not None and int(dims) != embedder.dims:
                raise ConfigError(
                    f"field [{fields.vector}] of index [{index}] holds {dims}-d vectors; the embedder "
                    f"{embedder.model_id!r} makes {embedder.dims}-d ones",
                    details={"index": index, "field": fields.vector, "dims": dims},
                )
            checks = await self._check_vectors(index, attachment, embedder)
            attachment = replace(
                attachment,
                embedder=embedder.model_id,
                dims=embedder.dims,
                vector_mode=vector_mode(found, self.info.major, self.info.dense_method),
                checks=checks,
            )
        attachment = replace(attachment, attached_at=datetime.now(UTC).isoformat())
        await self.save_attachment(attachment)
        return attachment

    async def _check_vectors(self, index: str, attachment: Attachment, embedder: Embedder) -> dict[str, Any]:
        """Re-embed a sample of documents and compare with their stored vectors (as the text alone, and as
        the title, a newline and the text: hopsearch's own way); a clear error where neither is close."""
        fields = attachment.fields
        assert fields.vector is not None
        source: Any = [fields.title, fields.text, fields.vector]
        if self.info.major >= 9:  # 9.x leaves vectors out of ``_source`` unless asked
            source = {"includes": source, "exclude_vectors": False}
        body = {"size": SAMPLE_SIZE, "query": {"exists": {"field": fields.text}}, "_source": source}
        hits = (await self.search(index, body)).get("hits", {}).get("hits", [])
        sample = [h.get("_source") or {} for h in hits]
        sample = [doc for doc in sample if isinstance(doc.get(fields.vector), list) and doc.get(fields.vector)]
        if not sample:
            raise ConfigError(
                f"no document of index [{index}] has a vector in [{fields.vector}] to check the embedder against",
                details={"index": index, "field": fields.vector},
            )
        stored = [[float(x) for x in doc[fields.vector]] for doc in sample]
        wrong = [len(v) for v in stored if len(v) != embedder.dims]
        if wrong:
            raise ConfigError(
                f"vectors in [{fields.vector}] of index [{index}] have {wrong[0]} numbers; the embedder "
                f"{embedder.model_id!r} makes {embedder.dims}",
                details={"index": index, "field": fields.vector},
            )
        texts = {
            "text": [field_text(doc.get(fields.text)) for doc in sample],
            "title_text": [
                f"{field_text(doc.get(fields.title))}\n{field_text(doc.get(fields.text))}" for doc in sample
            ],
        }
        means: dict[str, float] = {}
        for way, inputs in texts.items():
            vectors = await embedder.embed(inputs)
            means[way] = sum(_cosine(a, b) for a, b in zip(vectors, stored, strict=True)) / len(stored)
        best = max(means, key=lambda way: means[way])
        if means[best] < MIN_COSINE:
            raise ConfigError(
                f"the stored vectors of [{fields.vector}] in index [{index}] are not {embedder.model_id!r}'s: "
                f"{len(stored)} documents re-embedded land at mean cosine {means[best]:.3f} (< {MIN_COSINE})",
                details={"index": index, "field": fields.vector, "cosine": round(means[best], 4)},
            )
        return {"sample": len(stored), "cosine": round(means[best], 4), "embedded_as": best}
