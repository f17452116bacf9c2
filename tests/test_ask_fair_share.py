"""One key cannot hold every ask slot: a key without ``concurrent_asks`` gets half the service's
``api_max_concurrent_asks`` (rounded up), the rest stays for other keys. Over real HTTP (uvicorn) on 8.19;
the key's questions in flight are held through the app's own admission (as a slow LLM would hold them)."""

from __future__ import annotations

import httpx

from hopsearch.service.access import Caller
from hopsearch.service.api import create_app
from tests.api_fixtures import serving, uvicorn_serving_async
from tests.conftest import EsNode
from tests.test_keys_api import auth, make_key


async def test_a_key_without_its_own_limit_gets_a_fair_share_of_ask_slots(es8_node: EsNode) -> None:
    async with serving(es8_node.url, acl_default="public", api_max_concurrent_asks=4) as api:
        greedy = await make_key(api, "greedy", principals=["public"])
        polite = await make_key(api, "polite", principals=["public"])
        app = create_app(api.settings)
        state = app.state.api
        ask = {"question": "Who directed Lethal Weapon?", "strategy": "single"}
        async with uvicorn_serving_async(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
            caller = Caller.of(["public"], key="greedy", subject="greedy")  # as its key makes it
            held = [state.admit_question(caller) for _ in range(2)]  # its share of 4 (2) in flight
            refused = await http.post(f"/{api.alias}/_ask", json=ask, headers=auth(greedy))
            served = await http.post(f"/{api.alias}/_ask", json=ask, headers=auth(polite))
            for slot in held:
                slot.release()
            again = await http.post(f"/{api.alias}/_ask", json=ask, headers=auth(greedy))
    assert refused.status_code == 429 and "fair share" in refused.text, refused.text
    assert served.status_code == 200, served.text
    assert again.status_code == 200, again.text
