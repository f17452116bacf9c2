"""The floor of any Python ``_retrieve`` service: the least a request can cost, for ``bench_http.py --floor``.

A bare ASGI app under the same uvicorn (uvloop, httptools) as ``hopsearch serve``: it parses the JSON
body, sends the same BM25 search as ONE ``_msearch`` with the same HTTP library (one aiohttp session,
keep-alive) and answers the hits in the same envelope. No framework, no validation, no API keys, no
metrics, no error handling: what is left is the cost of a second loopback HTTP hop in Python, which no
amount of work on hopsearch itself can remove.

    HOPSEARCH_ES_URL=http://127.0.0.1:9200 HOPSEARCH_INDEX_PREFIX=x HOPSEARCH_API_PORT=9281 \\
        .venv/bin/python benchmarks/floor_server.py
"""

from __future__ import annotations

import os
import time
from typing import Any

import aiohttp
import orjson
import uvicorn

ES_URL = os.environ["HOPSEARCH_ES_URL"]
ALIAS = f"{os.environ['HOPSEARCH_INDEX_PREFIX']}-passages"
HEADER = orjson.dumps({"index": ALIAS}) + b"\n"
_session: list[aiohttp.ClientSession] = []


async def _read(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _retrieve(body: bytes) -> bytes:
    started = time.perf_counter()
    request = orjson.loads(body)
    match = {"query": request["query"], "fields": ["title", "text"], "type": "best_fields", "tie_breaker": 0.5}
    search = {
        "size": request.get("k", 10),
        "track_total_hits": False,
        "query": {"bool": {"must": [{"multi_match": match}], "filter": []}},
        "_source": True,
    }
    if not _session:
        _session.append(aiohttp.ClientSession(ES_URL))
    ndjson = HEADER + orjson.dumps(search) + b"\n"
    async with _session[0].post("/_msearch", data=ndjson, headers={"content-type": "application/x-ndjson"}) as reply:
        found = orjson.loads(await reply.read())["responses"][0]["hits"]["hits"]
    hits = [{"_index": ALIAS, "_id": h["_id"], "_score": h["_score"], "_source": h["_source"]} for h in found]
    took = round((time.perf_counter() - started) * 1000)
    total = {"value": len(hits), "relation": "eq"}
    return orjson.dumps({"took": took, "timed_out": False, "hits": {"total": total, "max_score": None, "hits": hits}})


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if _session:
                    await _session[0].close()
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = await _read(receive)
    out = b'{"status":"green"}' if scope["path"].startswith("/_health") else await _retrieve(body)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": out})


if __name__ == "__main__":
    port = int(os.environ["HOPSEARCH_API_PORT"])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, server_header=False)
