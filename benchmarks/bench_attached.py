"""What reading an index through a field map costs: the same documents searched in hopsearch's own
passages index and in an attached one in the Elastic connectors' layout (made by plain elasticsearch-py
bulk), by a caller that is not an admin (so both carry an access filter).

    .venv/bin/python benchmarks/bench_attached.py [--es URL] [--docs 2000] [--queries 200] [--rounds 3]

Both indices hold DOCS documents of ~120 words readable by ``group:everyone`` (``acl`` in hopsearch's,
``_allow_access_control: ["group:everyone"]`` in the connectors' index). For ROUNDS interleaved rounds the
same QUERIES BM25 searches (k=10) run one after another through the search use case (what ``_retrieve``
calls) over each index. Prints the median milliseconds per search of each and the ratio attached / own:
the attached one pays for its field map (read once, kept 5 s), the connectors' identities (a ``bool`` of
case-insensitive ``term`` s instead of one ``terms``) and the excerpts (Elasticsearch's highlighter).
Needs a running Elasticsearch (8.19 dev node by default); removes its indices afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
import uuid
from typing import Any

from hopsearch.service.access import Caller
from hopsearch.service.app import usecases
from hopsearch.service.app.runtime import Runtime
from hopsearch.service.attached.fieldmap import Attachment, field_map
from hopsearch.service.config.settings import Settings
from hopsearch.service.requests import Query

WORDS = [
    "policy",
    "travel",
    "salary",
    "handbook",
    "minutes",
    "board",
    "budget",
    "hiring",
    "review",
    "quarter",
    "report",
    "office",
    "security",
    "laptop",
    "benefit",
    "pension",
    "leave",
    "holiday",
    "contract",
    "vendor",
    "invoice",
    "audit",
    "training",
    "onboarding",
    "customer",
    "support",
    "release",
]
CALLER = Caller.of(["user:bench@corp.com", "group:everyone"], subject="bench", key="bench")


def documents(count: int, rng: random.Random) -> list[tuple[str, str, str]]:
    return [(f"d{n}", f"Record {n} {rng.choice(WORDS)}", " ".join(rng.choices(WORDS, k=120))) for n in range(count)]


async def load(runtime: Runtime, own: str, attached: str, docs: list[tuple[str, str, str]]) -> None:
    store = runtime.store
    target = await store.ensure_indices(None)
    mine = [
        {"_index": target, "_id": i, "_source": {"title": t, "text": x, "doc_id": i, "acl": ["group:everyone"]}}
        for i, t, x in docs
    ]
    ok, errors = await store.bulk(mine)
    assert (ok, errors) == (len(docs), []), errors
    mappings = {
        "properties": {
            "id": {"type": "keyword"},
            "title": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
            "body": {"type": "text"},
            "url": {"type": "keyword"},
            "_allow_access_control": {"type": "keyword"},
        }
    }
    from elasticsearch import Elasticsearch, helpers  # a plain client: the connectors' index is not ours

    plain = Elasticsearch(runtime.settings.es_url[0])
    plain.indices.create(index=attached, body={"settings": {"number_of_shards": 1}, "mappings": mappings})
    theirs = [
        {
            "_index": attached,
            "_id": i,
            "_source": {
                "id": i,
                "title": t,
                "body": x,
                "url": f"https://x/{i}",
                "_allow_access_control": ["group:everyone"],
            },
        }
        for i, t, x in docs
    ]
    helpers.bulk(plain, theirs, refresh=True)
    plain.close()
    await store.refresh(own)
    await store.attach(Attachment(attached, field_map("elastic-connector"), identities="elastic-connector"))


async def timed(runtime: Runtime, index: str, texts: list[str]) -> float:
    """Median milliseconds of one search of ``texts`` over ``index``, one after another."""
    times = []
    for text in texts:
        request = usecases.search_request(runtime, [Query(text, k=10)], caller=CALLER, index=index)
        started = time.perf_counter()
        [result] = await usecases.search(runtime, request)
        times.append((time.perf_counter() - started) * 1000)
        assert result.hits, (index, text)
    return statistics.median(times)


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(7)
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    settings = Settings(es_url=[args.es], index_prefix=prefix, embedder="none")  # type: ignore[call-arg]
    attached = f"{prefix}x-connector"
    texts = [" ".join(rng.sample(WORDS, 3)) for _ in range(args.queries)]
    async with await Runtime.open(settings) as runtime:
        try:
            await load(runtime, settings.passages_alias, attached, documents(args.docs, rng))
            own_ms: list[float] = []
            attached_ms: list[float] = []
            await timed(runtime, settings.passages_alias, texts[:20])  # warm both
            await timed(runtime, attached, texts[:20])
            for _ in range(args.rounds):
                own_ms.append(await timed(runtime, settings.passages_alias, texts))
                attached_ms.append(await timed(runtime, attached, texts))
        finally:
            client: Any = runtime.store.client
            await client.indices.delete(index=f"{prefix}-*,{attached}", allow_no_indices=True, ignore_unavailable=True)
    own, theirs = statistics.median(own_ms), statistics.median(attached_ms)
    print(
        f"{args.docs} documents, {args.queries} BM25 searches (k=10) per round, {args.rounds} rounds, non-admin caller"
    )
    print(f"hopsearch's own passages : {own:.2f} ms per search (median of round medians)")
    print(f"attached (connectors)    : {theirs:.2f} ms per search")
    print(f"ratio attached / own     : {theirs / own:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--es", default="http://127.0.0.1:9218")
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
