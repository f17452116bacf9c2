"""End to end: a 2WikiMultihopQA question answered by DeepRAG with the real local llama.cpp model
(started by the code behind ``hopsearch llm up``) over the real Elasticsearch.

Under ``CI=true`` a missing model or llama.cpp server fails these tests instead of skipping them.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from hopsearch.cli.local import llm_server
from hopsearch.service.config.settings import Settings, load_settings
from hopsearch.service.errors import ConfigError, NodeError
from hopsearch.service.llm import LLMClient, complete_until
from hopsearch.service.retrieval import EsRetriever
from hopsearch.service.store import Store
from hopsearch.service.strategies import AskOptions, Budget, DeepRAG
from hopsearch.service.strategies.deeprag import DEMONSTRATIONS, STOPS
from hopsearch.service.traces.recorder import ElasticsearchTraceSink
from tests.conftest import EsNode, unavailable
from tests.scopes import asking

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    port = free_port()
    settings = load_settings(
        state_dir=tmp_path_factory.mktemp("llm-state"),
        llm_port=port,
        llm_base_url=[f"http://127.0.0.1:{port}/v1"],
        llm_engine="auto",
        llm_timeout=120.0,
        llm_startup_timeout=300.0,
    )
    try:
        llm_server.start(settings, "llamacpp")
    except (ConfigError, NodeError) as exc:
        unavailable(f"local llama.cpp server: {exc}")
    try:
        yield settings
    finally:
        llm_server.stop(settings)


def first_question(path: Path) -> dict[str, object]:
    with path.open() as lines:
        record = json.loads(next(lines))
    assert isinstance(record, dict)
    return record


async def index_context(store: Store, record: dict[str, object]) -> set[str]:
    target = await store.ensure_indices(None)
    actions = []
    context = record["context"]
    assert isinstance(context, list)
    for number, (title, sentences) in enumerate(context):
        doc_id = f"{record['_id']}-{number}"
        source = {"title": title, "text": " ".join(sentences), "source": "jsonl", "doc_id": doc_id}
        actions.append({"_index": target, "_id": doc_id, "_source": source})
    ok, errors = await store.bulk(actions)
    assert errors == [] and ok == len(actions)
    await store.refresh(target)
    return {action["_id"] for action in actions}


async def test_deeprag_with_the_local_model(llama: Settings, store8: Store, sample_questions_path: Path) -> None:
    # One server version is enough here: the store and retrieval suites cover both.
    store = store8
    record = first_question(sample_questions_path)
    ids = await index_context(store, record)
    retriever = EsRetriever(store)
    sink = ElasticsearchTraceSink(store, store.settings.traces_index, refresh=True)
    budget = Budget(timeout_s=240.0)
    async with LLMClient(llama) as llm:
        assert await llm.engine() == "llamacpp"  # no stop_reason: the fallback decides
        strategy = DeepRAG(llm, retriever, sink)
        common = {"max_depth": 4, "max_tokens": 48, "demonstrations": DEMONSTRATIONS, "budget": budget}
        by_model = await strategy.answer(
            asking(str(record["question"]), AskOptions(mode="model", **common), store=store)
        )
        always = await strategy.answer(
            asking(str(record["question"]), AskOptions(mode="always", **common), store=store)
        )
    for answer in (by_model, always):
        answer.raise_for_error()
        doc = await store.get_document(store.settings.traces_index, answer.trace.trace_id)
        assert doc is not None and doc["status"] == "ok" and doc["model"] == llama.llm_model
        assert doc["totals"]["llm_calls"] >= 2 and doc["totals"]["tokens_in"] > 0
        for key in ("retrievals", "llm_calls", "tokens_in", "tokens_out"):
            assert doc["totals"][key] == sum(step[key] for step in doc["steps"])
    model_doc = by_model.trace.to_document()
    decided = [s for s in model_doc["steps"] if s["kind"] == "generate" and s["decision"]]
    assert decided, model_doc["steps"]
    # Decisions of the model come from the stop string read by the fallback (or the lack of one), or
    # from the repeat guard (a follow-up asked before is not retrieved again).
    assert all(s["decided_by"].startswith(("fallback-", "no-marker", "repeat-of-depth-")) for s in decided)
    # Streamed steps (closed at the marker, no usage from the server) still count their prompt.
    assert all(s["tokens_in"] > 0 for s in model_doc["steps"] if s["llm_calls"]), model_doc["steps"]
    always_doc = always.trace.to_document()
    retrievals = [s for s in always_doc["steps"] if s["kind"] == "retrieve"]
    assert retrievals, always_doc["steps"]
    assert set(retrievals[0]["hit_ids"]) <= ids and retrievals[0]["hit_ids"]


async def test_a_streamed_step_counts_its_prompt_like_the_server(llama: Settings, sample_questions_path: Path) -> None:
    """The count the client asks for after a stream (``/extras/tokenize/count``) is the server's own
    ``usage.prompt_tokens`` for the same prompt (BOS included)."""
    prompt = f"{DEMONSTRATIONS}\n\nQuestion: {first_question(sample_questions_path)['question']}"
    async with LLMClient(llama) as llm:
        streamed = await complete_until(llm, prompt, STOPS, max_tokens=4)
        plain = await llm.complete(prompt, max_tokens=1)
    assert streamed.stop_method == "fallback-stream"
    assert streamed.usage.prompt_tokens == plain.usage.prompt_tokens > 0


async def test_health_stays_ready_during_a_long_local_generation(llama: Settings, es8_node: EsNode) -> None:
    """llama.cpp may hold ``/v1/models`` while it generates: readiness stays 200 (busy or ready), never down."""
    import asyncio

    import httpx

    from hopsearch.service.api import create_app

    overrides = {
        "es_url": [es8_node.url],
        "embedder": "none",
        "llm_retries": 0,
        "llm_timeout": 600.0,
        "health_timeout": 0.5,
    }
    settings = load_settings(**{**llama.model_dump(), **overrides})
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        runtime = await app.state.api.runtime()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hopsearch") as client:
            # End-of-text and end-of-turn banned: the model writes all its tokens, long enough on any
            # machine for several health checks; the generation is cancelled once they are done.
            extra = {"logit_bias": {"1": -100, "106": -100}}
            prompt = "Write a very long story about a lighthouse keeper."
            generation = asyncio.create_task(runtime.llm.complete(prompt, max_tokens=1500, extra=extra))
            await asyncio.sleep(0.5)
            statuses = []
            while not generation.done() and len(statuses) < 3:
                response = await client.get("/_health")
                statuses.append((response.status_code, response.json()["llm"]["state"], generation.done()))
            running = not generation.done()
            generation.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await generation
    assert statuses and running, f"the generation finished before /_health was asked three times: {statuses}"
    assert all(code == 200 for code, _, _ in statuses), statuses
    assert all(state in ("busy", "ready") for _, state, _ in statuses), statuses


async def test_two_streams_at_once_both_finish(llama: Settings) -> None:
    """Two clients (two service processes) stream from the one server at once: ``llm up`` starts it
    with ``--interrupt_requests false``, so the second request waits instead of cutting the first
    stream short (llama-cpp-python's default ends it with ``[DONE]`` and no finish reason)."""
    import asyncio

    extra = {"logit_bias": {"1": -100, "106": -100}}  # no end of text: each writes all its tokens
    never = ("\n\n\n\n\n\n",)

    async def stream(prompt: str) -> tuple[str | None, int]:
        # No retry: a stream cut short fails the call (LLMUnavailable) instead of being asked again.
        async with LLMClient(llama.model_copy(update={"llm_retries": 0})) as llm:
            done = await llm.complete(prompt, max_tokens=24, stream_cut=never, extra=extra)
        assert done.usage.completion_tokens > 1, done
        return done.finish_reason, len(done.attempts)

    first, second = await asyncio.gather(
        stream("Write a long story about a lighthouse keeper."), stream("Describe the sea at night.")
    )
    assert first == second == ("length", 1)
