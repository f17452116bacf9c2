"""The kind of answer a question asks for, and the final answer cleaned and fitted to it (issue 19).

:func:`answer_shape` reads the question by rules (2WikiMultihopQA's shapes, and the Japanese ones):

- ``choice``: a comparison that names its candidates — "Who was born first, A or B?", "Which film came
  out first, X or Y?", 「AとBのどちらが…」;
- ``yes_no``: "Are both … / Is … / Did …?", a Japanese question ending in か with no question word;
- ``date``: "When …", "What year …", "What is the date of death of …", いつ / 何年;
- ``number``: "How many …", いくつ / 何人;
- ``text`` otherwise (an entity, a place, a person).

:func:`clean_answer` takes the answer line a strategy generated and removes what is not the answer:
list numbering, quotes, a copied ``[2] Title: … Text:`` or ``Context:`` prefix (or DualRAG's
``Passages about …: [1] <title>: …``), DeepRAG markers (``need_retrieve``, ``(yes or no)``,
``Follow up:``…). A reply that is still not an answer (empty, an echoed instruction, the question or
another question copied back) becomes :data:`NO_ANSWER` (「回答なし」 for a Japanese question:
:func:`no_answer`), which the metrics never grade as an answer.
For ``choice`` and ``yes_no`` a strict match then maps the reply onto the one candidate (or yes / no,
はい / いいえ) it names; a reply that names none or several is kept as cleaned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from hopsearch.service.text.lang import detect_lang

AnswerType = Literal["choice", "yes_no", "date", "number", "text"]

#: The answer recorded when the model's reply is not an answer; never graded as one.
NO_ANSWER = "no answer"
#: The same for a Japanese question (the answer is in the question's language, this one too).
JA_NO_ANSWER = "回答なし"
#: Every form of it (what the metrics and the strategies test for).
NO_ANSWERS = frozenset({NO_ANSWER, JA_NO_ANSWER})


def no_answer(question: str) -> str:
    """:data:`NO_ANSWER` in the question's language."""
    return JA_NO_ANSWER if detect_lang(question) == "ja" else NO_ANSWER


_WH = r"(?:who|whom|whose|which|what|where)"
#: "Who was born first, A or B?" — head without a comma, then the two candidates.
_CHOICE = re.compile(rf"^\s*{_WH}\b[^,:;]*[,:;]\s*(?P<a>.+?)\s+or\s+(?P<b>.+?)\s*[?？.]*\s*$", re.IGNORECASE)
_YES_NO = re.compile(
    r"^\s*(?:are|is|was|were|did|do|does|has|have|had|can|could|will|would|should|shall|may|might)\b",
    re.IGNORECASE,
)
_DATE = re.compile(
    r"^\s*(?:when\b|(?:in\s+)?(?:what|which)\s+(?:year|date|month|day|decade|century)\b"
    r"|what\s+(?:is|was)\s+the\s+(?:date|year)\s+of\b)",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"^\s*how\s+(?:many|much|old|long)\b", re.IGNORECASE)

_QUOTED = r"「(?P<{0}q>[^」]+)」|『(?P<{0}w>[^』]+)』|(?P<{0}p>[^\s、。,，「」『』]+?)"
_JA_CHOICE = re.compile(
    rf"(?:{_QUOTED.format('a')})\s*と\s*(?:{_QUOTED.format('b')})\s*(?:の|では|で|は|、)?\s*(?:どちら|どっち)"
)
#: What a Japanese question asks for, one match per ask: 何年何月何日 is one; 何 alone (何ですか) is one.
_JA_QUESTION_WORD = re.compile(
    r"(?:何(?:年|月|日)(?!間|分|まで|前|後))+|何|誰|だれ|いつ|どこ|どちら|どっち|どの|どれ|どう|どんな|なぜ|いくつ|いくら"
)
#: いつ, 何年, 何月何日, 何日に — not 週何日, 何日間, 最長何日 (a count of days).
_JA_DATE = re.compile(r"いつ|何年(?!間|分|前|後)|何月(?!分)|(?<![週間長短])何日(?=に|付)|何世紀|生年月日")
_JA_NUMBER = re.compile(
    r"いくつ|いくら|何(?:人|名|歳|本|回|個|冊|曲|件|つ|台|枚|社|店|円|か国|カ国|ヶ国|作品|度|日|週|か月|カ月|ヶ月"
    r"|年間|時間|分|秒|キロ|グラム|メートル|リットル|トン|パーセント|％|割|倍)"
)
_JA_YES_NO_END = re.compile(r"(?:か|の)\s*[?？]?\s*$")


