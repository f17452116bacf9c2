"""Attached indices in the store: their field maps kept in ``<prefix>-attached`` (one document per index,
so every service process sees the same), read once per index per process and kept :data:`ATTACHED_TTL_S`.

The attached indices themselves are only ever read (searches, ``_mapping``, a sample of documents at
attach time): nothing here or anywhere else writes to them.
"""

from __future__ import annotations

import time
from typing import Any

from hopsearch.service.access import Scope
from hopsearch.service.attachments import Attachment, mapped_fields
from hopsearch.service.errors import IndexMissing, StoreError
from hopsearch.service.esclient import body_of, call
from hopsearch.service.store.documents import Documents
from hopsearch.service.store.indices import IndexLifecycle, load_template
from hopsearch.service.store.searches import Searches

#: Seconds an attachment (or its absence) is reused before it is read again: an attach or detach reaches
#: every process within it.
ATTACHED_TTL_S = 5.0


class Attachments(IndexLifecycle, Documents, Searches):
    """Attaching, reading and detaching indices users already have."""

    def _attached_cache(self) -> dict[str, tuple[float, Attachment | None]]:
        return self._attached

    async def attachment(self, index: str) -> Attachment | None:
        """The attachment of ``index`` (an index or alias name, as attached), or None where it is not one."""
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
            await call(self.client.delete(index=self.settings.attached_index, id=index, refresh="true"), "detach")
        except IndexMissing:
            return False
        except StoreError as exc:
            if exc.details.get("status") == 404:
                return False
            raise
        finally:
            self._attached_cache().pop(index, None)
        return True

    async def mapping_fields(self, index: str) -> dict[str, dict[str, Any]]:
        """The fields of ``index`` (every index behind an alias: a field must be in each, with one type)."""
        response = body_of(await call(self.client.indices.get_mapping(index=index), f"get mapping {index}"))
        merged: dict[str, dict[str, Any]] = {}
        for concrete, body in sorted(response.items()):
            fields = mapped_fields(body.get("mappings") or {})
            if not merged:
                merged = fields
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

    async def bound(self, scope: Scope) -> Scope:
        """``scope`` over its index as attached (its ACL field and rule, its ``acl_default``); as it is over
        hopsearch's own indices."""
        attachment = await self.attachment(scope.index)
        return scope if attachment is None else attachment.bind(scope)
