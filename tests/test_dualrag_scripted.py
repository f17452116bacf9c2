"""DualRAG against the scripted server: the loop and its stopping rules, the "None" rule, alias
linking, the seen-passages filter, concurrent summaries, schema-constrained JSON and its repair."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from hopsearch.service.errors import LLMOutputError
from hopsearch.service.llm import LLMClient
from hopsearch.service.strategies import AskOptions, Budget
from hopsearch.service.strategies.answer_types import NO_ANSWER
from hopsearch.service.strategies.base import Answer
from hopsearch.service.strategies.dualrag import DualRAG
from hopsearch.service.strategies.dualrag_prompts import EntityQuery, is_none, read_entities
from hopsearch.service.traces.recorder import MemoryTraceSink
from hopsearch.service.types import RetrievalQuery, SearchResult
from tests.dual_fixtures import ChatModel, entities, reason
from tests.llm_fixtures import PASSAGES, ListRetriever, server_for, settings_for
from tests.scopes import asking
from tests.scripted_llm import ScriptedLLM

QUESTION = "Who is the director of Jaws?"


class CountingRetriever(ListRetriever):
    """The list retriever, counting its batches (one batch = one _msearch on Elasticsearch)."""

    def __init__(self) -> None:
        super().__init__(PASSAGES)
        self.batches: list[list[str]] = []

    async def search_many(self, queries: Sequence[RetrievalQuery]) -> list[SearchResult]:
        self.batches.append([q.text for q in queries])
        return await super().search_many(queries)


async def run(
    model: ChatModel, options: AskOptions | None = None, flavour: str = "vllm", **faults: Any
) -> tuple[Answer, dict[str, Any], CountingRetriever, ScriptedLLM]:
    retriever = CountingRetriever()
    sink = MemoryTraceSink()
    # QUESTION asks for a name (free text): these tests are about the loop, not the answer's constraint
    # (test_answer_guides_scripted); a vLLM that ignored a constraint would be an error (issue 54).
    with server_for(flavour, model, **faults) as server:
        async with LLMClient(settings_for(server, flavour)) as llm:
            answer = await DualRAG(llm, retriever, sink).answer(asking(QUESTION, options or AskOptions()))
    return answer, dict(sink.documents[answer.trace.trace_id]), retriever, server


def kinds(doc: dict[str, Any]) -> list[str]:
    return [step["kind"] for step in doc["steps"]]


def final(doc: dict[str, Any]) -> dict[str, Any]:
    step = doc["steps"][-1]
    assert step["kind"] == "answer" and step["decision"] == "final"
    return dict(step)


def jaws_model(**kwargs: Any) -> ChatModel:
    return ChatModel(
        {
            "reasoner": [
                reason("Find who directed Jaws.", True),
                reason("Spielberg directed it; find his birth date.", True),
                reason("Spielberg was born in 1946.", False),
            ],
            "identifier": [
                entities(("Jaws", ["Jaws director", "Jaws 1975 film"])),
                entities(("Steven Spielberg", ["Steven Spielberg born"])),
            ],
        },
        summaries={
            "Jaws": "Jaws (1975) was directed by Steven Spielberg.",
            "Steven Spielberg": "Steven Spielberg was born on December 18, 1946.",
        },
        answer="1946",
        **kwargs,
    )


def test_the_none_rule_is_exact_not_a_substring() -> None:
    for dropped in ("None", "None.", "none", " NONE. ", "None..", "\nnone\n"):
        assert is_none(dropped), dropped
    for kept in ("Nonetheless, Donner directed it.", "None of the passages name a date, but 1946.", "Non"):
        assert not is_none(kept), kept


@pytest.mark.parametrize("flavour", ["vllm", "llamacpp-followup"])
async def test_two_hops_build_the_outline_and_stop_when_the_reasoner_says_so(flavour: str) -> None:
    model = jaws_model()
    answer, doc, retriever, server = await run(model, flavour=flavour)
    answer.raise_for_error()
    assert answer.text == "1946"
    assert kinds(doc) == [
        "reason", "identify", "retrieve", "summarize",
        "reason", "identify", "retrieve", "summarize",
        "reason", "answer",
    ]  # fmt: skip
    assert final(doc)["decided_by"] == "reasoner" and final(doc)["details"]["iterations"] == 3
    # One batch (one _msearch) per step, with every keyword of the step.
    assert retriever.batches == [["Jaws director", "Jaws 1975 film"], ["Steven Spielberg born"]]
    # The outline — one heading per entity, its facts below — is in every later prompt.
    outline = "## Jaws\n- Jaws (1975) was directed by Steven Spielberg."
    later = server.prompts[server.prompts.index(next(p for p in server.prompts if "Passages about Jaws" in p)) + 1 :]
    assert later and all(outline in prompt for prompt in later)
    answer_prompt = server.prompts[-1]
    assert outline + "\n\n## Steven Spielberg\n- Steven Spielberg was born on December 18, 1946." in answer_prompt
    # JSON roles ask for schema-constrained output in the server's dialect.
    json_requests = [r for r in server.requests if "response_format" in r]
    assert len(json_requests) == 5
    expected = "json_schema" if flavour == "vllm" else "json_object"
    assert {r["response_format"]["type"] for r in json_requests} == {expected}
    cited = [c.id for c in answer.citations]
    assert "p-jaws" in cited and "p-spielberg" in cited
    for key in ("retrievals", "llm_calls", "tokens_in", "tokens_out"):
        assert doc["totals"][key] == sum(step[key] for step in doc["steps"]), key


async def test_no_retrieval_when_the_reasoner_needs_none() -> None:
    answer, doc, retriever, _ = await run(ChatModel(answer="Paris"))
    assert answer.text == "Paris"
    assert kinds(doc) == ["reason", "answer"] and retriever.batches == []
    assert doc["steps"][0]["decision"] == "final" and final(doc)["decided_by"] == "reasoner"


async def test_at_most_five_iterations_then_one_final_answer() -> None:
    model = ChatModel(
        defaults={
            "reasoner": reason("Still missing something.", True),
            "identifier": entities(("Jaws", ["Jaws"])),
        },
        summaries={"Jaws": "Jaws is a film."},
        answer="x",
    )
    # The same keyword every time: the repeat guard would stop at the second iteration.
    options = AskOptions(budget=Budget(max_steps=10, max_retrievals=10, max_llm_calls=100), repeat_guard=False)
    answer, doc, retriever, _ = await run(model, options)
    answer.raise_for_error()
    assert kinds(doc).count("reason") == 5 and kinds(doc).count("answer") == 1
    assert final(doc)["decided_by"] == "iteration-limit"
    assert len(retriever.batches) == 5
    # Passages already summarised for an entity are not summarised again.
    assert kinds(doc).count("summarize") == 1


async def test_retrieval_budget_and_no_entities_stop_the_loop() -> None:
    model = ChatModel(
        defaults={"reasoner": reason("more", True), "identifier": entities(("Jaws", ["Jaws"]))},
        summaries={"Jaws": "Jaws is a film."},
    )
    _, doc, retriever, _ = await run(model, AskOptions(budget=Budget(max_retrievals=2), repeat_guard=False))
    assert len(retriever.batches) == 2 and final(doc)["decided_by"] == "retrieval-budget"
    nobody = ChatModel(defaults={"reasoner": reason("more", True)})
    _, doc, retriever, _ = await run(nobody)
    assert retriever.batches == [] and final(doc)["decided_by"] == "no-entities"
    assert kinds(doc) == ["reason", "identify", "answer"]


async def test_summaries_that_are_exactly_none_are_dropped() -> None:
    model = ChatModel(
        {
            "reasoner": [reason("Look up all three.", True)],
            "identifier": [entities(("Jaws", ["Jaws"]), ("Lethal Weapon", ["Lethal"]), ("Richard Donner", ["Donner"]))],
        },
        summaries={"Jaws": "None.", "Lethal Weapon": "none", "Richard Donner": "Nonetheless, Donner directed it."},
    )
    answer, doc, retriever, server = await run(model)
    answer.raise_for_error()
    summaries = [s for s in doc["steps"] if s["kind"] == "summarize"]
    assert [(s["details"]["entity"], s["details"]["dropped"]) for s in summaries] == [
        ("Jaws", True),
        ("Lethal Weapon", True),
        ("Richard Donner", False),
    ]
    assert retriever.batches == [["Jaws", "Lethal", "Donner"]]  # 3 entities, one batch
    answer_prompt = server.prompts[-1]
    assert "## Richard Donner\n- Nonetheless, Donner directed it." in answer_prompt
    assert "## Jaws" not in answer_prompt and "## Lethal Weapon" not in answer_prompt


async def test_summaries_of_different_entities_run_concurrently() -> None:
    model = ChatModel(
        {
            "reasoner": [reason("Look up all three.", True)],
            "identifier": [entities(("Jaws", ["Jaws"]), ("Lethal Weapon", ["Lethal"]), ("Richard Donner", ["Donner"]))],
        },
        summaries=lambda entity, prompt: f"{entity} is in the passages.",
    )
    delay = 0.4
    started = time.monotonic()
    answer, doc, _, server = await run(model, delay_first=100, delay_s=delay)
    answer.raise_for_error()
    summaries = [s for s in doc["steps"] if s["kind"] == "summarize"]
    assert len(summaries) == 3 and server.max_in_flight == 3
    wall = summaries[0]["details"]["wall_ms"] / 1000
    assert delay <= wall < 2 * delay, wall
    assert time.monotonic() - started < 7 * delay  # 5 sequential calls + 1 concurrent batch of 3


async def test_alias_linking_by_key_and_by_same_as() -> None:
    model = ChatModel(
        {
            "reasoner": [reason("Who directed Jaws?", True), reason("More on the director.", True)],
            "identifier": [
                entities(("Steven Spielberg", ["Spielberg"]), ("Jaws (film)", ["Jaws"])),
                # A key-equal spelling, and a new name the model says is a known entity.
                entities(("The Jaws", ["Jaws shark"]), ("Spielberg", ["Spielberg career"], "Steven Spielberg")),
            ],
        },
        summaries={"Steven Spielberg": "Spielberg directed Jaws.", "Jaws (film)": "Jaws is a 1975 film."},
    )
    answer, doc, retriever, server = await run(model)
    answer.raise_for_error()
    second = [s for s in doc["steps"] if s["kind"] == "identify"][1]
    assert second["details"]["links"] == [
        {"name": "The Jaws", "entity": "Jaws (film)", "how": "key"},
        {"name": "Spielberg", "entity": "Steven Spielberg", "how": "same_as"},
    ]
    # Searched under the known entities; everything found was already seen for them: no new summary.
    assert retriever.batches[1] == ["Jaws shark", "Spielberg career"]
    assert sum(1 for s in doc["steps"] if s["kind"] == "summarize") == 2
    assert server.prompts[-1].count("## Steven Spielberg") == 1
    identifier_prompts = [p for p in server.prompts if "Find the entities" in p]
    assert "Known entities: Steven Spielberg; Jaws (film)" in identifier_prompts[1]
    assert server.prompts[-1].count("## Jaws (film)") == 1


@pytest.mark.parametrize("flavour", ["vllm", "llamacpp-followup"])
async def test_malformed_json_is_repaired_once(flavour: str) -> None:
    model = jaws_model()
    model.queues["reasoner"].insert(0, '{"thought": "Find who directed Jaws", "need_retr')
    answer, doc, _, server = await run(model, flavour=flavour)
    answer.raise_for_error()
    first = doc["steps"][0]
    assert first["kind"] == "reason" and first["details"]["repaired"] is True and first["llm_calls"] == 2
    assert server.requests[1]["messages"][-1]["content"].startswith("Your reply could not be used")


async def test_malformed_json_twice_fails_cleanly_with_a_trace() -> None:
    model = ChatModel({"identifier": ["no json at all", '{"wrong": 1}']}, defaults={"reasoner": reason("x", True)})
    answer, doc, retriever, server = await run(model)
    assert isinstance(answer.error, LLMOutputError) and answer.text is None
    assert doc["status"] == "error" and doc["error"]["type"] == "LLMOutputError"
    failed = doc["steps"][-1]
    assert failed["kind"] == "identify" and failed["llm_calls"] == 2
    assert "no json at all" in failed["output"] and '{"wrong": 1}' in failed["output"]
    assert "entities" in failed["error"]
    assert len(server.requests) == 3 and retriever.batches == []  # reasoner + identifier + its one repair


async def test_placeholders_copied_from_the_instructions_count_as_nothing() -> None:
    placeholder = {"entities": [{"entity": "...", "keywords": ["..."], "same_as": ""}]}
    model = ChatModel({"reasoner": [reason("...", True)], "identifier": [placeholder]}, answer="x")
    answer, doc, retriever, server = await run(model)
    answer.raise_for_error()
    assert final(doc)["decided_by"] == "no-entities" and retriever.batches == []
    assert "Reasoning:\n(none yet)" in server.prompts[-1]  # the "..." thought was not kept
    assert read_entities({"entities": [{"entity": "Jaws", "keywords": ["…", " Jaws  1975 "]}]}) == [
        EntityQuery("Jaws", ("Jaws 1975",), None)
    ]


async def test_a_one_slot_server_gets_one_request_at_a_time_and_nothing_is_retried() -> None:
    """llama.cpp serves one generation at a time. DualRAG's concurrent summaries used to go out at once:
    the later ones waited in the server's queue past the request timeout and were retried (issue 13,
    item 7). The client now learns the slot count from ``/props`` and queues in-process, where the wait
    does not count toward the timeout: each call is sent when the slot is free and runs once."""
    names = ["Jaws", "Lethal Weapon", "Richard Donner", "Steven Spielberg"]
    model = ChatModel(
        {
            "reasoner": [reason("Look up all four.", True)],
            "identifier": [entities(*((name, [name]) for name in names))],
        },
        summaries=lambda entity, prompt: f"{entity} is in the passages.",
    )
    sink = MemoryTraceSink()
    # each generation takes 0.3 s; the timeout (0.75 s) covers one call but not a queue of four
    with server_for("llamacpp-followup", model, slots=1, work_s=0.3, constrain=False) as server:
        settings = settings_for(server, "llamacpp-followup", llm_timeout=0.75)
        async with LLMClient(settings) as llm:
            answer = await DualRAG(llm, CountingRetriever(), sink).answer(asking(QUESTION, AskOptions()))
    answer.raise_for_error()
    doc = dict(sink.documents[answer.trace.trace_id])
    assert len([s for s in doc["steps"] if s["kind"] == "summarize"]) == 4
    assert [s["retries"] for s in doc["steps"]] == [0] * len(doc["steps"])
    assert server.generation_requests == doc["totals"]["llm_calls"] == len(server.served)  # each call sent once
    assert server.max_queued == 0  # never a request of ours waiting behind another of ours on the server
    ends = [end for _, end in server.served]
    starts = [start for start, _ in server.served]
    assert all(start >= end for start, end in zip(starts[1:], ends[:-1], strict=True))  # one after the other


async def test_keywords_copied_from_the_prompt_are_not_searched_and_a_filler_answer_is_no_answer() -> None:
    """The local model searched "a | b | c" and answered "(no)" (issue 27, item 14)."""
    copied = {
        "entities": [
            {"entity": "Jaws", "keywords": ["a", "b", "c"], "same_as": ""},
            {"entity": "entity", "keywords": ["keywords"], "same_as": "same_as"},
            {"entity": "Steven Spielberg", "keywords": ["a | b | c", "Spielberg born", "(none)"], "same_as": ""},
        ]
    }
    model = ChatModel(
        {"reasoner": [reason("Find who directed Jaws.", True), reason("Done.", False)], "identifier": [copied]},
        summaries={"Jaws": "Jaws (1975) was directed by Steven Spielberg."},
        answer="(no)",
    )
    answer, doc, retriever, _ = await run(model)
    answer.raise_for_error()
    assert retriever.batches == [["Jaws", "Spielberg born"]]  # the entity's own name where no keyword is left
    [identify] = [step for step in doc["steps"] if step["kind"] == "identify"]
    assert identify["details"]["copied_from_prompt"] == ["a", "b", "c", "entity", "keywords", "a | b | c", "(none)"]
    assert "copied from the prompt: a | b | c" in identify["details"]["note"]
    assert identify["queries"] == ["Jaws", "Spielberg born"]
    assert final(doc)["output"].split("\n")[0].strip() == "(no)" and answer.text == NO_ANSWER
    assert [e.entity for e in read_entities(copied)] == ["Jaws", "Steven Spielberg"]
