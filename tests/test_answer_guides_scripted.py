"""Constrained final answers (issue 19) against the scripted servers, which honour the constraints as
the real ones do: vLLM-like restricts the output to the guided choice / regex of its release
(``structured_outputs`` from 0.10.2, ``guided_*`` before 0.12), llama.cpp-like to the GBNF grammar;
a plain OpenAI-compatible server is compared on its prompt logprobs, or (no logprobs) answered as
before with the post-hoc fit. Every scripted reply is messy: only the constraint makes it a
candidate, which the ``openai-plain`` runs (no constraint possible) show by keeping it messy."""

from __future__ import annotations

import re
from typing import Any

import pytest

from hopsearch.service.llm import LLMClient
from hopsearch.service.llm.guided import Guide, parse_version, vllm_fields
from hopsearch.service.strategies import AskOptions, DeepRAG, Iterative, SingleRetrieval
from hopsearch.service.strategies.answer_guides import context_dates, guide_for
from hopsearch.service.strategies.answer_types import answer_shape
from hopsearch.service.strategies.deeprag import DEMONSTRATIONS
from hopsearch.service.traces.recorder import MemoryTraceSink
from tests.dual_fixtures import ChatModel
from tests.llm_fixtures import PASSAGES, DeepRAGModel, ListRetriever, PlanStep, fallback_for, settings_for
from tests.scopes import asking
from tests.scripted_llm import ScriptedLLM, ScriptRequest, constrained, first_string, gbnf_to_regex

#: flavour -> (ScriptedLLM keywords, settings overrides, the method recorded in the trace for a choice).
FLAVOURS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "vllm": ({"report_stop_reason": True, "vllm_version": "0.10.2"}, {}, "structured_outputs"),
    "vllm-0.9": ({"report_stop_reason": True, "vllm_version": "0.9.2"}, {}, "guided"),
    "vllm-0.12": ({"report_stop_reason": True, "vllm_version": "0.12.0"}, {}, "structured_outputs"),
    "vllm-noversion": ({"report_stop_reason": True, "vllm_version": None}, {}, "guided+structured_outputs"),
    "llamacpp-stream": ({"report_stop_reason": False}, {}, "grammar"),
    "llamacpp-followup": ({"report_stop_reason": False}, {}, "grammar"),
    "llamacpp-cut": ({"report_stop_reason": False}, {}, "grammar"),
    "openai-logprobs": ({"report_stop_reason": False}, {"llm_engine": "openai"}, "logprobs"),
    "openai-plain": ({"report_stop_reason": False}, {"llm_engine": "openai"}, "none"),
}

#: question -> (the scripted reply, the answer under a constraint, the answer without one).
CASES: dict[str, tuple[str, str, str]] = {
    "Which film came out first, Jaws or Star Wars?": (
        " 1. Jaws, not Star Wars (1977).",
        "Jaws",
        "Jaws, not Star Wars (1977).",
    ),
    "Are Jaws and Alien both American films?": (
        " 1. Both are American films, so yes.",
        "yes",
        "Both are American films, so yes.",
    ),
    "When was Steven Spielberg born?": (
        " 1. He was born on December 18, 1946 in Ohio.",
        "December 18, 1946",
        "He was born on December 18, 1946 in Ohio.",
    ),
    "What year was Jaws released?": (" 1. It came out in 1975.", "1975", "It came out in 1975."),
    "How many Lethal Weapon films did Richard Donner direct?": (" He directed 4 of them", "4", "He directed 4 of them"),
    "ジョーズはアメリカ映画ですか？": (" 1. アメリカ映画です。はい", "はい", "アメリカ映画です。はい"),
    "Who directed Jaws?": (" Steven Spielberg", "Steven Spielberg", "Steven Spielberg"),
}

#: Date questions whose passages (the first two) hold a date to the day: answered as a choice among them.
DAY_DATES = {"When was Steven Spielberg born?"}

#: The logprob-scoring "model" prefers these tokens.
LIKELY = {"Jaws": -0.5, "yes": -0.2, "はい": -0.1}


def likely(token: str) -> float:
    return LIKELY.get(token, -3.0)


def flavour_server(flavour: str, script: Any) -> ScriptedLLM:
    keywords, _, _ = FLAVOURS[flavour]
    logprob = likely if flavour == "openai-logprobs" else None
    return ScriptedLLM(script, logprob=logprob, **keywords)


def flavour_settings(server: ScriptedLLM, flavour: str) -> Any:
    _, overrides, _ = FLAVOURS[flavour]
    base = flavour if flavour.startswith("llamacpp") else "vllm"
    return settings_for(server, base, **overrides)


