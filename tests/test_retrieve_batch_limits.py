"""A ``/retrieve`` batch counts one request per query against its key's ``per_minute`` (a batch of 1,024
queries once counted as one request), over real HTTP (uvicorn) on 8.19."""

from __future__ import annotations

import httpx

from hopsearch.service.api import create_app
from tests.api_fixtures import serving, uvicorn_serving_async
from tests.conftest import EsNode
from tests.test_keys_api import auth, make_key


async def test_a_retrieve_batch_counts_each_query(es8_node: EsNode) -> None:
    async with serving(es8_node.url, acl_default="public") as api:
        limited = await make_key(api, "batcher", principals=["public"], per_minute=10)
        app = create_app(api.settings)
        async with uvicorn_serving_async(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
            head = auth(limited)
            first = await http.post("/retrieve", json={"queries": ["Lethal Weapon"] * 8, "topk": 3}, headers=head)
            second = await http.post("/retrieve", json={"queries": ["Jaws"] * 3, "topk": 3}, headers=head)
            fits = await http.post("/retrieve", json={"queries": ["Jaws"], "topk": 3}, headers=head)
            over = await http.post(f"/{api.alias}/_retrieve", json={"query": "Jaws"}, headers=head)
            other = await make_key(api, "big-batch", principals=["public"], per_minute=10)
            too_big = await http.post("/retrieve", json={"queries": ["Jaws"] * 11, "topk": 3}, headers=auth(other))
            alone = await http.post(f"/{api.alias}/_retrieve", json={"query": "Jaws"}, headers=auth(other))
    assert first.status_code == 200 and len(first.json()["result"]) == 8, first.text
    # 8, then 3 more would pass 10: refused (its request counted by the gate, not its queries); one more
    # fits (10); then the minute's 10 are spent
    assert second.status_code == 429 and "Retry-After" in second.headers, second.text
    assert fits.status_code == 200, fits.text
    assert over.status_code == 429, over.text
    assert too_big.status_code == 429 and "send fewer at a time" in too_big.text, too_big.text
    assert alone.status_code == 200, alone.text  # the refused batch counted nothing (its one request aside)