@dataclass(frozen=True, slots=True)
class AnswerShape:
    """What a question asks for: its type and, for ``choice``, the named candidates in order."""

    type: AnswerType
    candidates: tuple[str, ...] = field(default=())

    def to_details(self) -> dict[str, Any]:
        body: dict[str, Any] = {"answer_type": self.type}
        if self.candidates:
            body["candidates"] = list(self.candidates)
        return body


def _strip_candidate(text: str) -> str:
    return text.strip().strip("\"'“”‘’「」『』").strip()


def answer_shape(question: str) -> AnswerShape:
    """Return the answer type of ``question`` by rules (English and Japanese)."""
    text = " ".join(question.split())
    if detect_lang(text) == "ja":
        return _japanese_shape(text)
    found = _CHOICE.match(text)
    if found:
        a, b = _strip_candidate(found["a"]), _strip_candidate(found["b"])
        if a and b and a.casefold() != b.casefold():
            return AnswerShape("choice", (a, b))
    if _YES_NO.match(text):
        return AnswerShape("yes_no")
    if _DATE.match(text):
        return AnswerShape("date")
    if _NUMBER.match(text):
        return AnswerShape("number")
    return AnswerShape("text")


def _japanese_shape(text: str) -> AnswerShape:
    found = _JA_CHOICE.search(text)
    if found:
        a = found["aq"] or found["aw"] or found["ap"] or ""
        b = found["bq"] or found["bw"] or found["bp"] or ""
        a, b = _strip_candidate(a), _strip_candidate(b)
        if a and b and a != b:
            return AnswerShape("choice", (a, b))
    if len(_JA_QUESTION_WORD.findall(text)) > 1:  # two asks (何台で、…どれくらい): a free-text answer
        return AnswerShape("text")
    if _JA_DATE.search(text):
        return AnswerShape("date")
    if _JA_NUMBER.search(text):
        return AnswerShape("number")
    if not _JA_QUESTION_WORD.search(text) and _JA_YES_NO_END.search(text):
        return AnswerShape("yes_no")
    return AnswerShape("text")


# --- cleaning ---------------------------------------------------------------------------------------

_NUMBERING = re.compile(r"^\s*(?:\(?\d{1,2}[.)]|[-*•・])\s+")
_PASSAGE_NUMBER = re.compile(r"^\s*\[\d{1,3}\]\s*")
_PREFIXES = re.compile(
    r"^\s*(?:context|answer|final answer|short answer|intermediate answer|so the final answer is|"
    r"the answer is|follow up|a)\s*[:：]\s*",
    re.IGNORECASE,
)
_TITLE_TEXT = re.compile(r"^\s*title\s*:\s*(?P<title>.*?)\s+text\s*:", re.IGNORECASE)
#: DualRAG's summarizer prompt, copied: its "Passages about <entity>:" header, then "[1] <title>: <text>".
_PASSAGES_HEADER = re.compile(r"^\s*passages about [^:\n]{1,200}:\s*", re.IGNORECASE)
_NUMBERED_PASSAGE = re.compile(r"^\s*\[\d{1,3}\]\s*(?P<title>[^:\[\]]{1,200}?):\s+\S")
_TITLE = re.compile(r"^\s*title\s*:\s*", re.IGNORECASE)
_MARKERS = re.compile(
    r"\(\s*yes\s+or\s+no\s*\)|\bno[_ ]need[_ ]retrieve\b|\bneed[_ ]retrieve\b"
    r"|let's search the question in wikipedia\.?",
    re.IGNORECASE,
)
_QUOTES = (('"', '"'), ("'", "'"), ("“", "”"), ("‘", "’"), ("「", "」"), ("『", "』"), ("**", "**"), ("*", "*"))
#: Replies that repeat the prompt instead of answering it.
_ECHOES = re.compile(
    r"^\s*(?:answer the question|question\s*[:：]|reply with|use the context|the question is in japanese)",
    re.IGNORECASE,
)
#: A reply saying the model does not know (whole reply): not an answer, so two of them never compare equal.
_UNKNOWN = re.compile(
    r"^\s*(?:i\s+(?:do\s*n[o']t|cannot|can'?t)\s+(?:know|say|tell|answer)(?:\s+[\w']+){0,6}|unknown"
    r"|not\s+(?:known|mentioned|stated|given)|no\s+information(?:\s+[\w']+){0,6}"
    r"|(?:the\s+)?(?:context|passages?|text)\s+(?:does|do)\s*n[o']t\s+(?:say|mention|state)(?:\s+[\w']+){0,6})"
    r"\s*[.!]?\s*$|^\s*(?:不明|わかりません|分かりません|わからない|分からない|回答なし)[。.]?\s*$",
    re.IGNORECASE,
)
#: A filler in place of an answer (whole reply): "(no)", "(none)", "N/A", "(unknown)" — the prompts' own
#: "(none yet)" and "(yes or no)" copied, or an empty slot marked. Not an answer, like "I do not know".
_FILLER = re.compile(
    r"^\s*(?:\(\s*(?:no|none|none yet|nothing|nothing known yet|unknown|n\s*/\s*a|no answer|not known|empty|blank)"
    r"\s*[.!]?\s*\)|n\s*/\s*a|none)\s*[.!]?\s*$",
    re.IGNORECASE,
)
_WORD = re.compile(r"\w+")
_YES = re.compile(r"^\s*(?:yes|yeah|true|correct)\b|^\s*(?:はい|そうです)", re.IGNORECASE)
_NO = re.compile(r"^\s*(?:no|false|incorrect)\b|^\s*(?:いいえ|違います|ちがいます)", re.IGNORECASE)


