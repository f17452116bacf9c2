"""The lean ``_retrieve`` path takes only what it can answer exactly as the route would; the rest goes
to the FastAPI route (whose errors name the field). The answers themselves are compared over real
Elasticsearch in ``test_api_routes.py``."""

from __future__ import annotations

import logging

import pytest

from hopsearch.service.api import create_app
from hopsearch.service.api.middleware.fast_retrieve import FastRetrieve, _json_type
from hopsearch.service.config.settings import Settings


@pytest.mark.parametrize(
    "body",
    [
        b'{"query": "Lethal Weapon"}',
        b'{"query": "x", "k": 3, "mode": "hybrid", "fusion": "bool", "weights": [1, 2], "legs": true}',
        b'{"query": "x", "filters": [{"term": {"source": "docs"}}]}',
        '{"query": "日本の映画"}'.encode(),
    ],
)
def test_well_formed_requests_take_the_lean_path(body: bytes) -> None:
    assert FastRetrieve._parse(body) is not None


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b'{"query": ',
        b'[{"query": "x"}]',
        b'"x"',
        b'{"query": ""}',
        b'{"query": "x", "k": "many"}',
        b'{"query": "x", "size": 3}',
        b'{"k": 3}',
        b'{"query": "x", "k": NaN}',
        b'{"query": "x", "k": 100000000000000000000000}',
        b'{"query": "\\ud800"}',
    ],
)
def test_everything_else_goes_to_the_route(body: bytes) -> None:
    assert FastRetrieve._parse(body) is None


def test_only_json_bodies_are_read() -> None:
    assert _json_type([(b"content-type", b"application/json")])
    assert _json_type([(b"host", b"h"), (b"content-type", b"Application/JSON; charset=utf-8")])
    assert not _json_type([(b"content-type", b"application/vnd.x+json")])
    assert not _json_type([(b"content-type", b"text/plain")])
    assert not _json_type([])


def test_building_the_app_leaves_logging_to_the_host() -> None:
    """The MCP SDK configures the root logger (rich, INFO) when nothing has: in a ``serve --workers``
    worker every Elasticsearch request was then logged, costing more than the rest of a ``_retrieve``."""
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    root.handlers.clear()
    try:
        create_app(Settings(embedder="none"))
        assert root.handlers == [] and root.level == level
    finally:
        root.handlers[:] = saved
