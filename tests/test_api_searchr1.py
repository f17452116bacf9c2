"""``POST /retrieve`` in Search-R1's shape, over real Elasticsearch (7.17 and 8.19): the exact response
shape, the batch as one ``_msearch`` on the node, API keys and limits."""

from __future__ import annotations

from tests.api_fixtures import serving
from tests.conftest import EsNode
from tests.counting_proxy import CountingProxy

QUERIES = ["Who directed Lethal Weapon?", "Richard Donner", "Jaws shark film"]


async def test_a_batch_of_three_is_one_msearch_in_search_r1_shape(es_node: EsNode) -> None:
    proxy = CountingProxy(es_node.url)
    async with serving(await proxy.start()) as api:
        runtime = await api.state.runtime()
        await runtime.store.index_meta(api.alias)  # the mapping read happens once per process, not per batch
        proxy.reset()
        response = await api.client.post("/retrieve", json={"queries": QUERIES, "topk": 2, "return_scores": True})
        seen = dict(proxy.paths)
        plain = await api.client.post("/retrieve", json={"queries": QUERIES[:1], "topk": 3, "return_scores": False})
        default_k = await api.client.post("/retrieve", json={"queries": ["film directed"]})
    await proxy.stop()
    assert response.status_code == 200, response.text
    body = response.json()
    assert list(body) == ["result"] and len(body["result"]) == 3
    for per_query in body["result"]:
        assert len(per_query) == 2
        for item in per_query:
            assert set(item) == {"document", "score"} and isinstance(item["score"], float)
            assert set(item["document"]) == {"id", "contents"}
            title, _, text = item["document"]["contents"].partition("\n")
            assert title.startswith('"') and title.endswith('"') and text
    assert body["result"][0][0]["document"]["id"] in {"p-lethal", "p-lethal2"}
    assert body["result"][1][0]["document"]["id"] == "p-donner"
    assert body["result"][2][0]["document"]["id"] == "p-jaws"
    assert body["result"][2][0]["document"]["contents"].startswith('"Jaws')
    assert seen == {("POST", "/_msearch"): 1}, seen
    rows = plain.json()["result"]
    assert len(rows) == 1 and len(rows[0]) == 3 and all(set(doc) == {"id", "contents"} for doc in rows[0])
    assert len(default_k.json()["result"][0]) == api.settings.retrieve_topk == 3


async def test_keys_and_limits_apply(es8_node: EsNode) -> None:
    async with serving(es8_node.url, api_max_queries=2) as api:
        anonymous = await api.client.post("/retrieve", json={"queries": ["x"]}, headers={"Authorization": ""})
        too_many = await api.client.post("/retrieve", json={"queries": ["a", "b", "c"]})
        too_deep = await api.client.post("/retrieve", json={"queries": ["a"], "topk": 101})
        empty = await api.client.post("/retrieve", json={"queries": []})
        blank = await api.client.post("/retrieve", json={"queries": ["", "Jaws"], "topk": 1})
    assert anonymous.status_code == 401
    assert too_many.status_code == 400 and too_many.json()["error"]["field"] == "body.queries"
    assert too_deep.status_code == 400 and too_deep.json()["error"]["field"] == "body.topk"
    assert empty.status_code == 400
    # a blank query is refused on every route, a batch's too (issue 51): nothing of the batch is searched
    assert blank.status_code == 400 and blank.json()["error"]["field"].startswith("body.queries"), blank.text