def _unquote(text: str) -> str:
    for left, right in _QUOTES:
        if len(text) > len(left) + len(right) and text.startswith(left) and text.endswith(right):
            return text[len(left) : -len(right)].strip()
    return text


def _strip_once(text: str) -> str:
    text = _NUMBERING.sub("", text)
    text = _PASSAGES_HEADER.sub("", text)
    numbered = _NUMBERED_PASSAGE.match(text)
    if numbered and not _TITLE.match(text[numbered.start("title") :]):  # a copied "[1] <title>: <text>"
        return _unquote(numbered["title"].strip())
    text = _PASSAGE_NUMBER.sub("", text)
    text = _PREFIXES.sub("", text)
    text = " ".join(_MARKERS.sub(" ", text).split())
    titled = _TITLE_TEXT.match(text)
    if titled:  # a copied passage: its title is the entity it is about
        text = titled["title"]
    text = _TITLE.sub("", text)
    return _unquote(text.strip())


def _words(text: str) -> str:
    return " ".join(_WORD.findall(text.casefold()))


def is_answer(text: str, question: str) -> bool:
    """Tell whether ``text`` is an answer: False for nothing with a letter or digit, an echoed instruction, a reply
    saying the model does not know, a filler ("(no)", "N/A"), the question copied back, or any other question."""
    if not any(char.isalnum() for char in text):
        return False
    if _ECHOES.match(text) or _UNKNOWN.match(text) or _FILLER.match(text) or text.rstrip().endswith(("?", "？")):
        return False
    return _words(text) != _words(question)


def clean_answer(raw: str, question: str) -> str:
    """``raw`` without numbering, quotes, copied prefixes and markers; :data:`NO_ANSWER` (in the question's
    language: :func:`no_answer`) when what is left is not an answer (:func:`is_answer`). An empty reply
    stays "" (the model wrote nothing: the CLI and API say so)."""
    text = " ".join(raw.split())
    if not text:
        return ""
    for _ in range(5):  # prefixes can nest ("1. Answer: [2] Title: …"); a few rounds reach the answer
        stripped = _strip_once(text)
        if stripped == text:
            break
        text = stripped
    text = text.strip(" ,;:")
    return text if is_answer(text, question) else no_answer(question)


def says_yes_or_no(answer: str) -> bool:
    """Whether a reply starts with yes or no (はい / いいえ): no answer to a question that asks for a thing."""
    return bool(_YES.match(answer) or _NO.match(answer))


def match_shape(answer: str, shape: AnswerShape, question: str) -> str:
    """Return a cleaned answer fitted to ``shape``: for ``choice`` the one candidate it names (a reply naming both or
    neither is kept); for ``yes_no`` yes / no (はい / いいえ for a Japanese question) when the reply starts with one;
    other types unchanged."""
    if answer in NO_ANSWERS or not answer:
        return answer
    if shape.type == "choice":
        said = f" {_words(answer)} "
        named = [c for c in shape.candidates if _words(c) and f" {_words(c)} " in said]
        if len(named) == 1:
            return named[0]
        inside = [c for c in shape.candidates if _words(answer) and f" {_words(answer)} " in f" {_words(c)} "]
        return inside[0] if len(inside) == 1 and len(named) == 0 else answer
    if shape.type == "yes_no":
        japanese = detect_lang(question) == "ja"
        if _YES.match(answer):
            return "はい" if japanese else "yes"
        if _NO.match(answer):
            return "いいえ" if japanese else "no"
    return answer


def typed_answer(raw: str, question: str, shape: AnswerShape | None = None) -> tuple[str, AnswerShape]:
    """Return the final answer a strategy returns: ``raw`` cleaned and fitted to the question's shape (by the rules
    unless ``shape`` is given)."""
    shape = shape or answer_shape(question)
    return match_shape(clean_answer(raw, question), shape, question), shape
