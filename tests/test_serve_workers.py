"""``hopsearch serve --workers 2``: two service processes on one port, sharing nothing but Elasticsearch
(8.19). Every request is answered; both processes answer (each ``/_metrics`` names its process and
counts only what that process served, and the counts of the two add up to what was sent); a trace
written through one process is read back through the other."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from hopsearch.service.store import Store
from tests.api_fixtures import API_KEY, MODEL, load_passages
from tests.conftest import EsNode, make_settings
from tests.llm_fixtures import server_for
from tests.service_processes import hopsearch_serve, process_figures, scripted_service

RETRIEVES = 40
TRACE_READ = "GET /_traces/{trace_id} 200"
HEADERS = {"Authorization": f"ApiKey {API_KEY}"}
#: A new connection for every request: the two processes accept from one socket, connection by connection.
FRESH = httpx.Limits(max_keepalive_connections=0)


async def scrape_each(client: httpx.AsyncClient, url: str, tries: int = 400) -> dict[str, dict[str, float]]:
    """pid → that process's request counts, scraped until two processes have answered."""
    seen: dict[str, dict[str, float]] = {}
    for _ in range(tries // 8):
        answers = await asyncio.gather(*(client.get(f"{url}/_metrics") for _ in range(8)))
        for answer in answers:
            assert answer.status_code == 200, answer.text
            pid, served = process_figures(answer.text)
            seen[pid] = served
        if len(seen) >= 2:
            break
    return seen


async def test_two_workers_serve_one_port_and_share_only_elasticsearch(es8_node: EsNode, tmp_path: Path) -> None:
    settings = make_settings(es8_node.url)
    store = await Store.connect(settings)
    try:
        await load_passages(store)
        with server_for("vllm", MODEL) as llm:
            env = scripted_service(es8_node.url, settings.index_prefix, llm.base_url)
            with hopsearch_serve(env, tmp_path / "serve.log", workers=2) as served:
                async with httpx.AsyncClient(headers=HEADERS, limits=FRESH, timeout=60) as client:
                    alias = settings.passages_alias
                    body = {"query": "Who directed Lethal Weapon?", "k": 3}
                    answers = await asyncio.gather(
                        *(client.post(f"{served.url}/{alias}/_retrieve", json=body) for _ in range(RETRIEVES))
                    )
                    assert [a.status_code for a in answers] == [200] * RETRIEVES, answers[0].text
                    assert all(a.json()["hits"]["hits"][0]["_id"] == "p-lethal" for a in answers)

                    asked = await client.post(
                        f"{served.url}/{alias}/_ask", json={"question": "When did the director of Lethal Weapon die?"}
                    )
                    assert asked.status_code == 200, asked.text
                    trace_id = asked.json()["trace_id"]
                    # Read the trace until the process that did not answer the question has read it too
                    # (bursts of connections tend to go to one process: read in rounds, scrape between).
                    reads = 0
                    for _ in range(60):
                        found = await asyncio.gather(
                            *(client.get(f"{served.url}/_traces/{trace_id}") for _ in range(2))
                        )
                        reads += len(found)
                        assert [r.status_code for r in found] == [200, 200], found[0].text
                        assert {r.json()["_source"]["trace_id"] for r in found} == {trace_id}
                        processes = await scrape_each(client, served.url)
                        if len(processes) == 2 and all(p.get(TRACE_READ) for p in processes.values()):
                            break
        log = (tmp_path / "serve.log").read_text(errors="replace")
        assert len(processes) == 2, (processes, log[-2000:])
        assert str(served.pid) not in processes  # the supervisor does not serve; its workers do
        retrieved = [p.get("POST /{index}/_retrieve 200", 0.0) for p in processes.values()]
        read = [p.get(TRACE_READ, 0.0) for p in processes.values()]
        asks = [p.get("POST /{index}/_ask 200", 0.0) for p in processes.values()]
        assert sum(retrieved) == RETRIEVES and sum(read) == reads and sum(asks) == 1, processes
        assert all(read), processes  # the process that did not answer the question read its trace all the same
    finally:
        await store.client.indices.delete(
            index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
        )
        await store.close()