def expected_method(flavour: str, question: str) -> str | None:
    shape = answer_shape(question)
    if shape.type == "text":
        return None
    method = FLAVOURS[flavour][2]
    if method == "logprobs" and shape.type in {"date", "number"} and question not in DAY_DATES:
        return "none"  # logprobs compare candidates; a pattern has none
    return method


def as_choice(question: str) -> bool:
    """Whether the answer is constrained to a list of strings (guided choice), not a pattern."""
    return answer_shape(question).type in {"choice", "yes_no"} or question in DAY_DATES


def constraint_fields(request: dict[str, Any]) -> set[str]:
    return {k for k in ("grammar", "structured_outputs", "guided_choice", "guided_regex") if k in request}


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
@pytest.mark.parametrize("question", sorted(CASES))
async def test_single_answer_is_constrained_to_the_type(flavour: str, question: str) -> None:
    reply, wanted, unconstrained = CASES[question]
    retriever, sink = ListRetriever(PASSAGES), MemoryTraceSink()
    with flavour_server(flavour, lambda request: reply) as server:
        async with LLMClient(flavour_settings(server, flavour)) as llm:
            single = SingleRetrieval(llm, retriever, sink, stop_fallback=fallback_for(flavour))
            answer = await single.answer(asking(question, AskOptions(k=2)))
    answer.raise_for_error()
    method = expected_method(flavour, question)
    step = sink.documents[answer.trace.trace_id]["steps"][-1]
    assert step["answer_type"] == answer_shape(question).type
    assert (step["details"] or {}).get("constrained") == method
    assert answer.text == (unconstrained if method in {"none", None} else wanted)
    generation = [r for r in server.requests if not r.get("echo")]
    # A choice is generated freely first; this reply names both candidates, so a constrained call follows.
    free = 1 if answer_shape(question).type == "choice" else 0
    assert all(not constraint_fields(r) for r in generation[:free])
    fields = constraint_fields(generation[-1]) if generation else set()
    if method == "logprobs":
        scored = [r for r in server.requests if r.get("echo")]
        offered = {" ".join(r["prompt"].rsplit("Answer:", 1)[-1].split()) for r in scored}
        assert wanted in offered and len(generation) == free and step["llm_calls"] == len(scored) + free
        assert set(step["details"]["scores"]) == offered
    elif method in {"none", None}:
        assert fields == set() and not server.constrained and len(generation) == 1
    else:
        assert (
            fields
            == {
                "grammar": {"grammar"},
                "structured_outputs": {"structured_outputs"},
                "guided": {"guided_choice"} if as_choice(question) else {"guided_regex"},
                "guided+structured_outputs": {"structured_outputs", "guided_choice", "guided_regex"}
                & set(generation[-1]),
            }[method]
        )
        assert len(server.constrained) == 1  # the server applied it to the answer generation
        assert len(generation) == free + 1 and step["llm_calls"] == free + 1


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
async def test_deeprag_final_answer_is_constrained(flavour: str) -> None:
    question = "Which film came out first, Jaws or Alien?"
    model = DeepRAGModel([PlanStep("When was Jaws released?", "intermediate", "1975")], final="Jaws, then Alien")
    sink = MemoryTraceSink()
    with flavour_server(flavour, model) as server:
        async with LLMClient(flavour_settings(server, flavour)) as llm:
            deeprag = DeepRAG(llm, ListRetriever(PASSAGES), sink, stop_fallback=fallback_for(flavour))
            answer = await deeprag.answer(asking(question, AskOptions()))
    answer.raise_for_error()
    steps = sink.documents[answer.trace.trace_id]["steps"]
    final = steps[-1]
    method = FLAVOURS[flavour][2]
    assert final["answer_type"] == "choice" and final["details"]["constrained"] == method
    assert answer.text == ("Jaws, then Alien" if method == "none" else "Jaws")
    # Only the final answer is constrained: the follow-ups and intermediate answers are not.
    assert all(not constraint_fields(r) for r in server.requests[:-1] if not r.get("echo"))
    if method not in {"none", "logprobs"}:
        assert constraint_fields(server.requests[-1]) and len(server.constrained) == 1


