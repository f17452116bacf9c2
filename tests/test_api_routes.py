"""The HTTP service's routes over real Elasticsearch (7.17 and 8.19) and a scripted vLLM-like server,
in-process through ``httpx.ASGITransport``."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from click.testing import CliRunner

from hopsearch.cli.main import main
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.outlines.model import EntityOutline, Fact
from hopsearch.service.outlines.store import EsOutlineStore
from tests.api_fixtures import QUESTION, any_strategy_model, dead_url, serving
from tests.conftest import EsNode


def error_of(response: Any) -> tuple[int, str, str]:
    body = response.json()
    assert body["status"] == response.status_code
    assert body["error"]["root_cause"][0]["type"] == body["error"]["type"]
    return response.status_code, body["error"]["type"], body["error"]["reason"]


async def test_root_reports_service_elasticsearch_and_capabilities(es_node: EsNode) -> None:
    async with serving(es_node.url, load=False) as api:
        response = await api.client.get("/")
    body = response.json()
    assert response.headers["x-elastic-product"] == "Elasticsearch"  # the official clients check it
    assert body["version"]["number"].startswith(es_node.label) and body["tagline"] == "You Know, for Search"
    assert body["hopsearch"]["version"]["number"]
    assert body["hopsearch"]["elasticsearch"]["version"].startswith(es_node.label)
    caps = body["hopsearch"]["capabilities"]
    assert caps["vector_mode"] == ("knn" if es_node.knn else "rerank")
    assert "deeprag" in caps["strategies"] and caps["retrieval_modes"] == ["bm25"]


async def test_retrieve_answers_in_an_elasticsearch_envelope(es_node: EsNode) -> None:
    async with serving(es_node.url) as api:
        response = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "Lethal Weapon director", "k": 3})
        versioned = await api.client.post(f"/{api.alias}-v1/_retrieve", json={"query": "Lethal Weapon", "k": 2})
        short = await api.client.post("/passages/_retrieve", json={"query": "Spielberg"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert isinstance(body["took"], int) and body["timed_out"] is False
    assert (body["mode"], body["dense_method"]) == ("bm25", "none")
    hits = body["hits"]["hits"]
    assert body["hits"]["total"] == {"value": 3, "relation": "eq"}
    assert hits[0]["_id"] in {"p-lethal", "p-lethal2"} and hits[0]["_index"] == api.alias
    assert body["hits"]["max_score"] == hits[0]["_score"] >= hits[-1]["_score"]
    assert hits[0]["_source"]["title"].startswith("Lethal Weapon") and "embedding" not in hits[0]["_source"]
    assert versioned.status_code == 200 and versioned.json()["hits"]["hits"][0]["_index"] == f"{api.alias}-v1"
    assert short.json()["hits"]["hits"][0]["_id"] == "p-spielberg"


async def test_retrieve_answers_alike_on_the_lean_path_and_through_the_route(es8_node: EsNode) -> None:
    """A well-formed ``application/json`` request takes the lean path (``api/middleware/fast_retrieve.py``); the same
    body as another JSON type (``+json``, which only the FastAPI route reads) takes the route: one answer,
    one metrics label, the same API-key check."""
    body = {"query": "Lethal Weapon director", "k": 3, "filters": [{"range": {"chunk": {"gte": 0}}}]}
    async with serving(es8_node.url) as api:
        url = f"/{api.alias}/_retrieve"
        lean = await api.client.post(url, json=body)
        routed = await api.client.post(
            url, content=json.dumps(body), headers={"Content-Type": "application/vnd.hopsearch+json"}
        )
        charset = await api.client.post(
            url, content=json.dumps(body), headers={"Content-Type": "Application/JSON; charset=utf-8"}
        )
        too_big = await api.client.post(url, json={**body, "k": 10_000})
        no_key = await api.client.post(url, json=body, headers={"Authorization": ""})
        metrics = (await api.client.get("/_metrics")).text
    assert lean.status_code == routed.status_code == charset.status_code == 200, lean.text
    assert lean.headers["content-type"] == routed.headers["content-type"] == "application/json"
    assert lean.headers["x-elastic-product"] == "Elasticsearch"
    answers = [response.json() for response in (lean, routed, charset)]
    for answer in answers:
        answer.pop("took")
    assert answers[0] == answers[1] == answers[2] and answers[0]["hits"]["hits"][0]["_id"] in {"p-lethal", "p-lethal2"}
    assert error_of(too_big)[:2] == (400, "illegal_argument_exception") and "[body.k]" in error_of(too_big)[2]
    assert no_key.status_code == 401
    assert 'hopsearch_http_requests_total{method="POST",route="/{index}/_retrieve",status="200"} 3.0' in metrics
    assert 'hopsearch_retrievals_total{mode="bm25",source="retrieve"} 3.0' in metrics


@pytest.mark.parametrize(
    "text", ["title:foo AND (bar OR", "Lethal* ~ [1 TO", '"unbalanced', "text:/regex.*/ && || !", "\\"]
)
async def test_query_string_syntax_is_plain_text(es8_node: EsNode, text: str) -> None:
    async with serving(es8_node.url) as api:
        response = await api.client.post(f"/{api.alias}/_retrieve", json={"query": text, "k": 5})
    assert response.status_code == 200, response.text
    if text.startswith("title:foo"):
        assert response.json()["hits"]["hits"][0]["_id"] == "p-syntax"


async def test_literal_filters_and_refused_filters(es_node: EsNode) -> None:
    async with serving(es_node.url) as api:

        async def ids(filters: list[dict[str, Any]]) -> list[str]:
            body = {"query": "film director", "k": 10, "filters": filters}
            response = await api.client.post(f"/{api.alias}/_retrieve", json=body)
            assert response.status_code == 200, response.text
            return sorted(h["_id"] for h in response.json()["hits"]["hits"])

        assert await ids([{"term": {"doc_id": "p-donner"}}]) == ["p-donner"]
        assert await ids([{"terms": {"doc_id": ["p-jaws", "p-donner"]}}]) == ["p-donner", "p-jaws"]
        assert await ids([{"range": {"chunk": {"gte": 1}}}]) == []
        assert len(await ids([{"exists": {"field": "doc_id"}}, {"term": {"source": "jsonl"}}])) >= 3
        assert await ids([{"term": {"source": "docs"}}]) == []
        either = [{"or": [{"term": {"doc_id": "p-jaws"}}, {"term": {"doc_id": "p-donner"}}]}]
        assert await ids(either) == ["p-donner", "p-jaws"]
        assert await ids([*either, {"not": {"term": {"doc_id": "p-jaws"}}}]) == ["p-donner"]
        assert await ids([{"and": [*either, {"range": {"indexed_at": {"gte": "now-1d"}}}]}]) == []
        # one filter object is a list of one (issue 42 item 10), on _retrieve and in _ask's options
        one = await api.client.post(
            f"/{api.alias}/_retrieve",
            json={"query": "film director", "k": 10, "filters": {"term": {"doc_id": "p-donner"}}},
        )
        assert one.status_code == 200, one.text
        assert [h["_id"] for h in one.json()["hits"]["hits"]] == ["p-donner"]
        readme_example = {"and": [{"term": {"source": "wiki"}}, {"range": {"indexed_at": {"gte": "now-30d"}}}]}
        example = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "film", "filters": readme_example})
        assert example.status_code == 200, example.text
        ask_one = {"question": "q", "options": {"filters": {"term": {"embedding": 1}}}}
        refused_one = await api.client.post(f"/{api.alias}/_ask", json=ask_one)
        assert refused_one.status_code == 400 and refused_one.json()["error"]["field"] == (
            "body.options.filters.0.term.embedding"
        )
        bad_date = {"query": "x", "filters": [{"range": {"indexed_at": {"gte": "last week"}}}]}
        refused_date = await api.client.post(f"/{api.alias}/_retrieve", json=bad_date)
        assert refused_date.status_code == 400 and refused_date.json()["error"]["field"] == (
            "body.filters.0.range.indexed_at.gte"
        )
        ask_bad = {"question": "q", "options": {"filters": [{"term": {"embedding": 1}}]}}
        refused_ask = await api.client.post(f"/{api.alias}/_ask", json=ask_bad)
        assert refused_ask.status_code == 400 and refused_ask.json()["error"]["field"] == (
            "body.options.filters.0.term.embedding"
        )
        unsafe = {"query": "x", "filters": [{"query_string": {"query": "title:foo AND (bar OR"}}]}
        refused = await api.client.post(f"/{api.alias}/_retrieve", json=unsafe)
        field = {"query": "x", "filters": [{"term": {"text": "free text field"}}]}
        refused_field = await api.client.post(f"/{api.alias}/_retrieve", json=field)
        wrong_type = {"query": "x", "filters": [{"term": {"chunk": "not a number"}}]}
        es_refused = await api.client.post(f"/{api.alias}/_retrieve", json=wrong_type)
    status, kind, reason = error_of(refused)
    assert (status, kind) == (400, "illegal_argument_exception") and "[body.filters.0" in reason
    assert error_of(refused_field)[0] == 400 and "[body.filters.0" in error_of(refused_field)[2]
    assert error_of(es_refused)[0] == 400  # Elasticsearch's own 400, not a 5xx


async def test_dense_and_hybrid_report_the_method_used(es_node: EsNode, minilm: MiniLMEmbedder) -> None:
    async with serving(es_node.url, embedder="minilm") as api:
        dense = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "shark thriller", "mode": "dense"})
        hybrid = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "Spielberg", "mode": "hybrid", "k": 2})
    assert dense.status_code == 200, dense.text
    method = "knn" if es_node.knn else "rerank"
    assert (dense.json()["mode"], dense.json()["dense_method"]) == ("dense", method)
    assert dense.json()["hits"]["hits"][0]["_id"] == "p-jaws"
    assert (hybrid.json()["mode"], hybrid.json()["dense_method"]) == ("hybrid", method)
    assert len(hybrid.json()["hits"]["hits"]) == 2


async def test_dense_without_vectors_is_a_400_not_a_500(es8_node: EsNode) -> None:
    async with serving(es8_node.url) as api:
        response = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "x", "mode": "dense"})
    assert error_of(response)[0] == 400


async def test_unknown_and_missing_indices_are_index_not_found(es_node: EsNode) -> None:
    async with serving(es_node.url, load=False) as api:
        unknown = await api.client.post("/other-index/_retrieve", json={"query": "x"})
        missing = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "x"})
        missing_version = await api.client.post(f"/{api.alias}-v7/_retrieve", json={"query": "x"})
        ask = await api.client.post(f"/{api.alias}/_ask", json={"question": QUESTION})
    for response in (unknown, missing, missing_version, ask):
        assert error_of(response)[:2] == (404, "index_not_found_exception"), response.text
    assert "[other-index]" in error_of(unknown)[2]
    assert api.llm.generation_requests == 0  # refused before any LLM call


async def test_ask_answers_with_citations_and_the_trace_is_readable(es_node: EsNode) -> None:
    async with serving(es_node.url) as api:
        response = await api.client.post(
            f"/{api.alias}/_ask", json={"question": QUESTION, "strategy": "deeprag", "options": {"k": 3}}
        )
        assert response.status_code == 200, response.text
        body = response.json()
        trace = await api.client.get(f"/_traces/{body['trace_id']}")
        jaws = {"question": "Who directed Jaws?", "strategy": "single"}
        single = await api.client.post(f"/{api.alias}/_ask", json=jaws)
        metrics = (await api.client.get("/_metrics")).text
        missing = await api.client.get("/_traces/no-such-trace")
    assert body["answer"] == "2021" and body["strategy"] == "deeprag"
    assert body["citations"][0]["_id"] == "p-lethal" and body["citations"][0]["title"] == "Lethal Weapon"
    assert body["totals"]["retrievals"] == 1 and body["totals"]["llm_calls"] >= 3
    doc = trace.json()
    assert trace.status_code == 200 and doc["found"] is True and doc["_id"] == body["trace_id"]
    assert doc["_source"]["answer"] == "2021" and doc["_source"]["totals"] == body["totals"]
    assert single.status_code == 200 and single.json()["strategy"] == "single"
    assert 'hopsearch_questions_total{status="ok",strategy="deeprag"} 1.0' in metrics
    tokens = f'hopsearch_llm_tokens_total{{direction="out",strategy="deeprag"}} {float(body["totals"]["tokens_out"])}'
    assert tokens in metrics
    assert f'hopsearch_llm_calls_total{{strategy="deeprag"}} {float(body["totals"]["llm_calls"])}' in metrics
    assert 'hopsearch_http_requests_total{method="POST",route="/{index}/_ask",status="200"} 2.0' in metrics
    assert 'hopsearch_http_request_duration_seconds_count{method="POST",route="/{index}/_ask"} 2.0' in metrics
    assert error_of(missing)[:2] == (404, "resource_not_found_exception")


async def test_an_unreachable_llm_is_an_es_style_503_with_the_trace(es_node: EsNode) -> None:
    async with serving(es_node.url, llm_retries=1) as api:
        api.llm.fail_first = 1000
        response = await api.client.post(f"/{api.alias}/_ask", json={"question": QUESTION})
        health = await api.client.get("/_health")
        status, kind, _ = error_of(response)
        trace_id = response.json()["error"]["trace_id"]
        trace = (await api.client.get(f"/_traces/{trace_id}")).json()
    assert (status, kind) == (503, "llm_unavailable_exception")
    assert trace["_source"]["status"] == "error"
    assert health.status_code == 200  # /models still answers; only generation fails


async def test_health_needs_no_key_and_reports_each_dependency(es8_node: EsNode) -> None:
    async with serving(es8_node.url, load=False, headers={}) as api:
        ok = await api.client.get("/_health")
    async with serving(es8_node.url, load=False, headers={}, llm_base_url=[dead_url()]) as api:
        down = await api.client.get("/_health")
    assert ok.status_code == 200 and ok.json()["status"] == "green"
    assert ok.json()["elasticsearch"]["reachable"] and ok.json()["llm"]["reachable"]
    assert down.status_code == 503 and down.json()["status"] == "red"
    assert down.json()["elasticsearch"]["reachable"] and not down.json()["llm"]["reachable"]


async def test_outlines_by_entity_alias_and_search(es_node: EsNode) -> None:
    outline = {
        "namespace": "default",
        "entity_key": "richard donner",
        "entity": "Richard Donner",
        "aliases": ["Dick Donner"],
        "keys": ["richard donner", "dick donner"],
        "updated_at": "2024-05-01T00:00:00Z",
        "facts": [{"summary": "Richard Donner directed Lethal Weapon.", "passage_ids": ["p-lethal"]}],
    }
    async with serving(es_node.url) as api:
        store = await api.store()
        await store.put_document(api.settings.outlines_index, "default:richard donner", outline, refresh=True)
        by_name = await api.client.get("/_outlines/Richard Donner")
        by_alias = await api.client.get("/_outlines/Dick Donner", params={"namespace": "default"})
        other_ns = await api.client.get("/_outlines/Richard Donner", params={"namespace": "elsewhere"})
        unknown = await api.client.get("/_outlines/Nobody")
        normalised = await api.client.get("/_outlines/Richard Donner's")  # possessive: the same entity key
        search = await api.client.post("/_outlines/_search", json={"query": "directed Lethal Weapon"})
        by_entity = await api.client.post("/_outlines/_search", json={"entity": "dick donner", "namespace": "default"})
        none = await api.client.post("/_outlines/_search", json={"query": "Lethal", "namespace": "elsewhere"})
    assert by_name.status_code == 200 and by_name.json()["_source"]["entity"] == "Richard Donner"
    assert by_alias.json()["_id"] == "default:richard donner"
    assert normalised.status_code == 200 and normalised.json()["_id"] == "default:richard donner"
    assert error_of(other_ns)[0] == 404 and error_of(unknown)[:2] == (404, "resource_not_found_exception")
    assert search.json()["hits"]["hits"][0]["_source"]["entity_key"] == "richard donner"
    assert by_entity.json()["hits"]["total"]["value"] == 1
    assert none.json()["hits"]["total"]["value"] == 0


async def test_cli_and_http_outline_searches_rank_alike(es_node: EsNode) -> None:
    now = datetime.now(UTC)

    def fact(summary: str, question: str = "q") -> Fact:
        return Fact(summary, question, "sub", ("p-1",), "gemma", now, "trace-1")

    outlines = [
        EntityOutline("default", "Lethal Weapon", ("Lethal Weapon 1",), (fact("A 1987 action film."),)),
        EntityOutline("default", "Richard Donner", ("Dick Donner",), (fact("He directed Lethal Weapon."),)),
        EntityOutline("default", "Mel Gibson", (), (fact("Starred in Lethal Weapon and Lethal Weapon 2."),)),
        EntityOutline("default", "Weapon X", (), (fact("A comic story."),)),
        EntityOutline("default", "Danny Glover", (), (fact("An American actor.", "Who starred in Lethal Weapon?"),)),
        EntityOutline("elsewhere", "Lethal Dose", (), (fact("Lethal weapon of choice."),)),
    ]
    async with serving(es_node.url, load=False) as api:
        await EsOutlineStore(await api.store()).save(outlines)
        env = {"HOPSEARCH_ES_URL": api.settings.es_url[0], "HOPSEARCH_INDEX_PREFIX": api.settings.index_prefix}

        def cli() -> list[str]:
            result = CliRunner().invoke(main, ["outlines", "search", "lethal weapon", "--json"], env=env)
            assert result.exit_code == 0, result.output
            return [doc["entity"] for doc in json.loads(result.output)]

        by_cli = await asyncio.to_thread(cli)
        response = await api.client.post("/_outlines/_search", json={"query": "lethal weapon", "namespace": "default"})
    by_http = [hit["_source"]["entity"] for hit in response.json()["hits"]["hits"]]
    assert len(by_cli) >= 3 and "Lethal Dose" not in by_cli
    assert by_http == by_cli


async def test_errors_are_elasticsearch_style_everywhere(es8_node: EsNode) -> None:
    async with serving(es8_node.url, load=False) as api:
        no_route = await api.client.post("/no/such/route", json={})
        cluster_route = await api.client.get("/no/such/route")
        wrong_method = await api.client.delete(f"/{api.alias}/_retrieve")
        bad_k = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "x", "k": "many"})
        no_query = await api.client.post(f"/{api.alias}/_retrieve", json={"k": 3})
        unknown_field = await api.client.post(f"/{api.alias}/_retrieve", json={"query": "x", "size": 3})
        bad_json = await api.client.post(
            f"/{api.alias}/_retrieve", content=b'{"query": ', headers={"Content-Type": "application/json"}
        )
        bad_strategy = await api.client.post(f"/{api.alias}/_ask", json={"question": "q", "strategy": "magic"})
        bad_stream = await api.client.post(f"/{api.alias}/_ask", params={"stream": "maybe"}, json={"question": "q"})
    # Not a hopsearch route: a write outside the allow-list is refused; a read is the cluster's answer.
    assert error_of(no_route)[:2] == (403, "security_exception")
    assert "[POST /no/such/route]" in error_of(no_route)[2]
    assert cluster_route.status_code >= 400 and cluster_route.headers["x-elastic-product"] == "Elasticsearch"
    assert "/no/such/route" in cluster_route.text
    assert error_of(wrong_method)[:2] == (405, "method_not_allowed_exception")
    assert wrong_method.headers["allow"] == "POST"
    assert error_of(bad_k)[0] == 400 and error_of(bad_k)[2].startswith("[body.k]")
    assert error_of(no_query)[2].startswith("[body.query]")
    assert error_of(unknown_field)[2].startswith("[body.size]")
    assert error_of(bad_json)[:2] == (400, "parse_exception")
    assert error_of(bad_strategy)[2].startswith("[body.strategy]")
    assert error_of(bad_stream)[2].startswith("[query.stream]")


async def test_every_registered_strategy_answers_over_http(es8_node: EsNode) -> None:
    from hopsearch.service.app.runtime import STRATEGIES

    async with serving(es8_node.url, script=any_strategy_model) as api:
        for name in STRATEGIES:
            response = await api.client.post(f"/{api.alias}/_ask", json={"question": QUESTION, "strategy": name})
            assert response.status_code == 200, (name, response.text)
            body = response.json()
            assert body["strategy"] == name and body["answer"], name
            assert (await api.client.get(f"/_traces/{body['trace_id']}")).status_code == 200
