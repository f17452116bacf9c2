"""One batch into Elasticsearch: a pre-built NDJSON body first, the streaming helper for 429 retries.

The first attempt of every batch is ONE ``_bulk`` request whose body is built in one pass
(``{"index":{"_id":…}}`` + the orjson source per document; the index is in the URL; a source may have
written these lines itself, see ``SourceBatch.encoded``), and whose answer
is filtered to ``errors`` and each item's ``status`` / ``error``. When nothing failed (the normal case)
the loader's work per document ends there: no per-action objects, no per-item Python loop. The
loader's CPU is taken from the node on a small machine, so this is what keeps the load close to the
node's own limit (``benchmarks/bench_load.py``).

Items refused with 429 (and a whole request refused with 429) go through the client library's
``async_streaming_bulk`` with exponential back-off, unless a block refused them (the flood stage's
read-only block answers 429 too, and no retry lifts it); every other item error about the document is
returned for the dead letters. A request that timed out (a node busy merging on a long load answers a
large batch late) is sent again whole after a back-off, up to ``max_retries`` times: ids are
deterministic, so a document the node had already taken is overwritten, never duplicated. Connection
errors, a timeout left after every retry and other request errors are raised, translated: the pipeline
stops with its checkpoint and ``--resume`` goes on. So are items refused for a reason about the
cluster, not the document (:mod:`hopsearch.loaders.refusals`: a block, a closed index,
``unavailable_shards_exception`` where a shard has no active primary or fewer active copies than
``es_wait_for_active_shards`` asks for within the write ``timeout``, 429s left after every retry): those
documents are fine, the cluster is not, and dead-lettering them would lose them quietly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import orjson

from hopsearch.loaders.model import LoadOptions, SourceBatch
from hopsearch.loaders.refusals import block_advice, cluster_side, error_text, is_block
from hopsearch.service.errors import StoreError, StoreUnavailable
from hopsearch.service.store import Store

log = logging.getLogger(__name__)

#: What the first attempt reads back: a few bytes per item, matched to the request by position.
FIRST_FILTER = "errors,items.*.status,items.*.error"
#: The helper matches retried items by ``_id`` (it yields them in completion order).
RETRY_FILTER = "errors,items.*._id,items.*.status,items.*.error"


#: A document's action line is ``ACTION_HEAD + <its _id as JSON> + ACTION_TAIL`` (the index is in the URL).
ACTION_HEAD = b'{"index":{"_id":'
ACTION_TAIL = b"}}\n"


def ndjson_body(batch: SourceBatch) -> bytes:
    """Return the ``_bulk`` body of a batch: an action line and a source line per document."""
    if batch.encoded:
        return b"".join(batch.encoded)
    # one exact-size object per document: keeping orjson's own outputs alive in a long list until the
    # join (over-allocated, then shrunk) was several times slower
    dumps, head, tail = orjson.dumps, ACTION_HEAD, ACTION_TAIL
    return b"".join(
        [b"".join((head, dumps(i), tail, dumps(b), b"\n")) for i, b in zip(batch.ids, batch.bodies, strict=True)]
    )


def _identity(action: Any) -> Any:
    return action


async def send_batch(
    store: Store, index: str, batch: SourceBatch, options: LoadOptions
) -> tuple[list[bool], list[Mapping[str, Any]]]:
    """Index ``batch``; per document (in order) whether it was acknowledged, and the item errors."""
    body = ndjson_body(batch)
    batch.bodies.clear()  # the body is all that is needed from here on
    batch.encoded.clear()
    count = len(batch.ids)
    try:
        response = await _post(store, index, body, count, options)
    except StoreError as exc:
        if exc.details.get("status") != 429:
            raise
        response = {"errors": True, "items": [{"index": {"status": 429}}] * count}
    if not response.get("errors"):
        return [True] * count, []
    ok = [True] * count
    failures: list[Mapping[str, Any]] = []
    again: list[int] = []
    for i, item in enumerate(response.get("items", [])):
        op, info = next(iter(item.items()))
        status = int(info.get("status", 0))
        if status == 429 and not is_block(info):
            again.append(i)
        elif "error" in info or status >= 300:
            ok[i] = False
            failures.append({op: {**info, "_id": batch.ids[i]}})
    if again:
        failures += await _retry(store, index, batch, body, again, ok, options)
    _raise_cluster_side(failures, count, index)
    return ok, failures


async def _post(store: Store, index: str, body: bytes, count: int, options: LoadOptions) -> dict[str, Any]:
    """Return the first attempt's ``_bulk`` request, sent again after a back-off where it timed out."""
    attempt, backoff = 1, options.initial_backoff
    while True:
        try:
            return await store.post_bulk(index, body, filter_path=FIRST_FILTER)
        except StoreUnavailable as exc:
            if not exc.details.get("timeout"):
                raise
            if attempt > options.max_retries:
                raise StoreUnavailable(
                    f"{exc} after {attempt} attempts of a batch of {count} documents "
                    f"(es_request_timeout {store.writes.request_timeout_s:g} s each)",
                    details=exc.details,
                ) from exc
            log.warning(
                "bulk of %d documents into %s timed out (attempt %d of %d); sending it again in %.1f s",
                count, index, attempt, options.max_retries + 1, backoff,
            )  # fmt: skip
            await asyncio.sleep(backoff)
            attempt, backoff = attempt + 1, min(backoff * 2, 30.0)


def _raise_cluster_side(failures: list[Mapping[str, Any]], count: int, index: str) -> None:
    """Raise where an item was refused for the cluster's sake, not its own (resent after ``--resume``)."""
    refused = [info for item in failures for info in item.values() if cluster_side(info)]
    if not refused:
        return
    reason = error_text(refused[0])
    advice = block_advice(reason, index)
    message = f"bulk: the cluster could not take {len(refused)} of {count} documents ({reason})"
    if advice is not None:
        message = f"bulk: {advice}; nothing was dead-lettered for it ({len(refused)} of {count} refused: {reason})"
    details: dict[str, Any] = {"status": int(refused[0].get("status", 503)), "refused": len(refused)}
    if advice is not None:
        details["advice"] = advice
    raise StoreUnavailable(message, details=details)


async def _retry(
    store: Store, index: str, batch: SourceBatch, body: bytes, again: list[int], ok: list[bool], options: LoadOptions
) -> list[Mapping[str, Any]]:
    """Resend the 429 items through the library's helper (back-off between its attempts)."""
    lines = body.split(b"\n")  # orjson escapes newlines in strings: 2 lines per document
    actions = []
    pending: dict[str, list[int]] = {}
    for i in again:
        ok[i] = False
        actions.append((lines[2 * i], lines[2 * i + 1]))
        pending.setdefault(batch.ids[i], []).append(i)
    await asyncio.sleep(options.initial_backoff)
    failures: list[Mapping[str, Any]] = []
    stream = store.stream_bulk(
        actions,
        chunk_size=len(actions),
        max_chunk_bytes=200 * 1024 * 1024,
        expand_action_callback=_identity,
        raise_on_exception=True,
        max_retries=options.max_retries,
        initial_backoff=options.initial_backoff,
        max_backoff=30,
        index=index,
        filter_path=RETRY_FILTER,
    )
    async for success, info in stream:
        _, item = next(iter(info.items()))
        slots = pending.get(str(item.get("_id")))
        if success and slots:
            ok[slots.pop()] = True
        elif not success:
            failures.append(info)
    return failures
