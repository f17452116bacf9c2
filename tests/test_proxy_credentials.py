"""No hopsearch credential reaches the cluster through the proxy (issue 28), whatever header and spelling
carries it: a :class:`~tests.counting_proxy.CountingProxy` between the service and the node records
every header of every request, and no hopsearch key is in any of them, while the caller's own
Elasticsearch credentials still arrive."""

from __future__ import annotations

import base64

import httpx

from tests.api_fixtures import API_KEY, OTHER_KEY
from tests.conftest import EsNode
from tests.counting_proxy import CountingProxy
from tests.test_api_clients import front
from tests.test_api_proxy_paths import send

BASIC = "Basic " + base64.b64encode(b"caller:caller-password-1").decode()


async def test_hopsearch_keys_never_reach_the_cluster_in_any_spelling(es8_node: EsNode) -> None:
    spellings = [
        {"Authorization": f"ApiKey\t{API_KEY}"},
        {"Authorization": f"APIKEY   {API_KEY}  "},
        {"Authorization": f"ApiKey {API_KEY}, {BASIC}"},
        {"Authorization": f"Bearer {OTHER_KEY}"},
        {"es-secondary-authorization": f"ApiKey {OTHER_KEY}"},
        {"es-secondary-authorization": f"Bearer\t{API_KEY}"},
    ]
    proxy = CountingProxy(es8_node.url)
    try:
        async with front(await proxy.start()) as (url, settings):
            target = f"/{settings.passages_alias}/_search?q=Donner"
            answers, seen = [], []
            for headers in spellings:  # each beside X-Hopsearch-Key (send adds it), which authenticates
                proxy.reset()
                answers.append(await send(url, "GET", target, headers=headers))
                seen.append(list(proxy.headers))
            proxy.reset()
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:  # the key as the only credential
                bearer = await client.get(target, headers={"Authorization": f"Bearer {API_KEY}"})
            bearer_seen = list(proxy.headers)
            proxy.reset()
            caller = await send(url, "GET", target, headers={"Authorization": BASIC})
            caller_seen = list(proxy.headers)
    finally:
        await proxy.stop()
    for headers, (status, _, body), requests in zip(spellings, answers, seen, strict=True):
        assert status == 200 and b"p-donner" in body, (headers, status, body[:200])
        assert [p for _, p, _ in requests] == [f"/{settings.passages_alias}/_search"], headers  # it reached the node
        sent = [(name.lower(), value) for _, _, pairs in requests for name, value in pairs]
        assert not [h for h in sent if API_KEY in h[1] or OTHER_KEY in h[1]], (headers, sent)
        assert "x-hopsearch-key" not in dict(sent)
    assert bearer.status_code == 200 and bearer_seen, bearer.text[:200]
    assert not [v for _, _, pairs in bearer_seen for _, v in pairs if API_KEY in v]
    assert caller[0] == 200 and dict(caller_seen[0][2]).get("Authorization") == BASIC  # the caller's own passes
