"""Documents: single conditional writes and reads, and the bulk paths (the library's streaming helper, and
ready NDJSON ``_bulk`` bodies)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

from hopsearch.service.errors import IndexMissing, VersionConflict
from hopsearch.service.store.base import Connected
from hopsearch.service.store.esclient import body_of, call, translated


class Documents(Connected):
    """Writes and reads of documents by id."""

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
            f"writing document [{doc_id}] into [{index}]",
        )

    async def create_document(self, index: str, doc_id: str, body: Mapping[str, Any], *, refresh: bool = False) -> bool:
        """Write a document that must not exist yet (``op_type=create``); ``False`` where it already did,
        so a retried append never duplicates nor overwrites."""
        try:
            await self.put_document(index, doc_id, body, refresh=refresh, create=True)
        except VersionConflict:
            return False
        return True

    async def delete_document(
        self, index: str, doc_id: str, *, if_seq_no: int, if_primary_term: int, refresh: bool = False, what: str = ""
    ) -> None:
        """Delete one document on the version read (``VersionConflict`` where it changed since, ``IndexMissing``
        where its index is gone); ``what`` names the deletion in an error (default: the document)."""
        params: dict[str, Any] = {"if_seq_no": if_seq_no, "if_primary_term": if_primary_term}
        if refresh:
            params["refresh"] = "true"
        await call(
            self.client.delete(index=index, id=doc_id, **params), what or f"deleting document [{doc_id}] of [{index}]"
        )

    async def get_versioned(self, index: str, doc_id: str) -> tuple[dict[str, Any], int, int] | None:
        """Return a document's ``_source`` with its ``_seq_no`` and ``_primary_term`` (for a conditional write),
        or ``None``. A real-time get: it sees the latest write without a refresh."""
        try:
            response = body_of(await call(self.client.get(index=index, id=doc_id), f"reading [{doc_id}] of [{index}]"))
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
                await call(
                    self.client.mget(index=index, body={"ids": list(ids)}, _source=list(fields)),
                    f"reading {len(ids)} documents of [{index}]",
                )
            )
        except IndexMissing:
            return {}
        return {d["_id"]: d.get("_source") or {} for d in response.get("docs", []) if d.get("found")}

    async def get_document(self, index: str, doc_id: str) -> dict[str, Any] | None:
        try:
            response = body_of(await call(self.client.get(index=index, id=doc_id), f"reading [{doc_id}] of [{index}]"))
        except IndexMissing:
            return None
        source = response.get("_source") if response.get("found") else None
        return dict(source) if isinstance(source, dict) else None

    async def post_bulk(self, index: str, body: bytes, *, filter_path: str) -> dict[str, Any]:
        """One ``_bulk`` request of a ready NDJSON ``body`` into ``index`` (a refusal keeps its HTTP status
        in the raised error's ``details``)."""
        params = self.write_params()
        if self.info.major >= 8:
            request = self.client.bulk(operations=body, index=index, filter_path=filter_path, **params)
        else:
            request = self.client.bulk(body=body, index=index, filter_path=filter_path, **params)
        return body_of(await call(request, f"writing a batch of documents into [{index}]"))

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
        with translated("writing a batch of documents"):
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
    """Return a pair of NDJSON byte lines as text (the 7.x helper joins lines as ``str``); anything else as is."""
    if isinstance(action, tuple) and all(isinstance(line, bytes) for line in action):
        return tuple(line.decode() for line in action)
    return action