@pytest.mark.parametrize("flavour", ["vllm", "vllm-0.9", "llamacpp-stream", "openai-logprobs", "openai-plain"])
async def test_iterative_final_answer_is_constrained(flavour: str) -> None:
    question = "Are Jaws and Alien both American films?"
    model = ChatModel(answer="1. Both are American films, so yes.")
    sink = MemoryTraceSink()
    with flavour_server(flavour, model) as server:
        async with LLMClient(flavour_settings(server, flavour)) as llm:
            answer = await Iterative(llm, ListRetriever(PASSAGES), sink).answer(asking(question, AskOptions(k=2)))
    answer.raise_for_error()
    final = sink.documents[answer.trace.trace_id]["steps"][-1]
    method = FLAVOURS[flavour][2]
    assert final["kind"] == "answer" and final["details"]["constrained"] == method
    assert answer.text == ("Both are American films, so yes." if method == "none" else "yes")
    assert final["details"]["stop"] == final["decided_by"]  # the strategy's own details are kept


def test_vllm_fields_follow_the_release() -> None:
    choice, regex = Guide("root ::= x", choice=("A", "B")), Guide("root ::= x", regex="[0-9]{4}")
    assert vllm_fields(choice, (0, 9, 2)) == ({"guided_choice": ["A", "B"]}, "guided")
    assert vllm_fields(regex, (0, 10, 1)) == ({"guided_regex": "[0-9]{4}"}, "guided")
    assert vllm_fields(choice, (0, 10, 2)) == ({"structured_outputs": {"choice": ["A", "B"]}}, "structured_outputs")
    assert vllm_fields(regex, (0, 15, 0)) == ({"structured_outputs": {"regex": "[0-9]{4}"}}, "structured_outputs")
    both = {"guided_choice": ["A", "B"], "structured_outputs": {"choice": ["A", "B"]}}
    assert vllm_fields(choice, None) == (both, "guided+structured_outputs")
    assert parse_version("0.6.6.post1") == (0, 6, 6)
    assert parse_version("0.11.0rc2") == (0, 11, 0)
    assert parse_version("v0.10") == (0, 10, 0)
    assert parse_version("dev") is None


@pytest.mark.parametrize("question", sorted(CASES))
def test_the_grammar_and_the_regex_describe_one_language(question: str) -> None:
    """The GBNF llama.cpp gets and the regex vLLM gets accept the same answers (the scripted server's
    own GBNF reader is the judge for the grammar)."""
    guide = guide_for(answer_shape(question), question)
    if guide is None:
        assert answer_shape(question).type == "text"
        return
    grammar = re.compile(gbnf_to_regex(guide.grammar))
    samples = [*guide.choice, " 17 June 1939", "June 17, 1939", "1939", "June 1939", "4", " 1,200", "two"]
    samples += ["1939年6月17日", "1939年", "Jaws, not Star Wars", "maybe", "June", "17 1939", ""]
    for sample in samples:
        if guide.regex:
            assert bool(grammar.fullmatch(sample)) == bool(re.fullmatch(guide.regex, sample)), sample
        else:  # a choice list allows exactly its strings; the grammar also a leading space
            assert bool(grammar.fullmatch(sample)) == (sample in guide.choice), sample
            assert bool(grammar.fullmatch(f" {sample}")) == (sample in guide.choice), sample


def test_dates_and_numbers_follow_their_pattern() -> None:
    date = guide_for(answer_shape("When did he die?"), "When did he die?")
    assert date is not None and date.regex is not None
    for ok in ["17 June 1939", " June 18, 2014", "1584", "June 1939"]:
        assert re.fullmatch(date.regex, ok), ok
    for bad in ["June", "yesterday", "17/06/1939", "born in 1939"]:
        assert not re.fullmatch(date.regex, bad), bad
    # Japanese documents write 三十キログラム, ２０２６年２月, 毎月末日: no pattern rules them out.
    for question in ["彼はいつ生まれましたか？", "ロボットは何台導入されますか？"]:
        assert answer_shape(question).type in {"date", "number"} and guide_for(answer_shape(question), question) is None
    assert (
        guide_for(answer_shape("安はいつ生まれたか？"), "安はいつ生まれたか？", "安は1901年5月3日に生まれた。") is None
    )
    number = guide_for(answer_shape("How many films?"), "How many films?")
    assert number is not None and number.regex is not None
    assert re.fullmatch(number.regex, " 12") and re.fullmatch(number.regex, "three")
    assert not re.fullmatch(number.regex, "many")


