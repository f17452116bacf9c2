"""Same-country / same-nationality yes/no questions answered by comparing two sub-answers (issue 19):
the rules that read the question, the comparison of the answers, and the strategies' final answer
against the scripted servers (both kinds)."""

from __future__ import annotations

import re

import pytest

from hopsearch.service.llm import LLMClient
from hopsearch.service.strategies import AskOptions, Iterative, SingleRetrieval
from hopsearch.service.strategies.answer_compare import Comparison, comparison_parts, same_thing
from hopsearch.service.traces.recorder import MemoryTraceSink
from tests.dual_fixtures import ChatModel
from tests.llm_fixtures import PASSAGES, ListRetriever, fallback_for, server_for, settings_for
from tests.scopes import asking
from tests.scripted_llm import ScriptRequest


@pytest.mark.parametrize(
    ("question", "first", "second"),
    [
        ("Are Galeh Gerd and Bagh-E Shad both located in the same country?", "In which country is Galeh Gerd located?",
         "In which country is Bagh-E Shad located?"),
        ("Are both villages, Aldwick and Roelofarendsveen, located in the same country?",
         "In which country is Aldwick located?", "In which country is Roelofarendsveen located?"),
        ("Did Matthew Scully and Jean Pierre Magnet have the same nationality?",
         "What is the nationality of Matthew Scully?", "What is the nationality of Jean Pierre Magnet?"),
        ("Are both movies, He Named Me Malala and The Vanishing Riders, from the same country?",
         "Which country is He Named Me Malala from?", "Which country is The Vanishing Riders from?"),
        ("Do the movies East Palace, West Palace and Castle Keep, originate from the same country?",
         "Which country is East Palace, West Palace from?", "Which country is Castle Keep from?"),
        ("Are both directors of films Baby Face Morgan and The Seventh Victim from the same country?",
         "Which country is the director of film Baby Face Morgan from?",
         "Which country is the director of film The Seventh Victim from?"),
        ("Do both films: Folly To Be Wise and Bébé'S Kids have the directors from the same country?",
         "Which country is the director of film Folly To Be Wise from?",
         "Which country is the director of film Bébé'S Kids from?"),
        ("Are director of film Wise Girl (film) and director of film The Wonderful Day (1929 film) both from the "
         "same country?", "Which country is the director of film Wise Girl (film) from?",
         "Which country is the director of film The Wonderful Day (1929 film) from?"),
        ("Do both directors of films Snowpiercer and Broadway Billy share the same nationality?",
         "What is the nationality of the director of film Snowpiercer?",
         "What is the nationality of the director of film Broadway Billy?"),
    ],
)  # fmt: skip
def test_the_two_things_and_their_sub_questions(question: str, first: str, second: str) -> None:
    parts = comparison_parts(question)
    assert parts is not None
    assert (parts.sub_question(parts.first), parts.sub_question(parts.second)) == (first, second)


@pytest.mark.parametrize(
    "question",
    [
        "Are Jaws and Alien both American films?",  # no "same …"
        "Who was born first, Jaws or Alien?",
        "Are both from the same country?",  # no pair
        "Is Paris in the same country as Lyon?",  # no "A and B"
        "When did the director of Jaws die?",
    ],
)
def test_other_questions_are_not_comparisons(question: str) -> None:
    assert comparison_parts(question) is None


def test_answers_name_the_same_thing() -> None:
    assert same_thing("The United States", "united states")
    assert same_thing("Khuzestan Province, Iran", "Iran")
    assert not same_thing("Iran", "Lithuania")
    assert not same_thing("", "")


def country_script(countries: dict[str, str], default: str = "yes") -> object:
    """Answers a sub-question with the country of the thing it names; anything else with ``default``."""

    def script(request: ScriptRequest) -> str:
        asked = re.search(r"Question: (.*)\nAnswer:$", request.prompt)
        for thing, country in countries.items():
            if asked and thing in asked.group(1) and asked.group(1) != QUESTION:
                return f" {country}\nQuestion: more"
        return f" {default}, they are.\n"

    return script


QUESTION = "Are Galeh Gerd and Kriviliai both located in the same country?"


@pytest.mark.parametrize("flavour", ["vllm", "llamacpp-stream", "llamacpp-cut"])
@pytest.mark.parametrize(
    ("countries", "expected"),
    [({"Galeh Gerd": "Iran", "Kriviliai": "Lithuania"}, "no"), ({"Galeh Gerd": "Iran", "Kriviliai": "Iran"}, "yes")],
)
async def test_single_compares_the_two_sub_answers(flavour: str, countries: dict[str, str], expected: str) -> None:
    sink = MemoryTraceSink()
    with server_for(flavour, country_script(countries)) as server:
        async with LLMClient(settings_for(server, flavour)) as llm:
            single = SingleRetrieval(llm, ListRetriever(PASSAGES), sink, stop_fallback=fallback_for(flavour))
            answer = await single.answer(asking(QUESTION, AskOptions(k=2)))
    answer.raise_for_error()
    assert answer.text == expected  # the model, asked yes/no, would have said yes
    step = sink.documents[answer.trace.trace_id]["steps"][-1]
    assert step["answer_type"] == "yes_no" and step["llm_calls"] == 2
    assert step["details"]["constrained"] == "compare"
    assert step["details"]["compared"] == countries
    asked = [p.rsplit("Question: ", 1)[-1] for p in server.prompts]
    assert asked == [
        "In which country is Galeh Gerd located?\nAnswer:",
        "In which country is Kriviliai located?\nAnswer:",
    ]
    assert all("Context: [1] Title:" in p for p in server.prompts)  # the same context as the question's prompt


