"""With security on (its own 8.19 node, users in the file realm): what the caller's credentials may do
is what the cluster lets them do through hopsearch. The service runs as a superuser; a caller with a
read-only role reads the passages, is refused the cluster's settings, and is seen by the cluster as
itself; a caller with only a hopsearch key reaches the cluster with no credentials at all."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import elasticsearch
import pytest

from hopsearch.cli.local import esnode
from hopsearch.service.config.settings import PROXY_ALLOW_READ
from hopsearch.service.errors import HopsearchError
from tests.api_fixtures import API_KEY
from tests.conftest import ES_VERSIONS, unavailable
from tests.test_api_clients import front, official_client, perform

SERVICE = ("hop_service", "service-password-1")
READER = ("reader", "reader-password-1")
READER_ROLE = """passages_reader:
  cluster: []
  indices:
    - names: ["t*"]
      privileges: ["read", "view_index_metadata"]
"""


@pytest.fixture(scope="module")
def secured_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cache = Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "hopsearch"
    spec = esnode.NodeSpec(
        version=ES_VERSIONS["8.19"],
        port=esnode.free_port(),
        node_dir=tmp_path_factory.mktemp("es-secured"),
        cache_dir=cache,
        security=True,
    )
    try:
        esnode.add_user(spec, *SERVICE, "superuser")
        esnode.add_user(spec, *READER, "passages_reader", READER_ROLE)
        esnode.start(spec, timeout=240, auth=SERVICE)
    except (HopsearchError, OSError) as exc:
        esnode.stop(spec)
        unavailable(f"secured Elasticsearch 8.19 could not start: {exc}")
    try:
        yield spec.url
    finally:
        esnode.stop(spec)


async def test_the_callers_credentials_reach_the_cluster(secured_node: str) -> None:
    # the default allow-list would refuse these two itself: passed on here, the cluster decides
    allow = [*PROXY_ALLOW_READ, "GET /_security/_authenticate", "GET /_cluster/settings"]
    overrides = {"es_api_key": None, "es_username": SERVICE[0], "es_password": SERVICE[1], "proxy_allow": allow}
    async with front(secured_node, **overrides) as (url, settings):
        alias = settings.passages_alias
        reader = official_client(8, url, basic=READER, headers={"X-Hopsearch-Key": API_KEY})
        keyed = official_client(8, url, api_key=API_KEY)
        try:
            found = await reader.search(index=alias, query={"match": {"text": "Donner"}})
            me = await reader.perform_request("GET", "/_security/_authenticate", headers={"accept": "application/json"})
            with pytest.raises(elasticsearch.ApiError) as cluster_settings:
                await reader.cluster.get_settings()
            with pytest.raises(elasticsearch.ApiError) as no_credentials:
                await keyed.search(index=alias, query={"match_all": {}})
            retrieve = await perform(reader, "POST", f"/{alias}/_retrieve", {"query": "Donner", "k": 1})
        finally:
            await reader.close()
            await keyed.close()
    assert found.body["hits"]["hits"][0]["_id"] == "p-donner"
    assert me.body["username"] == READER[0]  # the cluster sees the caller, not the service's superuser
    assert cluster_settings.value.meta.status == 403
    assert cluster_settings.value.body["error"]["type"] == "security_exception"
    assert READER[0] in cluster_settings.value.body["error"]["reason"]
    assert no_credentials.value.meta.status == 401  # the hopsearch key is not passed on; nothing else is added
    assert retrieve["hits"]["hits"][0]["_id"] == "p-donner"  # hopsearch's own route, on the service's account