def test_the_scripted_decoder_honours_what_it_is_given() -> None:
    """The scripted servers' constrained decoding itself: earliest allowed piece, whole words."""
    assert constrained("I know it is no", "choice", ["yes", "no"]) == "no"  # not the "no" inside "know"
    assert constrained("nothing fits", "choice", ["A", "B"]) == "A"
    assert constrained("born 1946, died 2021", "regex", "[0-9]{4}") == "1946"
    assert constrained("Star Wars or Jaws", "grammar", 'root ::= " "? ("Jaws" | "Star Wars")\n') == "Star Wars"
    assert gbnf_to_regex('root ::= year "-" year\nyear ::= [0-9] [0-9]?\n') == "(?:[0-9][0-9]?)\\-(?:[0-9][0-9]?)"
    assert constrained("no digits here", "regex", "[0-9]+") == "0"  # the first string of the language
    assert first_string(gbnf_to_regex('root ::= " "? ("Spielberg" | "Donner")')) == "Spielberg"
    assert first_string("( )?(([0-9]{1,2} )?(May|June) )?[1-9][0-9]{2,3}") == "100"
    with pytest.raises(ValueError):
        gbnf_to_regex("root ::= root")


def test_a_vllm_of_another_release_ignores_the_other_form() -> None:
    """Like vLLM: 0.12+ ignores guided_*, before 0.10.2 structured_outputs is ignored."""

    def script(request: ScriptRequest) -> str:
        return "Jaws, not Alien"

    new, old = ScriptedLLM(script, vllm_version="0.12.0"), ScriptedLLM(script, vllm_version="0.9.2")
    assert new._constraint({"guided_choice": ["Alien"]}) is None
    assert new._constraint({"structured_outputs": {"choice": ["Alien"]}}) == ("choice", ["Alien"])
    assert old._constraint({"structured_outputs": {"choice": ["Alien"]}}) is None
    assert old._constraint({"guided_regex": "[0-9]+"}) == ("regex", "[0-9]+")


@pytest.mark.parametrize("flavour", ["vllm", "llamacpp-stream", "openai-logprobs"])
async def test_a_choice_the_free_reply_names_is_not_constrained(flavour: str) -> None:
    """A reply that names one candidate stands: one unconstrained call, recorded as ``free``."""
    question = "Which film came out first, Jaws or Star Wars?"
    sink = MemoryTraceSink()
    with flavour_server(flavour, lambda request: " Star Wars came out first.") as server:
        async with LLMClient(flavour_settings(server, flavour)) as llm:
            single = SingleRetrieval(llm, ListRetriever(PASSAGES), sink, stop_fallback=fallback_for(flavour))
            answer = await single.answer(asking(question, AskOptions(k=2)))
    answer.raise_for_error()
    step = sink.documents[answer.trace.trace_id]["steps"][-1]
    assert answer.text == "Star Wars" and step["details"]["constrained"] == "free" and step["llm_calls"] == 1
    assert not server.constrained and not any(r.get("echo") or constraint_fields(r) for r in server.requests)


def test_context_dates_are_the_passages_days_not_the_questions() -> None:
    passages = (
        "[1] Title: A Text: Ann (born 3 May 1901, died June 7, 1950) was a poet. Her son was born in 1930.\n"
        "[2] Title: B Text: Ann died on June 7, 1950 in Paris; her mother was born 1 January 1870."
    )
    assert context_dates(passages, "When did Ann die?") == ("3 May 1901", "June 7, 1950", "1 January 1870")
    assert context_dates(passages, "When did the daughter of the woman born 3 May 1901 die?")[0] == "June 7, 1950"
    assert context_dates(passages, "What year did Ann die?") == ()  # a year is asked for: the pattern applies
    assert context_dates("Ann was born in 1901.", "When was Ann born?") == ()


async def test_deeprag_offers_its_passages_dates_not_its_demonstrations() -> None:
    """DeepRAG's demonstrations hold dates too; the final answer chooses among the retrieved passages' only."""
    assert context_dates(DEMONSTRATIONS, "When was he born?")  # the built-in worked examples hold a day
    demonstrations = "Question: When was Ridley Scott born?\nSo the final answer is: 30 November 1937"
    question = "When was the director of Jaws born?"
    model = DeepRAGModel([PlanStep("When was Steven Spielberg born?", "search", "1946")], final="In 1946.")
    sink = MemoryTraceSink()
    with flavour_server("vllm", model) as server:
        async with LLMClient(flavour_settings(server, "vllm")) as llm:
            deeprag = DeepRAG(llm, ListRetriever(PASSAGES), sink, stop_fallback=fallback_for("vllm"))
            answer = await deeprag.answer(asking(question, AskOptions(demonstrations=demonstrations)))
    answer.raise_for_error()
    offered = server.requests[-1]["structured_outputs"]["choice"]
    assert offered == ["December 18, 1946"] and answer.text == "December 18, 1946"
