"""Several Elasticsearch URLs: a dead node and a node answering 503 cost a retry on the next node of the
client's pool, not an error (7.17, 8.19 and 9.2; ``HOPSEARCH_ES_URL`` with comma-separated nodes)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hopsearch.cli.local import esnode
from hopsearch.service.config.settings import Settings
from hopsearch.service.store import Store
from tests.conftest import EsNode, _drop, make_settings


class Unavailable(BaseHTTPRequestHandler):
    """A node behind a proxy that has lost it: every request answers 503."""

    hits = 0

    def _answer(self) -> None:
        type(self).hits += 1
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = b'{"error":"no upstream"}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def unavailable_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Unavailable)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_comma_separated_url_is_a_node_list() -> None:
    settings = Settings(es_url="http://127.0.0.1:1, http://127.0.0.1:2/")
    assert settings.es_url == ["http://127.0.0.1:1", "http://127.0.0.1:2"]


async def test_a_dead_first_node_and_a_503_node_cost_retries_not_errors(es_node: EsNode, unavailable_url: str) -> None:
    dead = f"http://127.0.0.1:{esnode.free_port()}"
    settings = make_settings(dead, es_url=[dead, unavailable_url, es_node.url], es_max_retries=3)
    Unavailable.hits = 0
    store = await Store.connect(settings)
    try:
        await store.ensure_side_indices()
        for n in range(12):  # the pool goes round the nodes: every one is asked at least once
            assert await store.create_document(settings.traces_index, f"t-{n}", {"trace_id": f"t-{n}"}, refresh=True)
            found = await store.search(settings.traces_index, {"query": {"ids": {"values": [f"t-{n}"]}}})
            assert found["hits"]["hits"][0]["_id"] == f"t-{n}"
        assert await store.count(settings.traces_index) == 12
        assert Unavailable.hits >= 1
    finally:
        await _drop(store)
        await store.close()


async def test_sniffing_finds_the_node_and_answers(es_node: EsNode) -> None:
    settings = make_settings(es_node.url, es_sniff=True)
    store = await Store.connect(settings)
    try:
        await store.ensure_side_indices()
        assert await store.create_document(settings.outlines_index, "o-1", {"entity": "x"}, refresh=True)
        assert await store.count(settings.outlines_index) == 1
    finally:
        await _drop(store)
        await store.close()
