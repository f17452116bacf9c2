"""``--rebuild`` keeps everything the load does not rewrite, and the advice that sends users to it.

A rebuild fills a new passages version and moves the alias to it. The new version once held only what
that load read, and the old version was deleted: rebuilding for a folder (as the embedder error advised)
dropped every other source's passages. Now, once the source is loaded, the passages of the old version
that the load does not own (:meth:`Source.own_passages`: another folder, another kind) are copied into
the new one, client-side — paged with ``search_after``, embedded with the load's embedder where it has
one (the old version may have none, or another model's: the vector cache first, then the old version's
own vectors of that model where it gives them back, :func:`~.reuse.fill_vectors`, then the embedder: 8.x
keeps them out of ``_source``), and bulk-indexed through the same ``_bulk``
path as the load — and only then does the alias move. A copy that fails stops the load before the
alias moves (the old version still answers); ``--resume`` copies again (same ids: no duplicates).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hopsearch.loaders.bulk import send_batch
from hopsearch.loaders.model import LoadOptions, SourceBatch
from hopsearch.loaders.refusals import error_text
from hopsearch.loaders.reuse import VectorCounts, fill_vectors
from hopsearch.loaders.vector_cache import VectorCache
from hopsearch.service.errors import EmbedderMismatch, StoreError
from hopsearch.service.store import Store
from hopsearch.service.text.japanese import annotate
from hopsearch.service.text.names import names_of
from hopsearch.service.types import Embedder

log = logging.getLogger(__name__)

#: a passage's unique key for paging (``_id`` cannot be sorted on in 8.x): docs chunks share a doc_id
SORT = [{"source": "asc"}, {"doc_id": "asc"}, {"chunk": {"order": "asc", "missing": "_first"}}]


async def copy_rest(
    store: Store,
    old: str,
    new: str,
    own: dict[str, Any],
    embedder: Embedder | None,
    options: LoadOptions,
    ja_analysis: str | None,
) -> int:
    """Copy the passages of ``old`` that ``own`` does not match into ``new``; returns how many."""
    cache = VectorCache.for_settings(options.config) if embedder is not None else None
    try:
        size = max(100, min(options.batch_size, 5000))
        query = {"bool": {"must_not": [own]}}
        after: list[Any] | None = None
        copied = 0
        counts = VectorCounts()
        log.info("rebuild: copying the passages of [%s] this load does not rewrite into [%s]", old, new)
        while True:
            body: dict[str, Any] = {"size": size, "query": query, "sort": SORT}
            if after is not None:
                body["search_after"] = after
            hits = (await store.search(old, body))["hits"]["hits"]
            if not hits:
                log.info("rebuild: %d passages copied, vectors %s", copied, counts.to_dict())
                return copied
            batch = SourceBatch(after=0)
            for hit in hits:
                passage = dict(hit["_source"])
                passage.pop("embedding", None)  # another model's, or none: this version's embedder decides
                passage.pop("embedder", None)
                annotate(passage, ja_analysis)  # token fields are never in _source: made again for this index
                if "names" not in passage:  # a passage of an index made before names gets them in the new one
                    text = f"{passage.get('title') or ''}\n{passage.get('text') or ''}"
                    passage["names"] = names_of(text, passage.get("lang"))
                batch.add(0, str(hit["_id"]), passage, {"_id": hit["_id"]})
            if embedder is not None:  # every passage is the old version's as it is: its vector may be reused
                batch.stored = list(range(len(batch.bodies)))
                await fill_vectors(store, old, batch, embedder, cache, counts)
            _, failures = await send_batch(store, new, batch, options)
            if failures:
                _, item = next(iter(failures[0].items()))
                raise StoreError(
                    f"--rebuild: {len(failures)} passages of [{old}] could not be copied into [{new}] "
                    f"({error_text(item)}); the alias still names [{old}]",
                    details={"status": item.get("status")},
                )
            copied += len(hits)
            after = hits[-1]["sort"]

    finally:
        if cache is not None:
            cache.close()


def rebuild_advice(exc: EmbedderMismatch, kind: str, path: Path, named: str | None) -> EmbedderMismatch:
    """Return the embedder refusal of a load, with the command that gets the vectors and keeps every passage."""
    fact = str(exc).split("; rebuild it")[0]  # the store's own, shorter advice gives way to this one
    if named is not None:
        advice = (
            f"load into a new index instead (hopsearch index {kind} {path} --index NEW_INDEX), "
            "or without vectors (--no-embed)"
        )
    else:
        advice = (
            f"rebuild it: `hopsearch index {kind} {path} --rebuild` fills a new version with these vectors, "
            "copies every other passage of the index into it (embedded too), then moves the alias to it and "
            "deletes the old version (--keep-old keeps it); or load without vectors (--no-embed)"
        )
    return EmbedderMismatch(f"{fact}; {advice}", details=exc.details)
