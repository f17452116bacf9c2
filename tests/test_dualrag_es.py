"""DualRAG over the real Elasticsearch (7.17 and 8.19): one ``_msearch`` per step, outlines persisted
with their provenance, and reused by a later question (namespace-scoped, with a freshness limit)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hopsearch.service.llm import LLMClient
from hopsearch.service.outlines.model import EntityOutline, Fact
from hopsearch.service.outlines.store import EsOutlineStore
from hopsearch.service.retrieval import EsRetriever
from hopsearch.service.retrieval.config import RetrievalConfig
from hopsearch.service.store import Store
from hopsearch.service.strategies import AskOptions
from hopsearch.service.strategies.base import Answer
from hopsearch.service.strategies.dualrag import DualRAG
from hopsearch.service.traces.recorder import ElasticsearchTraceSink
from tests.conftest import EsNode, make_settings
from tests.counting_proxy import CountingProxy
from tests.dual_fixtures import ChatModel, entities, reason
from tests.llm_fixtures import server_for, settings_for
from tests.scopes import asking
from tests.test_deeprag_es import loaded

SUMMARIES = {
    "Lethal Weapon": "Lethal Weapon (1987) was directed by Richard Donner.",
    "Richard Donner": "Richard Donner (1930-2021) was an American film director.",
    "Lethal Weapon 2": "Lethal Weapon 2 (1989) was again directed by Richard Donner.",
    "Jaws": "Jaws (1975) was directed by Steven Spielberg.",
}


def first_question() -> ChatModel:
    return ChatModel(
        {
            "reasoner": [reason("Find the director.", True), reason("Find when Donner died.", True)],
            "identifier": [
                entities(("Lethal Weapon", ["Lethal Weapon director", "Lethal Weapon 1987"])),
                entities(("Richard Donner", ["Donner died", "Richard Donner director"])),
            ],
        },
        summaries=SUMMARIES,
        answer="2021",
    )


async def ask(
    store: Store, model: ChatModel, question: str, namespace: str = "default", **strategy: Any
) -> tuple[Answer, dict[str, Any]]:
    sink = ElasticsearchTraceSink(store, store.settings.traces_index, refresh=True)
    with server_for("vllm", model) as server:
        async with LLMClient(settings_for(server)) as llm:
            dual = DualRAG(
                llm,
                EsRetriever(store, config=RetrievalConfig.of(store.settings)),
                sink,
                outlines=EsOutlineStore(store),
                **strategy,
            )
            answer = await dual.answer(asking(question, AskOptions(), store=store, namespace=namespace))
    answer.raise_for_error()
    doc = await store.get_document(store.settings.traces_index, answer.trace.trace_id)
    assert doc is not None
    return answer, doc


def queries(doc: dict[str, Any]) -> list[str]:
    return [q for step in doc["steps"] if step["kind"] == "retrieve" for q in step["queries"]]


async def test_three_entities_by_three_keywords_are_one_msearch(es_node: EsNode) -> None:
    proxy = CountingProxy(es_node.url)
    store = await Store.connect(make_settings(await proxy.start()))
    try:
        await loaded(store)
        await store.index_meta()
        model = ChatModel(
            {
                "reasoner": [reason("Look up all three.", True)],
                "identifier": [
                    entities(
                        ("Lethal Weapon", ["Lethal Weapon", "Lethal Weapon 1987", "Lethal Weapon film"]),
                        ("Richard Donner", ["Richard Donner", "Donner director", "Donner 2021"]),
                        ("Jaws", ["Jaws", "Jaws 1975", "Jaws thriller"]),
                    )
                ],
            },
            summaries=SUMMARIES,
        )
        proxy.reset()
        _, doc = await ask(store, model, "Did the directors of Jaws and Lethal Weapon work together?")
        msearches = sum(n for (_, path), n in proxy.paths.items() if path.endswith("/_msearch"))
        retrieve = [s for s in doc["steps"] if s["kind"] == "retrieve"]
        assert msearches == len(retrieve) == 1 and len(retrieve[0]["queries"]) == 9
        assert not any(path.endswith("-passages/_search") for _, path in proxy.paths)
        summaries = {s["details"]["entity"]: s["hit_ids"] for s in doc["steps"] if s["kind"] == "summarize"}
        assert summaries["Lethal Weapon"][:1] == ["p-lethal"] and "p-jaws" in summaries["Jaws"]
        assert len(set(retrieve[0]["hit_ids"])) == len(retrieve[0]["hit_ids"])
    finally:
        await store.client.indices.delete(index=f"{store.settings.index_prefix}-*")
        await store.close()
        await proxy.stop()


async def test_outlines_persist_with_provenance_and_a_later_question_reuses_them(store: Store) -> None:
    await loaded(store)
    first, first_doc = await ask(store, first_question(), "When did the director of Lethal Weapon die?")
    outlines = EsOutlineStore(store)
    donner = await outlines.get("default", "Richard Donner's")
    assert donner is not None and [f.summary for f in donner.facts] == [SUMMARIES["Richard Donner"]]
    lethal = await outlines.get("default", "lethal weapon")
    assert lethal is not None and [f.summary for f in lethal.facts] == [SUMMARIES["Lethal Weapon"]]
    fact = lethal.facts[0]
    assert fact.question == "When did the director of Lethal Weapon die?"
    assert fact.sub_query == "Lethal Weapon director; Lethal Weapon 1987"
    assert fact.passage_ids[0] == "p-lethal" and fact.model == "scripted"
    assert fact.trace_id == first.trace.trace_id
    assert datetime.now(UTC) - fact.created_at < timedelta(minutes=5)

    # A related question: "Lethal Weapon" is known and fresh, "Lethal Weapon 2" is not.
    second_model = ChatModel(
        {
            "reasoner": [reason("Find the directors of both films.", True)],
            "identifier": [
                entities(("The Lethal Weapon", ["Lethal Weapon director"]), ("Lethal Weapon 2", ["Lethal Weapon 2"]))
            ],
        },
        summaries=SUMMARIES,
        answer="yes",
    )
    _, second_doc = await ask(store, second_model, "Were Lethal Weapon and Lethal Weapon 2 directed by the same man?")
    assert len(queries(second_doc)) < len(queries(first_doc))
    assert queries(second_doc) == ["Lethal Weapon 2"]
    [reuse] = [s for s in second_doc["steps"] if s["kind"] == "outline_reuse"]
    assert reuse["queries"] == ["The Lethal Weapon"] and reuse["hit_ids"] == list(fact.passage_ids)
    [reused] = reuse["details"]["facts"]
    assert reused["summary"] == fact.summary and reused["passage_ids"] == list(fact.passage_ids)
    assert reused["trace_id"] == first.trace.trace_id and reused["stored_entity"] == "Lethal Weapon"
    assert fact.passage_ids[0] in [c["id"] for c in second_doc["citations"]]
    # The new spelling is stored as an alias of the same document.
    lethal = await outlines.get("default", "Lethal Weapon")
    assert lethal is not None and "The Lethal Weapon" in lethal.aliases


async def test_reuse_respects_namespace_and_freshness(store: Store) -> None:
    await loaded(store)
    outlines = EsOutlineStore(store)
    old = datetime.now(UTC) - timedelta(hours=2)
    fact = Fact("Jaws (1975) was directed by Steven Spielberg.", "q", "Jaws", ("p-jaws",), "m", old, "t0")
    await outlines.save([EntityOutline("films", "Jaws", ("Jaws (film)",), (fact,))])

    def model() -> ChatModel:
        return ChatModel(
            {"reasoner": [reason("Who directed Jaws?", True)], "identifier": [entities(("Jaws (film)", ["Jaws"]))]},
            summaries={"Jaws (film)": "Spielberg directed Jaws."},
        )

    cases = [("films", 3 * 3600.0, True), ("films", 3600.0, False), ("other", 3 * 3600.0, False)]
    for namespace, max_age, reused in cases:
        _, doc = await ask(store, model(), "Who directed Jaws?", namespace=namespace, max_age_s=max_age)
        found = [s for s in doc["steps"] if s["kind"] == "outline_reuse"]
        assert bool(found) == reused, (namespace, max_age)
        assert queries(doc) == ([] if reused else ["Jaws"]), (namespace, max_age)
    stale = await outlines.get("films", "jaws")
    assert stale is not None and len(stale.facts) == 2  # the stale fact, then the fresh one retrieved


async def test_outline_store_merges_and_finds_by_alias_and_text(store: Store) -> None:
    await store.ensure_indices(None)
    outlines = EsOutlineStore(store)
    now = datetime.now(UTC)
    one = Fact("Richard Donner directed Superman.", "q1", "Donner", ("p1",), "m", now, "t1")
    two = Fact("Richard Donner died in 2021.", "q2", "Donner death", ("p2",), "m", now, "t2")
    await outlines.save([EntityOutline("default", "Richard Donner", ("Dick Donner",), (one,))])
    await outlines.save([EntityOutline("default", "richard donner", ("Donner",), (one, two))])
    found = await outlines.get("default", "Dick Donner's")
    assert found is not None and found.entity == "Richard Donner"
    assert found.aliases == ("Dick Donner", "Donner") and [f.summary for f in found.facts] == [one.summary, two.summary]
    assert await outlines.get("other", "Richard Donner") is None
    hits = await outlines.search("default", "died 2021")
    assert [h.entity for h in hits] == ["Richard Donner"]
