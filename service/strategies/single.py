"""Single retrieval — the standard retrieve-then-read baseline (Lewis et al., "Retrieval-Augmented
Generation for Knowledge-Intensive NLP Tasks", NeurIPS 2020; the "single-step" baseline of DeepRAG).

Stopping rule: none to decide — one retrieval of the top k passages for the question, one answer
generation that stops at the end of the answer line (constrained to the question's answer type where
the server allows it: :mod:`~hopsearch.service.strategies.answer_guides`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hopsearch.service.llm import Completion, complete_until
from hopsearch.service.requests import AskOptions
from hopsearch.service.strategies.answer_guides import guided_answer
from hopsearch.service.strategies.base import RecordedStrategy, RunContext, citations_of
from hopsearch.service.strategies.steps import context_line, single_prompt, typed_final
from hopsearch.service.traces.recorder import Citation, Step


class SingleRetrieval(RecordedStrategy):
    """Retrieve top k for the question, answer once."""

    name = "single"

    def seeds(self, options: AskOptions) -> bool:
        """Never: its one retrieval is the question's own (what a seed would be)."""
        return False

    async def _run(self, context: RunContext, question: str) -> tuple[str, Sequence[Citation]]:
        hits = await context.retrieve(question, depth=1)
        prompt = single_prompt(question, context_line(hits))
        context.check_llm_budget()

        async def generate(extra: Mapping[str, Any]) -> Completion:
            return await complete_until(
                self.llm,
                prompt,
                ("\n",),
                max_tokens=context.options.max_tokens,
                deadline=context.deadline,
                fallback=self.stop_fallback,
                extra=extra,
            )

        typed = context.answer_type_model
        done, how = await guided_answer(
            self.llm, question, generate, prompt=prompt, deadline=context.deadline, model_types=typed
        )
        answer, fields = typed_final(question, done.text.split("\n", 1)[0].strip(), how)
        context.recorder.add(
            Step.from_completion(
                "answer", done, depth=1, prompt_chars=len(prompt), decision="final", decided_by="single", **fields
            )
        )
        return answer, citations_of(hits)
