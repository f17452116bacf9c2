"""Answer types from the question, cleaning of the final answer line, the strict fit to a choice or
yes/no, and "no answer" never graded as an answer (issue 19). Pure functions: no server needed."""

from __future__ import annotations

import pytest

from hopsearch.service.evaluation.metrics import score
from hopsearch.service.strategies.answer_types import (
    NO_ANSWER,
    AnswerShape,
    answer_shape,
    clean_answer,
    match_shape,
    typed_answer,
)

SHAPES = [
    (
        "Who was born first, Ridley Scott or Steven Spielberg?",
        AnswerShape("choice", ("Ridley Scott", "Steven Spielberg")),
    ),
    ("Which film came out first, Jaws or Alien?", AnswerShape("choice", ("Jaws", "Alien"))),
    (
        "Which film has the director who died first, Kiss The Girls or Kilometre Zero?",
        AnswerShape("choice", ("Kiss The Girls", "Kilometre Zero")),
    ),
    ('Which album was released first, "Help!" or "Revolver"?', AnswerShape("choice", ("Help!", "Revolver"))),
    ("Are both Kaleidoscope and Lisa Picard Is Famous from the same country?", AnswerShape("yes_no")),
    ("Is Jaws older than Alien?", AnswerShape("yes_no")),
    ("Did the director of Jaws win an Oscar?", AnswerShape("yes_no")),
    ("When did the director of film Jaws die?", AnswerShape("date")),
    ("What is the date of death of the director of film Song Of The Gringo?", AnswerShape("date")),
    ("What is the date of birth of the director of film Bopha!?", AnswerShape("date")),
    ("What is the place of birth of the director of film The Velvet Hand?", AnswerShape("text")),
    ("What year was Alien released?", AnswerShape("date")),
    ("In which year was the Dutch Republic founded?", AnswerShape("date")),
    ("How many children did Cosimo de' Medici have?", AnswerShape("number")),
    ("Where was the director of film Jaws born?", AnswerShape("text")),
    ("Who is the mother of the director of film Polish-Russian War?", AnswerShape("text")),
    ("What nationality is the director of Alien?", AnswerShape("text")),
    ("「ジョーズ」と「エイリアン」のどちらが先に公開されましたか？", AnswerShape("choice", ("ジョーズ", "エイリアン"))),
    ("ジョーズとエイリアンのどちらが先に公開されましたか？", AnswerShape("choice", ("ジョーズ", "エイリアン"))),
    ("織田信長と豊臣秀吉は同じ国の出身ですか？", AnswerShape("yes_no")),
    ("織田信長はいつ生まれましたか？", AnswerShape("date")),
    ("織田信長には何人の子供がいましたか？", AnswerShape("number")),
    ("織田信長の父親は誰ですか？", AnswerShape("text")),
    # tests/data/ja_questions.jsonl: a count of days is a number, two asks or どんな are free text.
    ("冬の在宅勤務は週何日までできますか？", AnswerShape("number")),
    ("共有リンクの有効期限は最長何日ですか？", AnswerShape("number")),
    ("この会議は何月何日に開かれましたか？", AnswerShape("date")),
    ("何年に設立されましたか？", AnswerShape("date")),
    ("何年間勤めましたか？", AnswerShape("number")),
    ("ロボットの最大積載量は何キログラムですか？", AnswerShape("number")),
    ("検品カメラは何台で、その保証期間はどれくらいですか？", AnswerShape("text")),
    ("有効期限は最長何日で、そのシステムの運用責任者は誰ですか", AnswerShape("text")),
    ("品質会議では、ミエルについてどんな問題が報告されましたか？", AnswerShape("text")),
]


@pytest.mark.parametrize(("question", "shape"), SHAPES)
def test_answer_shape(question: str, shape: AnswerShape) -> None:
    assert answer_shape(question) == shape


