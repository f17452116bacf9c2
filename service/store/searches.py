"""Searches: one search, a count, and many searches in ONE ``_msearch`` round trip (through the 8.x client's
transport as ready NDJSON, or the 7.x client's API)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from hopsearch.service.errors import IndexMissing, StoreError
from hopsearch.service.store.base import Connected
from hopsearch.service.store.esclient import body_of, call, error_reason, failed


class Searches(Connected):
    """Reads of many documents at once."""

    async def count(self, index: str | None = None, query: Mapping[str, Any] | None = None) -> int:
        body = {"query": dict(query)} if query else None
        name = index or self.settings.passages_alias
        response = body_of(await call(self.client.count(index=name, body=body), f"counting the documents of [{name}]"))
        return int(response["count"])

    async def search(self, index: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return body_of(await call(self.client.search(index=index, body=dict(body)), f"searching [{index}]"))

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
        what = "searching " + ", ".join(f"[{name}]" for name in dict.fromkeys(index for index, _ in searches))
        if self._poster is not None:
            response = await self._poster.post("/_msearch", lines, what)
        else:  # the 7.x client
            response = body_of(await call(self.client.msearch(body=lines), what))
        out: list[dict[str, Any]] = []
        for (index, _), item in zip(searches, response.get("responses", []), strict=False):
            if "error" in item and not keep_errors:
                reason = error_reason(item["error"])
                cls = IndexMissing if item.get("status") == 404 else StoreError
                raise cls(failed(f"searching [{index}]", reason), details={"status": item.get("status")})
            out.append(dict(item))
        return out
