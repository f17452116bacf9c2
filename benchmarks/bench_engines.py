"""vLLM against llama.cpp: the same questions, the same model (Gemma 3 270M), in one run.

    .venv/bin/python benchmarks/bench_engines.py [--limit 5] [--max-tokens 48]
        [--engines vllm-bfloat16,vllm-float32,llamacpp] [--url ENGINE=http://127.0.0.1:P/v1 ...]

Each engine's server is the one ``hopsearch llm up [--engine vllm]`` starts (started here on free ports
unless its URL is given, stopped at the end; vLLM's environment and converted model must exist:
``make vllm-env``; ``vllm-float32`` serves the float32 conversion, ``HOPSEARCH_LLM_VLLM_DTYPE``). The
first ``--limit`` questions of the bundled 2WikiMultihopQA sample are asked as DeepRAG's first step
(the worked examples, then the question), streamed, greedy, ``--max-tokens`` at most, once per engine,
the order reversed every other question so all see the same load. Printed: per
engine the p50 of the answer latency and of the time to first token, generated tokens per second
(tokens after the first over the time after it, summed), their ratios to the last engine listed
(llama.cpp by default), how many answers are the same text as its, and the load average before and
after. One warm-up request per engine is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from hopsearch.cli.local import llm_server
from hopsearch.cli.local.llm_server import LocalEngine
from hopsearch.service.config.settings import Settings, load_settings
from hopsearch.service.strategies.deeprag import DEMONSTRATIONS

SAMPLE = Path(__file__).resolve().parents[1] / "loaders" / "data" / "sample_2wiki.jsonl"


@dataclass
class Runs:
    latency: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    tokens: int = 0
    decode_s: float = 0.0
    texts: list[str] = field(default_factory=list)

    def tokens_per_s(self) -> float:
        return self.tokens / self.decode_s if self.decode_s else 0.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def streamed(http: httpx.AsyncClient, url: str, prompt: str, max_tokens: int) -> tuple[float, float, int, str]:
    """(seconds to the last event, seconds to the first token, tokens streamed, the text) of one greedy
    completion."""
    body = {"model": "gemma3-270m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": True}
    started = time.monotonic()
    first: float | None = None
    tokens = 0
    text = ""
    async with http.stream("POST", f"{url}/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or []
            if choices and choices[0].get("text"):
                tokens += 1
                text += choices[0]["text"]
                first = first if first is not None else time.monotonic() - started
    return time.monotonic() - started, first or 0.0, tokens, text


def start(name: str, state: Path) -> tuple[Settings, str]:
    """Start ``llamacpp`` or ``vllm-<dtype>`` as ``llm up`` does."""
    port = free_port()
    engine: LocalEngine = "vllm" if name.startswith("vllm") else "llamacpp"
    dtype = {"llm_vllm_dtype": name.removeprefix("vllm-")} if name.startswith("vllm-") else {}
    settings = load_settings(state_dir=state / name, llm_port=port, llm_startup_timeout=900.0, **dtype)
    started = time.monotonic()
    server = llm_server.start(settings, engine)
    print(f"{name}: up in {time.monotonic() - started:.0f} s at {server.base_url} ({server.model})")
    return settings, server.base_url


async def measure(urls: dict[str, str], prompts: list[str], max_tokens: int) -> dict[str, Runs]:
    runs = {name: Runs() for name in urls}
    async with httpx.AsyncClient(timeout=900) as http:
        for url in urls.values():  # warm-up
            await streamed(http, url, prompts[0], 4)
        for number, prompt in enumerate(prompts):
            order = list(urls) if number % 2 == 0 else list(reversed(urls))
            for name in order:
                total, first, tokens, text = await streamed(http, urls[name], prompt, max_tokens)
                runs[name].texts.append(text)
                runs[name].latency.append(total)
                runs[name].first.append(first)
                runs[name].tokens += max(0, tokens - 1)
                runs[name].decode_s += max(0.0, total - first)
                print(f"  q{number} {name:14s} {total:6.2f} s, first token {first:5.2f} s, {tokens} tokens")
    return runs


def report(runs: dict[str, Runs], load: tuple[tuple[float, ...], tuple[float, ...]]) -> None:
    *_, base_name = runs
    base = runs[base_name]
    print(f"{'engine':14s} {'p50 latency s':>14s} {'p50 TTFT s':>11s} {'tokens/s':>9s}  same text as {base_name}")
    for name, run in runs.items():
        p50, ttft = statistics.median(run.latency), statistics.median(run.first)
        same = sum(a == b for a, b in zip(run.texts, base.texts, strict=True))
        print(f"{name:14s} {p50:14.2f} {ttft:11.2f} {run.tokens_per_s():9.2f}  {same}/{len(run.texts)}")
    for name, run in runs.items():
        if name == base_name:
            continue
        latency = statistics.median(run.latency) / statistics.median(base.latency)
        first = statistics.median(run.first) / statistics.median(base.first)
        speed = run.tokens_per_s() / base.tokens_per_s() if base.tokens_per_s() else 0.0
        print(f"{name} / {base_name}: latency p50 x{latency:.2f}, TTFT p50 x{first:.2f}, tokens/s x{speed:.2f}")
    print(f"load average before {load[0]}, after {load[1]} ({os.cpu_count()} cores)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--limit", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--engines", default="vllm-bfloat16,llamacpp", help="the last one is the baseline")
    parser.add_argument("--url", action="append", default=[], help="ENGINE=URL of a server already running")
    args = parser.parse_args()
    given = dict(item.split("=", 1) for item in args.url)
    with SAMPLE.open() as lines:
        questions = [json.loads(line)["question"] for _, line in zip(range(args.limit), lines, strict=False)]
    prompts = [f"{DEMONSTRATIONS}\n\nQuestion: {q}" for q in questions]
    started: list[Settings] = []
    with tempfile.TemporaryDirectory() as state:
        try:
            urls = {}
            for name in args.engines.split(","):
                if name in given:
                    urls[name] = given[name]
                else:  # one at a time: each server is up before the next one starts
                    settings, urls[name] = start(name, Path(state))
                    started.append(settings)
            before = os.getloadavg()
            runs = asyncio.run(measure(urls, prompts, args.max_tokens))
            report(runs, (tuple(round(x, 2) for x in before), tuple(round(x, 2) for x in os.getloadavg())))
        finally:
            for settings in started:
                llm_server.stop(settings)


if __name__ == "__main__":
    main()
