"""DeepRAG — Guan et al., "DeepRAG: Thinking to Retrieve Step by Step for Large Language Models"
(arXiv:2502.01142, 2025).

Format::

    Question: …
    Follow up: <sub-query>
    Let's search the question in Wikipedia.
    Context: [1] Title: … Text: … [2] Title: … Text: …
    Intermediate answer: …
    So the final answer is: …

Stopping rule: each step generates the next follow-up; the stop string that ended the generation
decides. ``\\nLet's search`` → retrieve the sub-query (3 passages, the query cut to its last 64
tokens), add the Context line, generate the intermediate answer; ``\\nIntermediate answer:`` →
answer the sub-query from the model alone; ``\\nSo the final answer is:`` → generate the final
answer and stop. No marker (end of sequence, token limit) or the depth limit (6 for HotpotQA-style
questions, 10 otherwise; every step counts) forces the final answer. The markers are anchored on a
line start: the official code's bare ``Let`` stop also fires inside words such as "Lethal".
Modes: ``model`` (the model decides), ``always`` (CoT-Retrieve), ``never`` (CoT).

Repeats: a follow-up the model already asked in this question (after
:func:`~hopsearch.service.strategies.steps.normalise_query`) is not retrieved or answered again —
a small model that asks it again would ask it again and again until the depth limit. The step's
decision is ``repeat`` (``decided_by`` names the depth it repeats; ``model_decision`` and
``model_decided_by`` keep what the model's own stop string decided, e.g. ``retrieve`` by
``stop_reason``), the repeated text is left out of the transcript, and the final answer is generated
from what the first asking found (``AskOptions.repeat_guard``).

Seeded (``AskOptions.seed``; never under the ``never`` policy): the question's own retrieval is written
first as a searched follow-up — ``Follow up: <question>``, the search line, its Context (at least 5
passages) — with its intermediate answer; the model then decides every step as without it, and asking the
question again is a repeat.

The transcript never ends with a newline, so every marker the model writes is preceded by one. With
vLLM the transcript is the assistant turn of a chat (the question is the user turn) continued with
``continue_final_message``, so a DeepRAG checkpoint sees its own chat template; other servers get
plain completions of the transcript.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hopsearch.service.llm import Completion, complete_until, continue_until
from hopsearch.service.requests import AskOptions
from hopsearch.service.strategies.answer_guides import guided_answer
from hopsearch.service.strategies.base import RecordedStrategy, RunContext, citations_of
from hopsearch.service.strategies.steps import context_line, normalise_query, typed_final
from hopsearch.service.text.lang import detect_lang
from hopsearch.service.traces.recorder import Citation, Decision, Step
from hopsearch.service.types import Hit

RETRIEVE = "\nLet's search"
INTERMEDIATE = "\nIntermediate answer:"
FINAL = "\nSo the final answer is:"
STOPS: tuple[str, ...] = (RETRIEVE, INTERMEDIATE, FINAL)
SEARCH_LINE = "Let's search the question in Wikipedia."
FOLLOW_UP = "Follow up:"
PASSAGES = 3
QUERY_TOKENS = 64

#: Worked examples of the format for models not trained on it (``AskOptions.demonstrations``).
DEMONSTRATIONS = """Question: Who was born first, the director of Jaws or the director of Alien?
Follow up: Who directed Jaws?
Let's search the question in Wikipedia.
Context: [1] Title: Jaws (film) Text: Jaws is a 1975 American thriller film directed by Steven Spielberg.
Intermediate answer: Steven Spielberg
Follow up: Who directed Alien?
Intermediate answer: Ridley Scott
Follow up: When were Steven Spielberg and Ridley Scott born?
Let's search the question in Wikipedia.
Context: [1] Title: Ridley Scott Text: Sir Ridley Scott (born 30 November 1937) is an English filmmaker.
Intermediate answer: Ridley Scott was born in 1937, Steven Spielberg in 1946.
So the final answer is: Ridley Scott"""

#: A worked example for a Japanese question: two hops over company documents (what Japanese users index),
#: its question, follow-ups, passages and answers in Japanese, the format's markers (``Follow up:`` …, the
#: stop strings) as they are. With the English example, the local model searched the example's own
#: follow-up ("Who is the director of Jaws?") for a Japanese question.
JA_DEMONSTRATIONS = """Question: 社宅の申し込みを受け付ける部署の室長は誰ですか？
Follow up: 社宅の申し込みを受け付ける部署はどこですか？
Let's search the question in Wikipedia.
Context: [1] Title: 社宅の手引き Text: 社宅の申し込みは、施設管理室が受け付けます。
Intermediate answer: 施設管理室
Follow up: 施設管理室の室長は誰ですか？
Let's search the question in Wikipedia.
Context: [1] Title: 組織図 Text: 施設管理室は総務本部に属し、室長は白石　修です。
Intermediate answer: 白石　修
So the final answer is: 白石　修"""


def demonstrations_for(question: str) -> str:
    """Return the worked example in the question's language: :data:`JA_DEMONSTRATIONS` for a Japanese question
    (:func:`~hopsearch.service.text.lang.detect_lang`), else :data:`DEMONSTRATIONS`."""
    return JA_DEMONSTRATIONS if detect_lang(question) == "ja" else DEMONSTRATIONS


def cut_query(query: str, tokens: int = QUERY_TOKENS) -> str:
    """Return the last ``tokens`` whitespace tokens of the query."""
    return " ".join(query.split()[-tokens:])


def sub_query(generated: str, question: str) -> str:
    """Return the sub-query of the last ``Follow up:`` line; the question where the model wrote none."""
    for line in reversed(generated.splitlines()):
        if line.strip().startswith(FOLLOW_UP):
            found = line.strip()[len(FOLLOW_UP) :].strip()
            if found:
                return found
    return question


def decide(completion: Completion, options: AskOptions, may_retrieve: bool) -> tuple[Decision, str]:
    """Return the decision of a generation step and how it was made."""
    how = completion.stop_method
    if completion.stop == FINAL:
        return "final", how
    if completion.stop == RETRIEVE:
        if options.mode == "never":
            return "parametric", "mode=never"
        return ("retrieve", how) if may_retrieve else ("parametric", "retrieval-budget")
    if completion.stop == INTERMEDIATE:
        if options.mode == "always" and may_retrieve:
            return "retrieve", "mode=always"
        return "parametric", how
    return "final", f"no-marker (finish_reason={completion.finish_reason})"


class DeepRAG(RecordedStrategy):
    """The DeepRAG strategy over any :class:`Retriever` and an OpenAI-compatible server."""

    name = "deeprag"
    # Seeded by default: unseeded it found less evidence than single with hops (first 20 shared 2Wiki
    # questions, hops 1, --few-shot: evidence recall 0.850 vs 0.975; seeded 0.975. README, Multi-hop retrieval).
    seed_default = True

    def seeds(self, options: AskOptions) -> bool:
        """Never the ``never`` policy (the CoT baseline: no retrieval at all)."""
        return options.mode != "never" and super().seeds(options)

    async def _generate(
        self,
        context: RunContext,
        question: str,
        transcript: str,
        stops: Sequence[str],
        chat: bool,
        extra: Mapping[str, Any] | None = None,
    ) -> Completion:
        context.check_llm_budget(1 if len(stops) <= 1 else 2)
        tokens, deadline, fallback = context.options.max_tokens, context.deadline, self.stop_fallback
        if chat:
            messages = [{"role": "user", "content": question}, {"role": "assistant", "content": transcript}]
            return await continue_until(
                self.llm, messages, stops, max_tokens=tokens, deadline=deadline, fallback=fallback, extra=extra
            )
        return await complete_until(
            self.llm, transcript, stops, max_tokens=tokens, deadline=deadline, fallback=fallback, extra=extra
        )

    async def _intermediate_line(
        self, context: RunContext, question: str, transcript: str, chat: bool, depth: int
    ) -> str:
        """Generate the intermediate answer after its marker and return the transcript with it."""
        done = await self._generate(context, question, transcript, ("\n",), chat)
        line = done.text.split("\n", 1)[0].rstrip()
        context.recorder.add(Step.from_completion("answer", done, depth=depth, prompt_chars=len(transcript)))
        return transcript + line

    async def _final_line(
        self,
        context: RunContext,
        question: str,
        transcript: str,
        chat: bool,
        depth: int,
        decided_by: str | None,
        evidence: str,
    ) -> str:
        """Generate the final answer after its marker and return it, typed to the question.

        It is constrained to the question's type where the server allows it (:func:`guided_answer`), then cleaned
        and fitted to it (:func:`typed_final`). ``decided_by`` marks a final answer forced without the model's
        marker (the depth limit, a repeat); ``evidence`` is the passages it comes from (for dates).
        """

        async def generate(extra: Mapping[str, Any]) -> Completion:
            return await self._generate(context, question, transcript, ("\n",), chat, extra)

        done, how = await guided_answer(
            self.llm,
            question,
            generate,
            prompt=None if chat else transcript,
            deadline=context.deadline,
            compare=False,
            evidence=evidence,
            model_types=context.answer_type_model,
        )
        line = done.text.split("\n", 1)[0].rstrip()
        answer, fields = typed_final(question, line.strip(), how)
        decision = "final" if decided_by is not None else None
        step = Step.from_completion(
            "answer",
            done,
            depth=depth,
            prompt_chars=len(transcript),
            decision=decision,
            decided_by=decided_by,
            **fields,
        )
        context.recorder.add(step)
        return answer

    async def _run(self, context: RunContext, question: str) -> tuple[str, Sequence[Citation]]:
        options = context.options
        chat = await self.llm.engine() == "vllm"
        demos = options.demonstrations.strip()
        transcript = (f"{demos}\n\n" if demos else "") + f"Question: {' '.join(question.split())}"
        max_depth = min(options.max_depth, options.budget.max_steps)
        cited: list[Hit] = []
        forced: str | None = None
        asked: dict[str, int] = {}  # normalised follow-up -> the depth it was first asked at
        if context.seeded:  # the question's own retrieval, written as a searched follow-up, and its answer
            follow = " ".join(question.split())
            transcript += f"\n{FOLLOW_UP} {follow}\n{SEARCH_LINE}\n{context_line(context.seeded)}"
            cited.extend(context.seeded)
            asked[normalise_query(follow)] = 0
            transcript = await self._intermediate_line(context, question, transcript + INTERMEDIATE, chat, 0)
        for depth in range(1, max_depth + 1):
            generated = await self._generate(context, question, transcript, STOPS, chat)
            decision, how = decide(generated, options, context.may_retrieve())
            text = generated.text.rstrip("\n")
            query = sub_query(text, question)
            first = asked.get(normalise_query(query)) if decision != "final" and options.repeat_guard else None
            model: dict[str, Any] = {}
            if first is not None:  # the guard overrides; the step keeps what the model decided beside it
                model = {"model_decision": decision, "model_decided_by": how}
                decision, how = "repeat", f"repeat-of-depth-{first}"
            context.recorder.add(
                Step.from_completion(
                    "generate",
                    generated,
                    depth=depth,
                    prompt_chars=len(transcript),
                    decision=decision,
                    decided_by=how,
                    queries=(query,) if decision != "final" else (),
                    **model,
                )
            )
            if decision == "repeat":
                forced = "repeat"
                break
            asked.setdefault(normalise_query(query), depth)
            transcript += text
            if decision == "final":
                break
            if decision == "retrieve":
                hits = await context.retrieve(cut_query(query), depth=depth, k=PASSAGES)
                cited.extend(hits)
                transcript += f"\n{SEARCH_LINE}\n{context_line(hits)}"
            transcript = await self._intermediate_line(context, question, transcript + INTERMEDIATE, chat, depth)
        else:
            forced = "depth-limit"
        final = await self._final_line(
            context,
            question,
            transcript + FINAL,
            chat,
            max_depth,
            decided_by=forced,
            evidence=context_line(cited),  # the passages only: the demonstrations hold dates too
        )
        return final, citations_of(cited)