@pytest.mark.parametrize("unknown", ["?", "I do not know.", "no"])
async def test_no_sub_answer_falls_back_to_the_constrained_yes_no(unknown: str) -> None:
    # Two replies that both say "I do not know" (or "no") are no answers, not the same country.
    sink = MemoryTraceSink()
    countries = {"Galeh Gerd": unknown if unknown != "?" else "Iran", "Kriviliai": unknown}
    with server_for("llamacpp-stream", country_script(countries)) as server:
        async with LLMClient(settings_for(server, "llamacpp-stream")) as llm:
            single = SingleRetrieval(llm, ListRetriever(PASSAGES), sink, stop_fallback="stream")
            answer = await single.answer(asking(QUESTION, AskOptions(k=2)))
    assert answer.text == "yes"
    step = sink.documents[answer.trace.trace_id]["steps"][-1]
    assert step["details"]["constrained"] == "grammar"
    # "?": Iran, then no answer, then yes/no; "I do not know.": no answer at once, then yes/no
    assert "grammar" in server.requests[-1] and len(server.prompts) == (3 if unknown == "?" else 2)


async def test_the_shared_final_answer_compares_too() -> None:
    model = ChatModel(answer="Lithuania")
    sink = MemoryTraceSink()
    with server_for("vllm", model) as server:
        async with LLMClient(settings_for(server)) as llm:
            answer = await Iterative(llm, ListRetriever(PASSAGES), sink).answer(asking(QUESTION, AskOptions(k=2)))
    answer.raise_for_error()
    final = sink.documents[answer.trace.trace_id]["steps"][-1]
    # Both sub-answers are "Lithuania": the same country.
    assert answer.text == "yes" and final["details"]["compared"] == {
        "Galeh Gerd": "Lithuania",
        "Kriviliai": "Lithuania",
    }
    assert final["details"]["stop"] == final["decided_by"]


def test_a_comparison_of_nationality_asks_for_it() -> None:
    parts = Comparison("A", "B", "nationality")
    assert parts.sub_question("A") == "What is the nationality of A?"


def type_then_answer(kind: str, reply: str) -> object:
    """Chooses ``kind`` when asked for the answer type (rambling around it), then replies ``reply``."""

    def script(request: ScriptRequest) -> str:
        if request.prompt.endswith("It asks for:"):
            return f" I think it is {kind}, probably."
        return reply

    return script


@pytest.mark.parametrize("flavour", ["vllm", "llamacpp-stream"])
async def test_the_model_chooses_the_type_where_the_rules_cannot(flavour: str) -> None:
    question = "What is the birth date of the director of Jaws?"  # free text by the rules
    sink = MemoryTraceSink()
    script = type_then_answer("a date", " 1. He was born on December 18, 1946 in Ohio.")
    with server_for(flavour, script) as server:
        async with LLMClient(settings_for(server, flavour)) as llm:
            fallback = fallback_for(flavour)
            single = SingleRetrieval(llm, ListRetriever(PASSAGES), sink, stop_fallback=fallback, answer_type_model=True)
            answer = await single.answer(asking(question, AskOptions(k=2)))
    answer.raise_for_error()
    assert answer.text == "December 18, 1946"  # the answer constrained to the date the model chose
    step = sink.documents[answer.trace.trace_id]["steps"][-1]
    assert step["answer_type"] == "date"
    assert step["details"]["answer_type_by"] == "model" and step["details"]["model_answer_type"] == "date"
    assert step["llm_calls"] == 2 and len(server.constrained) == 2  # the type call counts with the answer
    assert [sent.strip() for _, _, _, sent in server.constrained] == ["a date", "December 18, 1946"]


async def test_without_the_setting_the_rules_alone_decide() -> None:
    question = "What is the birth date of the director of Jaws?"
    sink = MemoryTraceSink()
    with server_for("llamacpp-stream", type_then_answer("a date", " Steven Spielberg was born in 1946")) as server:
        async with LLMClient(settings_for(server, "llamacpp-stream")) as llm:
            single = SingleRetrieval(llm, ListRetriever(PASSAGES), sink, stop_fallback="stream")
            answer = await single.answer(asking(question, AskOptions(k=2)))
    assert answer.text == "Steven Spielberg was born in 1946" and len(server.prompts) == 1
    step = sink.documents[answer.trace.trace_id]["steps"][-1]
    assert step["answer_type"] == "text" and step["details"] is None
