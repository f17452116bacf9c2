"""Twenty DualRAG questions about one entity, asked at once through TWO ``hopsearch serve`` processes
(8.19), each learning one distinct fact: all twenty facts are in the stored outline afterwards.

The scripted LLM holds every summary until all twenty questions have asked for theirs, then answers
them together, so the twenty outline saves (ten in each process) race for the same document. Saves
that read, merge and write back unconditionally lose most facts here; conditional writes
(``if_seq_no``/``if_primary_term``, re-read and merge on a 409) keep them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from pathlib import Path

import httpx
from aiohttp import web

from hopsearch.service.outlines.store import EsOutlineStore
from hopsearch.service.store import Store
from tests.api_fixtures import API_KEY
from tests.conftest import EsNode, make_settings
from tests.dual_fixtures import ROLE_MARKERS, entities, reason, role_of
from tests.scripted_llm import ScriptedLLM, ScriptRequest
from tests.service_processes import hopsearch_serve, scripted_service

QUESTIONS = 20
ENTITY = "Mark Robson"
NUMBER = re.compile(r"Question: Which record number (\d+) does Mark Robson hold\?")
SUMMARIZER = dict(ROLE_MARKERS)["summarizer"]
PASSAGES = [
    ("p-robson-1", "Mark Robson", "Mark Robson is an English former footballer who holds many club records."),
    ("p-robson-2", "Mark Robson (footballer)", "Mark Robson played as a winger and later became a coach."),
    ("p-other", "Jaws (film)", "Jaws is a 1975 American thriller film directed by Steven Spielberg."),
]


def question(number: int) -> str:
    return f"Which record number {number} does {ENTITY} hold?"


def fact(number: str | int) -> str:
    return f"{ENTITY} holds record number {number}."


def script(request: ScriptRequest) -> str:
    """Every role answers for the question in its prompt: one retrieval about the entity, one fact."""
    prompt = request.prompt
    found = NUMBER.search(prompt)
    number = found.group(1) if found else "?"
    role = role_of(prompt)
    if role == "reasoner":
        return json.dumps(reason(f"Look up record {number}.", fact(number) not in prompt))
    if role == "identifier":
        return json.dumps(entities((ENTITY, [f"{ENTITY} record {number}"])))
    if role == "summarizer":
        return fact(number)
    return f" record {number}"


class GatedLLM(ScriptedLLM):
    """Holds each summary until ``expected`` summaries have been asked for (or ``wait_s`` passed)."""

    def __init__(self, expected: int, wait_s: float = 45.0) -> None:
        super().__init__(script)
        self.expected = expected
        self.wait_s = wait_s
        self.arrived = 0
        self.gate = asyncio.Event()

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        if SUMMARIZER in str(body["messages"][-1]["content"]):
            self.arrived += 1
            if self.arrived >= self.expected:
                self.gate.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.gate.wait(), self.wait_s)
        return await super()._chat(request)


async def load(store: Store) -> None:
    target = await store.ensure_indices(None)
    actions = [
        {"_index": target, "_id": doc_id, "_source": {"title": t, "text": x, "source": "jsonl", "doc_id": doc_id}}
        for doc_id, t, x in PASSAGES
    ]
    assert await store.bulk(actions) == (len(PASSAGES), [])
    await store.refresh(target)


async def test_twenty_questions_in_two_service_processes_lose_no_fact(es8_node: EsNode, tmp_path: Path) -> None:
    settings = make_settings(es8_node.url)
    store = await Store.connect(settings)
    try:
        await load(store)
        with GatedLLM(QUESTIONS) as llm:
            env = scripted_service(
                es8_node.url,
                settings.index_prefix,
                llm.base_url,
                HOPSEARCH_OUTLINE_MAX_AGE_S="0",  # every question retrieves (no reuse of the others' facts)
                HOPSEARCH_API_MAX_CONCURRENT_ASKS=str(QUESTIONS),
                HOPSEARCH_LLM_MAX_CONCURRENCY=str(QUESTIONS),
            )
            with (
                hopsearch_serve(env, tmp_path / "serve-a.log") as first,
                hopsearch_serve(env, tmp_path / "serve-b.log") as second,
            ):
                urls = [first.url, second.url]
                headers = {"Authorization": f"ApiKey {API_KEY}"}
                async with httpx.AsyncClient(headers=headers, timeout=120) as client:
                    answers = await asyncio.gather(
                        *(
                            client.post(
                                f"{urls[n % 2]}/{settings.passages_alias}/_ask",
                                json={"question": question(n), "strategy": "dualrag"},
                            )
                            for n in range(QUESTIONS)
                        )
                    )
            assert [a.status_code for a in answers] == [200] * QUESTIONS, answers[0].text
            assert [a.json()["answer"] for a in answers] == [f"record {n}" for n in range(QUESTIONS)]
            assert llm.arrived == QUESTIONS and llm.gate.is_set()  # the twenty saves were released together
        outline = await EsOutlineStore(store).get(settings.outline_namespace, ENTITY)
        assert outline is not None
        assert sorted(f.summary for f in outline.facts) == sorted(fact(n) for n in range(QUESTIONS))
        assert sorted(f.question for f in outline.facts) == sorted(question(n) for n in range(QUESTIONS))
    finally:
        await store.client.indices.delete(
            index=f"{settings.index_prefix}-*", allow_no_indices=True, ignore_unavailable=True
        )
        await store.close()
