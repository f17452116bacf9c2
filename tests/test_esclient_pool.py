"""The client's keep-alive pool per Elasticsearch node is sized by ``es_connections_per_node`` (the
libraries' default of 10 made a 16-client load queue inside the service), for both client libraries."""

from __future__ import annotations

from hopsearch.service.config.settings import Settings
from hopsearch.service.store.esclient import ServerInfo, make_client


async def test_connections_per_node_reach_both_clients() -> None:
    urls = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert Settings(embedder="none").es_connections_per_node == 32
    settings = Settings(embedder="none", es_url=urls, es_connections_per_node=7)
    client = make_client(settings, ServerInfo("8.19.0", frozenset()))
    client7 = make_client(settings, ServerInfo("7.17.0", frozenset()))
    try:
        assert [node.config.connections_per_node for node in client.transport.node_pool.all()] == [7, 7]
        assert client7.transport.kwargs["maxsize"] == 7  # each connection's aiohttp pool limit
    finally:
        await client.close()
        await client7.close()
