"""A trace written while Elasticsearch is down is kept and retried, and the answer says it was not stored
(issue 13, item 5). Elasticsearch "goes down" behind a real proxy that drops every connection."""

from __future__ import annotations

from hopsearch.service.llm import LLMClient
from hopsearch.service.store import Store
from hopsearch.service.strategies import AskOptions
from hopsearch.service.strategies.registry import build_strategy
from hopsearch.service.traces.recorder import ElasticsearchTraceSink
from tests.conftest import EsNode, make_settings
from tests.counting_proxy import CountingProxy
from tests.llm_fixtures import PASSAGES, ListRetriever, server_for, settings_for
from tests.scopes import asking

QUESTION = "Who directed Lethal Weapon?"


def answer_with_the_name(request: object) -> str:
    return " Richard Donner"


async def test_a_trace_written_while_elasticsearch_is_down_is_kept_retried_and_reported(es_node: EsNode) -> None:
    proxy = CountingProxy(es_node.url)
    url = await proxy.start()
    settings = make_settings(url)
    store = await Store.connect(settings)
    try:
        await store.ensure_side_indices()
        sink = ElasticsearchTraceSink(store, settings.traces_index, refresh=True)
        with server_for("vllm", answer_with_the_name) as server:
            async with LLMClient(settings_for(server)) as llm:
                single = build_strategy(
                    "single", llm=llm, retriever=ListRetriever(PASSAGES), sink=sink, settings=settings_for(server)
                )
                proxy.down = True
                lost = await single.answer(asking(QUESTION, AskOptions()))
                proxy.down = False
                stored_while_down = await store.get_document(settings.traces_index, lost.trace.trace_id)
                later = await single.answer(asking(QUESTION, AskOptions()))
        lost.raise_for_error()
        assert lost.text == "Richard Donner"  # the answer itself did not need Elasticsearch
        assert lost.trace_not_stored is not None and lost.trace.trace_id in lost.trace_not_stored
        assert "1 pending" in lost.trace_not_stored and stored_while_down is None
        assert later.trace_not_stored is None and not sink.pending
        for answer in (lost, later):  # the buffered trace went in before the next one
            doc = await store.get_document(settings.traces_index, answer.trace.trace_id)
            assert doc is not None and doc["answer"] == "Richard Donner"
    finally:
        await store.client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True)
        await store.close()
        await proxy.stop()
