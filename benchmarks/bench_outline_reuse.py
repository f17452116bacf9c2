"""Outline reuse across two principals on the 2Wiki questions: how much of what one principal's DualRAG
questions learnt another may reuse, when both may read everything and when one may read half.

    .venv/bin/python benchmarks/bench_outline_reuse.py [PATH] [--es-url http://127.0.0.1:9218] [-n 100]

PATH is a 2WikiMultihopQA JSONL (``question``, ``context``: ``[title, sentences]``; default: the
repository's sample). Its context paragraphs are the passages (one per title). Principal A
(``group:a``, ``public``) asks every question with DualRAG and a scripted LLM (the identifier names the
context titles the question mentions, the summarizer states the first passage); then principal B
(``public``) asks them all again. Two corpora: **all** (every passage ``public``: both read everything)
**half-passages** (every other title's passage ``group:a``: B reads half, scattered through every
question) and **half-questions** (the context passages of every other question ``group:a``, as a
department's documents would be; a passage shared with a public question stays public).

Printed per corpus: ``stored`` (A's fresh facts of the questions' entities, which today's code reuses
for anyone: every one), ``usable_by_b`` (those B may use now, the lineage check), ``share``
(usable / stored; with both reading all it must be 1.0: today's), then B's own run: ``reused`` and
``summarised`` facts and ``reuse_share`` = reused / (reused + summarised), and ``leaks``: facts B
reused whose lineage holds a passage B may not read (must be 0). ``today_exposed``: the stored facts
derived from a passage B may not read, which today's code (reusing every fresh fact) would give B.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the scripted LLM server lives with the tests

from hopsearch.loaders.api import load_jsonl  # noqa: E402
from hopsearch.loaders.model import LoadOptions  # noqa: E402
from hopsearch.service.access import ADMIN, Caller  # noqa: E402
from hopsearch.service.app import usecases  # noqa: E402
from hopsearch.service.app.runtime import Runtime  # noqa: E402
from hopsearch.service.outlines.lineage import OutlineReader, split_source  # noqa: E402
from hopsearch.service.outlines.store import EsOutlineStore  # noqa: E402
from tests.dual_fixtures import entities, reason, role_of  # noqa: E402
from tests.llm_fixtures import server_for, settings_for  # noqa: E402
from tests.scripted_llm import ScriptRequest  # noqa: E402

DEFAULT = ROOT / "loaders" / "data" / "sample_2wiki.jsonl"
A = Caller.of(["group:a", "public"], subject="a", key="key-a")
B = Caller.of(["public"], subject="b", key="key-b")
_TITLE = re.compile(r"Passages about (.+?):\n")


def pid(title: str) -> str:
    return hashlib.sha1(title.encode()).hexdigest()[:16]


def read(path: Path, n: int) -> tuple[list[dict[str, Any]], dict[str, tuple[str, str]]]:
    """The questions (with the entities each names) and the passages by title (id, text)."""
    questions: list[dict[str, Any]] = []
    passages: dict[str, tuple[str, str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines()[:n]:
        row = json.loads(line)
        titles = [str(title) for title, _ in row["context"]]
        for title, sentences in row["context"]:
            passages.setdefault(str(title), (pid(str(title)), " ".join(sentences)))
        named = [t for t in titles if t.casefold() in row["question"].casefold()] or titles[:2]
        questions.append({"question": row["question"], "entities": named[:3], "titles": titles})
    return questions, passages


def derived(lineage: tuple[str, ...] | None) -> set[str]:
    """The passage ids of a lineage."""
    return {split_source(e)[1] for e in lineage or ()}


def script(questions: list[dict[str, Any]], passages: dict[str, tuple[str, str]]) -> Any:
    wanted = {q["question"]: q["entities"] for q in questions}

    def answer(request: ScriptRequest) -> str:
        prompt = request.prompt
        role = role_of(prompt)
        question = next((q for q in wanted if q in prompt), "")
        names = wanted.get(question, [])
        outline = prompt.split("Knowledge outline", 1)[-1]
        if role == "reasoner":
            missing = [e for e in names if f"## {e}" not in outline]
            return json.dumps(reason("Look it up." if missing else "I can answer now.", bool(missing)))
        if role == "identifier":
            return json.dumps(entities(*((e, [e]) for e in names)))
        if role == "summarizer":
            match = _TITLE.search(prompt)
            title = match.group(1) if match else ""
            text = passages.get(title, ("", ""))[1]
            return f"{title}: {text[:160]}" if text else "None"
        return "unknown"

    return answer


async def scenario(
    url: str, questions: list[dict[str, Any]], passages: dict[str, tuple[str, str]], corpus: str
) -> dict[str, Any]:
    restricted: set[str] = set()
    if corpus == "half-passages":
        restricted = {p for n, (_, (p, _)) in enumerate(sorted(passages.items())) if n % 2}
    elif corpus == "half-questions":
        public = {pid(t) for q in questions[::2] for t in q["titles"]}
        restricted = {pid(t) for q in questions[1::2] for t in q["titles"]} - public
    rows = [
        {"_id": p, "title": title, "text": text, "acl": "group:a" if p in restricted else "public"}
        for title, (p, text) in passages.items()
    ]
    with server_for("vllm", script(questions, passages)) as llm, tempfile.TemporaryDirectory() as tmp:
        prefix = f"bench-reuse-{uuid.uuid4().hex[:8]}"
        settings = settings_for(
            llm, "vllm", es_url=[url], index_prefix=prefix, embedder="none", outline_max_age_s=86400, llm_retries=1
        )
        async with await Runtime.open(settings) as runtime:
            try:
                path = Path(tmp) / "passages.jsonl"
                path.write_text("".join(json.dumps(r) + "\n" for r in rows))
                report = await load_jsonl(runtime.store, path, LoadOptions(batch_size=500))
                assert report.reconciled, report
                started = time.perf_counter()
                await asyncio.gather(*(ask(runtime, A, q["question"]) for q in questions))
                a_s = time.perf_counter() - started
                outlines = EsOutlineStore(runtime.store)
                names = sorted({e for q in questions for e in q["entities"]})
                stored = usable = exposed = 0
                for name in names:
                    every = await outlines.lookup(settings.outline_namespace, [name], OutlineReader(ADMIN))
                    mine = await outlines.lookup(
                        settings.outline_namespace, [name], OutlineReader(B, settings.acl_default)
                    )
                    stored += sum(len(o.facts) for o in every[:1])
                    exposed += sum(1 for o in every[:1] for f in o.facts if derived(f.lineage) & restricted)
                    usable += sum(len(o.facts) for o in mine[:1])
                reused = summarised = leaks = 0
                for answer in await asyncio.gather(*(ask(runtime, B, q["question"]) for q in questions)):
                    for step in answer.trace.steps:
                        if step.kind == "outline_reuse":
                            reused += len((step.details or {}).get("facts", []))
                        elif step.kind == "summarize" and not (step.details or {}).get("dropped"):
                            summarised += 1
                    leaks += sum(
                        1 for h in answer.trace.to_document().get("citations", []) if h.get("id") in restricted
                    )
                facts_b = await outlines.lookup(
                    settings.outline_namespace, names, OutlineReader(B, settings.acl_default)
                )
                leaks += sum(
                    1
                    for o in facts_b
                    for f in o.facts
                    if any(split_source(e)[1] in restricted for e in f.lineage or ())
                )
            finally:
                await runtime.store.client.indices.delete(
                    index=f"{prefix}-*", allow_no_indices=True, ignore_unavailable=True
                )
    return {
        "corpus": corpus,
        "questions": len(questions),
        "passages": len(rows),
        "restricted": len(restricted),
        "stored": stored,
        "usable_by_b": usable,
        "today_exposed": exposed,
        "share": round(usable / stored, 3) if stored else None,
        "reused": reused,
        "summarised": summarised,
        "reuse_share": round(reused / (reused + summarised), 3) if reused + summarised else None,
        "leaks": leaks,
        "a_seconds": round(a_s, 1),
    }


async def ask(runtime: Runtime, caller: Caller, question: str) -> Any:
    request = await usecases.ask_request(runtime, question, caller=caller, strategy="dualrag")
    answer = await usecases.ask(runtime, request)
    if answer.error is not None:
        raise SystemExit(f"{question!r}: {answer.error}")
    return answer


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--es-url", default="http://127.0.0.1:9218")
    parser.add_argument("-n", type=int, default=100, help="questions")
    args = parser.parse_args()
    questions, passages = read(args.path, args.n)
    for corpus in ("all", "half-passages", "half-questions"):
        print(json.dumps(await scenario(args.es_url, questions, passages, corpus)), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
