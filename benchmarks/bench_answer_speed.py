"""DeepRAG answer speed on the real local model: before (the old settings) and after, in one run.

    .venv/bin/python benchmarks/bench_answer_speed.py --es-url http://127.0.0.1:9200 [--limit 20]

Answers the first ``--limit`` questions of the shared 2WikiMultihopQA sample with DeepRAG and the
worked examples (``eval --few-shot``), their context paragraphs indexed as the corpus (``eval
--corpus-from-context``, BM25, under a fresh index prefix deleted at the end), twice per question,
interleaved (the order alternates per question) so both see the same load on a shared machine:

- **before**: the llama.cpp server as ``llm up`` started it before (all-token logits), the
  ``followup`` stop fallback (a second request per generation step), no repeat guard;
- **after**: ``llm up``'s server command now (:func:`hopsearch.cli.local.llm_server.server_command`),
  the ``stream`` stop fallback (the default) and the repeat guard (the default).

Each side has its own ``llama_cpp.server`` (Gemma 3 270M Q4_K_M, one slot, started here on free ports
with ``--verbose true`` and stopped at the end). Prompt tokens evaluated per question are read from
the server's log: llama-cpp-python prints, per request, ``N prefix-match hit, remaining M prompt tokens
to eval`` (M evaluated) or ``full prompt already cached`` (0). Printed per question: wall time, LLM
requests, prompt tokens evaluated, and whether the per-step decisions are the same (up to the step
where the guard fired, which ends the question early).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hopsearch.cli.local.llm_server import server_command  # noqa: E402
from hopsearch.loaders.api import ensure_qa_contexts  # noqa: E402
from hopsearch.loaders.questions import QARecord, read_questions  # noqa: E402
from hopsearch.service.access import ADMIN, Scope  # noqa: E402
from hopsearch.service.app.runtime import Runtime  # noqa: E402
from hopsearch.service.config.settings import Settings, load_settings  # noqa: E402
from hopsearch.service.evaluation.metrics import score  # noqa: E402
from hopsearch.service.requests import AskRequest  # noqa: E402
from hopsearch.service.strategies import AskOptions, depth_for  # noqa: E402
from hopsearch.service.strategies.deeprag import DEMONSTRATIONS  # noqa: E402

SAMPLE = ROOT.parent / "shared" / "data" / "2wiki_dev100.jsonl"
_PREFIX_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
_CACHED = "Llama.generate: full prompt already cached"
#: The flag ``llm up`` gained with this change (only the last token's logits); the old command lacked it.
NEW_FLAGS = ("--logits_all",)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def without(command: list[str], flags: tuple[str, ...]) -> list[str]:
    """``command`` less each ``--flag value`` pair named in ``flags``."""
    out: list[str] = []
    skip = False
    for index, part in enumerate(command):
        if skip:
            skip = False
            continue
        if part in flags and index + 1 < len(command):
            skip = True
            continue
        out.append(part)
    return out


@dataclass
class Server:
    name: str
    command: list[str]
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 300.0) -> None:
        with self.log.open("wb") as sink:
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            self.process = subprocess.Popen(
                self.command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, env=env
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} server exited:\n{self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} server did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)

    def memory_kb(self) -> tuple[int, int] | None:
        """(resident, peak resident) in kB from ``/proc``; None once the process is gone."""
        if self.process is None or self.process.poll() is not None:
            return None
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return None
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])

    def offset(self) -> int:
        return self.log.stat().st_size

    def evaluated_since(self, offset: int) -> tuple[int, int]:
        """(prompt tokens evaluated, requests) in the log written after ``offset``."""
        with self.log.open("rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace")
        hits = [int(m.group(2)) for m in _PREFIX_HIT.finditer(text)]
        cached = text.count(_CACHED)
        return sum(hits), len(hits) + cached


@dataclass
class Side:
    name: str
    server: Server
    settings: Settings
    options: AskOptions
    runtime: Runtime | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)


async def answer(side: Side, record: QARecord) -> dict[str, Any]:
    assert side.runtime is not None
    offset = side.server.offset()
    started = time.monotonic()
    request = AskRequest(record.question, Scope(side.settings.passages_alias, ADMIN), options=side.options)
    result = await side.runtime.strategy("deeprag").answer(request)
    wall = time.monotonic() - started
    await asyncio.sleep(0.3)  # let the server's log lines land
    memory = side.server.memory_kb()
    evaluated, logged = side.server.evaluated_since(offset)
    totals = result.trace.totals()
    steps = [s for s in result.trace.steps if s.kind == "generate"]
    row = {
        "id": record.id,
        "wall_s": round(wall, 2),
        "llm_calls": int(totals["llm_calls"]),
        "logged_requests": logged,
        "prompt_tokens_evaluated": evaluated,
        "retrievals": int(totals["retrievals"]),
        "decisions": [s.decision for s in steps],
        "decided_by": [s.decided_by for s in steps],
        "generated": [s.output for s in steps],
        "answer": result.text,
        "em": score(result.text, record.answers).em,
        "error": str(result.error) if result.error else None,
        "server_rss_mb": round(memory[0] / 1024) if memory else None,
        "server_peak_rss_mb": round(memory[1] / 1024) if memory else None,
    }
    side.rows.append(row)
    return row


def same_decisions(before: list[Any], after: list[Any]) -> str:
    """``same``; ``same, repeat@N`` (identical up to the step where the guard fired); or ``DIFFERENT``."""
    if "repeat" in after:
        at = after.index("repeat")
        ok = after[:at] == before[:at] and len(before) > at and before[at] in ("retrieve", "parametric")
        return f"same, repeat@{at + 1}" if ok else "DIFFERENT"
    return "same" if before == after else "DIFFERENT"


def verdict(before: dict[str, Any], after: dict[str, Any]) -> str:
    """:func:`same_decisions`, and for ``DIFFERENT`` whether the first differing step is one where
    "before" misread the marker: the same generated text, but before's follow-up request named no
    marker (decided ``final``, ``no-marker (finish_reason=stop)``: a stop string did end the text)
    while after's stream saw the one the model wrote. The follow-up is a second request whose
    repeat-penalty history (llama-cpp-python's default ``repeat_penalty`` 1.1 over the tokens
    generated in that request) starts empty, so greedy decoding need not write the same marker again."""
    plain = same_decisions(before["decisions"], after["decisions"])
    if plain != "DIFFERENT" or "generated" not in before:
        return plain
    pairs = zip(before["decisions"], after["decisions"], strict=False)
    at = next((i for i, (x, y) in enumerate(pairs) if x != y), None)
    if at is None or at >= len(before["decided_by"]) or at >= len(after["decided_by"]):
        return plain
    unnamed = str(before["decided_by"][at]).startswith("no-marker (finish_reason=stop)")
    if unnamed and before["generated"][at] == after["generated"][at] and after["decided_by"][at] == "fallback-stream":
        return f"DIFFERENT: before misread the marker@{at + 1}"
    # Another text first (cache numerics at a near tie), and before's follow-up named no marker.
    return f"DIFFERENT@{at + 1} (before: stop, no marker named)" if unnamed else f"DIFFERENT@{at + 1}"


def base_settings(args: argparse.Namespace, prefix: str, port: int, fallback: str, state: Path) -> Settings:
    return load_settings(
        state_dir=state,
        es_url=[args.es_url],
        index_prefix=prefix,
        embedder="none",
        llm_base_url=[f"http://127.0.0.1:{port}/v1"],
        llm_port=port,
        llm_engine="llamacpp",
        llm_stop_fallback=fallback,
        llm_timeout=600.0,
        llm_deadline=1800.0,
        llm_retries=0,
        llm_max_concurrency=1,
    )


async def warm(port: int) -> None:
    """One tiny request, so every measured request finds a previous one in the slot."""
    async with httpx.AsyncClient(timeout=300) as client:
        await client.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "Hello", "max_tokens": 1})


async def cleanup(es_url: str, prefix: str) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        found = await client.get(f"{es_url}/_cat/indices/{prefix}*", params={"format": "json"})
        for index in found.json() if found.status_code == 200 else []:
            await client.delete(f"{es_url}/{index['index']}")


async def main(args: argparse.Namespace) -> int:
    task = asyncio.current_task()
    assert task is not None
    for number in (signal.SIGINT, signal.SIGTERM):  # stop cleanly: servers down, indices deleted
        asyncio.get_running_loop().add_signal_handler(number, task.cancel)
    records = read_questions(Path(args.questions), limit=args.limit)
    start, _, end = args.answer.partition(":")
    asked = records[int(start or 0) - 1 if start else 0 : int(end) if end else None]
    prefix = f"bench-speed-{os.getpid()}"
    folder = Path(tempfile.mkdtemp(prefix="bench-speed-"))
    ports = {"before": free_port(), "after": free_port()}
    after_command = server_command(load_settings(llm_port=ports["after"]), "llamacpp", args.model)
    before_command = without(server_command(load_settings(llm_port=ports["before"]), "llamacpp", args.model), NEW_FLAGS)
    sides = {}
    for name, command, fallback, guard in (
        ("before", before_command, "followup", False),
        ("after", after_command, "stream", True),
    ):
        at = command.index("--verbose")
        command = [*command[:at], "--verbose", "true", *command[at + 2 :]]
        server = Server(name, command, ports[name], folder / f"{name}.log")
        options = AskOptions(max_depth=depth_for(records[0].dataset), demonstrations=DEMONSTRATIONS, repeat_guard=guard)
        sides[name] = Side(name, server, base_settings(args, prefix, ports[name], fallback, folder), options)
    print(f"before: {' '.join(before_command[2:])}\n  fallback=followup, repeat_guard=off")
    print(f"after:  {' '.join(after_command[2:])}\n  fallback=stream, repeat_guard=on")
    print("(both servers run with --verbose true here: their logs give the prompt tokens evaluated)")
    try:
        for side in sides.values():
            side.server.start()
            side.runtime = await Runtime.open(side.settings)
            await warm(side.server.port)
        store = sides["after"].runtime.store  # type: ignore[union-attr]
        loaded = await ensure_qa_contexts(store, Path(args.questions), records)
        await store.refresh()
        print(f"corpus: {loaded.indexed} context passages of {len(records)} questions, prefix {prefix}\n")
        header = f"{'#':>2} {'wall b':>7} {'wall a':>7} {'ratio':>5} {'calls b/a':>9} {'eval tok b/a':>13}"
        header += f" {'peak MB b/a':>11}  decisions"
        print(header)
        for number, record in enumerate(asked, start=int(start or 1)):
            order = ("before", "after") if number % 2 else ("after", "before")
            rows = {name: await answer(sides[name], record) for name in order}
            b, a = rows["before"], rows["after"]
            b["same"] = a["same"] = verdict(b, a)
            if args.out:
                append_rows(Path(args.out), {"before": b, "after": a})
            ratio = a["wall_s"] / b["wall_s"] if b["wall_s"] else float("nan")
            print(
                f"{number:>2} {b['wall_s']:>7.1f} {a['wall_s']:>7.1f} {ratio:>5.2f} "
                f"{b['llm_calls']:>4}/{a['llm_calls']:<4} "
                f"{b['prompt_tokens_evaluated']:>6}/{a['prompt_tokens_evaluated']:<6} "
                f"{b['server_peak_rss_mb'] or 'gone':>5}/{a['server_peak_rss_mb'] or 'gone':<5}"
                f"  {b['same']}{'  errors: ' + str(b['error'] or a['error']) if b['error'] or a['error'] else ''}",
                flush=True,
            )
        report(sides)
    finally:
        for side in sides.values():
            if side.runtime is not None:
                await side.runtime.close()
            side.server.stop()
        await cleanup(args.es_url, prefix)
    return 0


def append_rows(path: Path, rows: dict[str, dict[str, Any]]) -> None:
    with path.open("a", encoding="utf-8") as out:
        for name, row in rows.items():
            out.write(json.dumps({"side": name, **row}) + "\n")


def report_files(paths: list[Path]) -> int:
    """The summary over rows written with ``--out`` (several runs' files together)."""
    rows: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows[row.pop("side")].append(row)
    for b, a in zip(rows["before"], rows["after"], strict=True):
        b["same"] = a["same"] = verdict(b, a)  # rows of older runs lack what the misread check needs
    sides = {}
    for name, found in rows.items():
        side = Side(name, Server(name, [], 0, Path()), load_settings(), AskOptions())
        side.rows = found
        sides[name] = side
    report(sides)
    return 0


def report(sides: dict[str, Side]) -> None:
    b, a = sides["before"].rows, sides["after"].rows

    def total(rows: list[dict[str, Any]], key: str) -> float:
        return float(sum(r[key] for r in rows))

    ratios = [y["wall_s"] / x["wall_s"] for x, y in zip(b, a, strict=True) if x["wall_s"]]
    same = sum(1 for r in a if r["same"] == "same")
    repeat = sum(1 for r in a if r["same"].startswith("same, repeat"))
    misread = sum(1 for r in a if "misread" in r["same"])
    n = len(b)
    print(
        f"\nquestions: {n}\n"
        f"wall s per question, mean: before {total(b, 'wall_s') / n:.1f}, after {total(a, 'wall_s') / n:.1f}; "
        f"ratio of totals {total(a, 'wall_s') / total(b, 'wall_s'):.2f}, median ratio {statistics.median(ratios):.2f}\n"
        f"LLM calls per question, mean: before {total(b, 'llm_calls') / n:.1f}, after {total(a, 'llm_calls') / n:.1f}\n"
        f"prompt tokens evaluated per question, mean: before {total(b, 'prompt_tokens_evaluated') / n:.0f}, "
        f"after {total(a, 'prompt_tokens_evaluated') / n:.0f}\n"
        f"retrievals per question, mean: before {total(b, 'retrievals') / n:.1f}, "
        f"after {total(a, 'retrievals') / n:.1f}\n"
        f"decisions: {same} same, {repeat} same up to the repeat guard, {n - same - repeat} different "
        f"(of these {misread} where before's follow-up misread the marker the model wrote)\n"
        f"EM: before {total(b, 'em') / n:.2f}, after {total(a, 'em') / n:.2f}; "
        f"answers identical: {sum(1 for x, y in zip(b, a, strict=True) if x['answer'] == y['answer'])}/{n}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", default=str(SAMPLE))
    parser.add_argument("--limit", type=int, default=20, help="The first N questions; their contexts are the corpus.")
    parser.add_argument(
        "--answer", default="", help="Answer only questions START:END of those (1-based, inclusive), e.g. 11:20."
    )
    parser.add_argument("--es-url", default="http://127.0.0.1:9200")
    parser.add_argument("--model", default=None, help="A GGUF file (default: the Gemma 3 270M package's).")
    parser.add_argument("--out", default=None, help="Append every row as JSON lines here, question by question.")
    parser.add_argument("--report", nargs="+", default=None, help="Only print the summary of --out files.")
    arguments = parser.parse_args()
    if arguments.report:
        sys.exit(report_files([Path(name) for name in arguments.report]))
    sys.exit(asyncio.run(main(arguments)))
