"""A key's requests per minute hold across the workers of one ``hopsearch serve --workers 2`` (real
processes, real HTTP, 8.19): a key of ``per_minute=6`` gets 6 answers of 12 requests, each sent on a new
connection so that both workers serve some; each worker once let a key make its whole limit. And the
shared slots alone (:class:`SharedWindows` over a real file, as each worker maps it): the limit, the wait
it names, two mappings seeing one count."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx

from hopsearch.service.api.limits import SharedWindows
from tests.api_fixtures import API_KEY
from tests.conftest import EsNode
from tests.llm_fixtures import server_for
from tests.service_processes import hopsearch_serve, process_figures, scripted_service
from tests.test_permissions_ask import EchoModel


def test_two_mappings_of_one_file_share_one_window(tmp_path: Path) -> None:
    path = tmp_path / "limits"
    SharedWindows.create(path)
    one, two = SharedWindows(path), SharedWindows(path)
    try:
        assert [one.take("k", 4, 1, 100.0) for _ in range(2)] == [None, None]
        assert [two.take("k", 4, 1, 100.0) for _ in range(2)] == [None, None]
        wait = one.take("k", 4, 1, 100.0)
        assert wait is not None and abs(wait - 15.0) < 1e-6  # one request's share of the minute
        assert two.take("other", 4, 4, 100.0) is None  # another key has its own slot
        assert two.take("k", 4, 1, 115.0) is None and one.take("k", 4, 1, 115.0) is not None
    finally:
        one.close()
        two.close()


async def test_per_minute_holds_across_the_workers_of_one_serve(es8_node: EsNode, tmp_path: Path) -> None:
    with server_for("vllm", EchoModel()) as llm:
        env = scripted_service(es8_node.url, f"t{uuid.uuid4().hex[:10]}", llm.base_url)
        with hopsearch_serve(env, tmp_path / "serve.log", workers=2) as served:
            admin = {"Authorization": f"ApiKey {API_KEY}"}
            async with httpx.AsyncClient(timeout=30) as http:
                made = await http.post(
                    f"{served.url}/_keys",
                    json={"name": "metered", "principals": ["public"], "per_minute": 6},
                    headers=admin,
                )
                assert made.status_code == 201, made.text
                head = {"Authorization": f"ApiKey {made.json()['key']}", "Connection": "close"}
            statuses = []
            for _ in range(12):
                async with httpx.AsyncClient(timeout=30) as fresh:  # a new connection: either worker
                    statuses.append((await fresh.get(f"{served.url}/", headers=head)).status_code)
            pids = set()
            for _ in range(20):
                async with httpx.AsyncClient(timeout=30) as fresh:
                    pids.add(process_figures((await fresh.get(f"{served.url}/_metrics", headers=admin)).text)[0])
    assert len(pids) == 2, pids  # both workers answered
    assert statuses.count(200) == 6 and statuses.count(429) == 6, statuses