Q = "When did the Dutch Republic become a republic?"
CLEANED = [
    ("1581", "1581"),
    ("1. Ridley Scott", "Ridley Scott"),  # list numbering
    ("2) Ridley Scott", "Ridley Scott"),
    ("- Ridley Scott", "Ridley Scott"),
    ('"Ridley Scott"', "Ridley Scott"),  # quotes
    ("“Ridley Scott”", "Ridley Scott"),
    ("**1581**", "1581"),
    ("「織田信長」", "織田信長"),
    ("[2] Title: Jaws (film) Text: Jaws is a 1975 film", "Jaws (film)"),  # a copied passage: its title
    ("Context: [1] Title: Alien", "Alien"),
    ("Passages about actor: [1] William Henry (actor): William Albert Henry was an American", "William Henry (actor)"),
    ("Passages about Paula Rego: [1] The Secret of the Red Book: The Sign", "The Secret of the Red Book"),
    ("[3] Marija (film): Marija is a 2016 film", "Marija (film)"),  # DualRAG's passage lines
    ("Passages about Jaws:", NO_ANSWER),  # the header alone
    ("Marija: a 2016 film", "Marija: a 2016 film"),  # a colon alone is not a copied passage
    ("Answer: 1581", "1581"),
    ("So the final answer is: 1581", "1581"),
    ("need_retrieve 1581", "1581"),  # DeepRAG markers
    ("1. need_retrieve", NO_ANSWER),
    ("(yes or no)", NO_ANSWER),
    ("Follow up: Who founded the Dutch Republic?", NO_ANSWER),
    (Q, NO_ANSWER),  # the question copied back
    ("When did the Dutch Republic become a republic", NO_ANSWER),  # … even without its question mark
    ("Answer the question using the context. Reply with a short answer only.", NO_ANSWER),  # echoed instruction
    ("Question: When did it happen", NO_ANSWER),
    ("...", NO_ANSWER),
    ("I do not know.", NO_ANSWER),  # the model says it does not know
    ("(no)", NO_ANSWER),  # fillers in place of an answer
    ("(none)", NO_ANSWER),
    ("N/A", NO_ANSWER),
    ("(unknown)", NO_ANSWER),
    ("(None yet)", NO_ANSWER),
    ("None of the above", "None of the above"),  # … but an answer that starts like one is kept
    ("(1987)", "(1987)"),
    ("The context does not mention it", NO_ANSWER),
    ("分かりません。", NO_ANSWER),
    ("Unknown Pleasures", "Unknown Pleasures"),  # … but a title that starts like it is an answer
    ("I Can't Get No Satisfaction", "I Can't Get No Satisfaction"),
    ("", ""),  # the model wrote nothing: stays empty, as the CLI and API report it
    ("12", "12"),  # a number is not list numbering
]


@pytest.mark.parametrize(("raw", "expected"), CLEANED)
def test_clean_answer(raw: str, expected: str) -> None:
    assert clean_answer(raw, Q) == expected


CHOICE_Q = "Which film came out first, Jaws or Alien?"
CHOICES = [
    ("Jaws", "Jaws"),
    ("Jaws was released first.", "Jaws"),
    ("The film Alien.", "Alien"),
    ("Jaws or Alien", "Jaws or Alien"),  # names both: strict, so left as it is
    ("Steven Spielberg", "Steven Spielberg"),  # names neither: left as it is
    (NO_ANSWER, NO_ANSWER),
]


@pytest.mark.parametrize(("answer", "expected"), CHOICES)
def test_match_choice(answer: str, expected: str) -> None:
    assert match_shape(answer, answer_shape(CHOICE_Q), CHOICE_Q) == expected


def test_match_choice_part_of_one_candidate() -> None:
    question = "Which film has the director who died first, Kiss The Girls or Kilometre Zero?"
    assert match_shape("Kilometre", answer_shape(question), question) == "Kilometre Zero"


YES_NO_Q = "Are both Kaleidoscope and Lisa Picard Is Famous from the same country?"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [("Yes, they are.", "yes"), ("No", "no"), ("no.", "no"), ("Norway", "Norway"), ("None of them", "None of them")],
)
def test_match_yes_no(answer: str, expected: str) -> None:
    assert match_shape(answer, answer_shape(YES_NO_Q), YES_NO_Q) == expected


def test_japanese_yes_no_and_choice() -> None:
    yes_no = "織田信長と豊臣秀吉は同じ国の出身ですか？"
    assert typed_answer("はい、同じです。", yes_no)[0] == "はい"
    assert typed_answer("いいえ", yes_no)[0] == "いいえ"
    choice = "「ジョーズ」と「エイリアン」のどちらが先に公開されましたか？"
    assert typed_answer("「ジョーズ」です", choice)[0] == "ジョーズ"


def test_typed_answer_cleans_then_fits() -> None:
    assert typed_answer('1. "Jaws"', CHOICE_Q) == ("Jaws", AnswerShape("choice", ("Jaws", "Alien")))
    assert typed_answer("(yes or no)", YES_NO_Q) == (NO_ANSWER, AnswerShape("yes_no"))


def test_no_answer_is_not_graded_as_one() -> None:
    # "no answer" contains the gold "no": without the rule Acc would count it right
    assert score(NO_ANSWER, ["no"]) == score(None, ["no"])
    assert score(NO_ANSWER, ["no"]).acc == 0.0
    assert score("no", ["no"]).em == 1.0


def test_a_japanese_question_has_no_answer_in_japanese_never_graded() -> None:
    question = "かざぐるまプロジェクトの責任者は誰ですか？"
    for reply in ("分かりません。", "(no)", "質問: かざぐるまプロジェクトの責任者は誰ですか？", "回答なし"):
        assert typed_answer(reply, question)[0] == "回答なし", reply
    assert typed_answer("(no)", "Who leads the project?")[0] == NO_ANSWER
    assert score("回答なし", ["回答"]) == score(None, ["回答"])
