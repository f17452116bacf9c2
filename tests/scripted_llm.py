"""A scripted OpenAI-compatible server on loopback that behaves like vLLM (or like llama.cpp).

A real HTTP server (aiohttp) in its own thread and event loop, so both async tests and the CLI
(``asyncio.run`` under click's runner) can call it. A *script* — ``ScriptRequest -> str`` — decides
what the "model" generates; the server then applies what a real server does: stop strings (cut at
the earliest, report ``stop_reason`` = that string unless ``report_stop_reason`` is off),
``max_tokens`` (whitespace tokens; ``finish_reason`` ``length``), usage (whitespace token counts).
``stream: true`` answers server-sent events, one whitespace token per event, like llama-cpp-python
(no usage, the finish reason on the last event); ``streamed`` records per stream how many events
were sent before the client closed it or the stream ended; ``interrupt_first`` cuts the first streams
after one event, as llama-cpp-python does when another request waits.
Faults: the first ``fail_first`` generation requests answer ``fail_status``; the first
``delay_first`` ones wait ``delay_s`` first; ``hang`` never answers.
Token counts: ``tokenizer`` answers llama-cpp-python's ``POST /extras/tokenize/count`` (the default)
or llama.cpp's ``POST /tokenize`` with the whitespace count (as ``usage``), or neither (None);
``counted`` lists every text counted.
Constraints (issue 19), honoured like the real servers: vLLM-like reads ``structured_outputs``
(``choice`` / ``regex``) from ``vllm_version`` 0.10.2 on and ``guided_choice`` / ``guided_regex``
before 0.12 (``GET /version`` reports the release; ``vllm_version=None``: no such endpoint); a field
of another release is ignored, as vLLM does. llama.cpp-like reads a GBNF ``grammar`` (a subset:
string literals, character classes, groups, alternation, ``? * +``, rule references; see
:func:`gbnf_to_regex`). The "model" then writes the earliest piece of its scripted text that the
constraint allows (whole words); where it holds nothing allowed, the first string of the language
(the first choice; :func:`first_string`). ``constrain=False`` ignores every constraint.
Prompt logprobs: with ``logprob`` (token text -> logprob), ``/v1/completions`` with ``echo`` and
``logprobs`` returns the prompt's whitespace tokens with their logprobs and offsets; without it such a
request answers 400 (a server that gives no logprobs).
Capacity: ``slots=N`` serves like llama.cpp with N slots: ``GET /props`` reports ``total_slots``, at
most N generations run at a time (each takes ``work_s``) and the others wait in the server's queue;
``max_queued`` is the longest that queue got, ``served`` the (start, end) of every generation.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

_TOKEN = re.compile(r"\S+")
_PIECE = re.compile(r"\s*\S+|\s+$")


@dataclass(frozen=True)
class ScriptRequest:
    endpoint: str  # "completions" or "chat"
    prompt: str  # the completion prompt; for chat the final message's content
    body: dict[str, Any] = field(default_factory=dict)


Script = Callable[[ScriptRequest], str]


def tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def apply_limits(generated: str, stops: list[str], max_tokens: int) -> tuple[str, str, str | None]:
    """(text, finish_reason, stop_reason) as a server produces them for ``generated``."""
    limit = len(generated)
    matches = list(_TOKEN.finditer(generated))
    if len(matches) > max_tokens:
        limit = matches[max_tokens - 1].end() if max_tokens > 0 else 0
    window = generated[:limit]
    best: tuple[int, str] | None = None
    for stop in stops:
        position = window.find(stop)
        if position >= 0 and (best is None or position < best[0]):
            best = (position, stop)
    if best is not None:
        return window[: best[0]], "stop", best[1]
    if limit < len(generated):
        return window, "length", None
    return window, "stop", None


_GBNF_TOKEN = re.compile(
    r'\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<cls>\[(?:[^\]\\]|\\.)*\])|(?P<name>[A-Za-z][\w-]*)|(?P<op>[()|?*+]))'
)


def gbnf_to_regex(grammar: str) -> str:
    """A Python regex for the language of a GBNF grammar of the subset above (``root`` is the start;
    rules may refer to rules defined anywhere, not recursively)."""
    rules: dict[str, str] = {}
    for line in grammar.splitlines():
        if "::=" in line:
            name, body = line.split("::=", 1)
            rules[name.strip()] = body.strip()

    def expand(name: str, seen: frozenset[str]) -> str:
        if name in seen or name not in rules:
            raise ValueError(f"grammar rule {name!r} is recursive or missing")
        out: list[str] = []
        body, position = rules[name], 0
        while position < len(body):
            found = _GBNF_TOKEN.match(body, position)
            if found is None:
                if body[position:].strip():
                    raise ValueError(f"unsupported GBNF at {body[position:]!r}")
                break
            position = found.end()
            if found["string"]:
                out.append(re.escape(json.loads(found["string"])))
            elif found["cls"]:
                out.append(found["cls"])
            elif found["name"]:
                out.append(f"(?:{expand(found['name'], seen | {name})})")
            else:
                out.append({"(": "(?:"}.get(found["op"], found["op"]))
        return "".join(out)

    return expand("root", frozenset())


def constrained(generated: str, kind: str, value: Any) -> str:
    """What a constrained decoder writes for a model whose unconstrained reply is ``generated``: the
    earliest piece of it (whole words) in the allowed language; the first choice where none is."""
    if kind == "choice":
        pattern = "|".join(re.escape(str(c)) for c in sorted(value, key=len, reverse=True))
    else:
        pattern = gbnf_to_regex(value) if kind == "grammar" else str(value)
    for found in re.finditer(rf"(?<!\w)(?:{pattern})(?!\w)", generated):
        if found.group().strip():
            return found.group()
    return first_string(pattern)


def first_string(pattern: str) -> str:
    """The first string of a regex's language (first branch, fewest repeats, lowest character): what a
    constrained decoder writes when nothing the model wanted is allowed."""

    def walk(items: Any) -> str:
        out = ""
        for op, arg in items:
            name = str(op)
            if name == "LITERAL":
                out += chr(arg)
            elif name == "IN":
                kind, first = arg[0]
                out += chr(first[0] if str(kind) == "RANGE" else first)
            elif name in {"MAX_REPEAT", "MIN_REPEAT"}:
                low, _, sub = arg
                out += walk(sub) * low
            elif name == "SUBPATTERN":
                out += walk(arg[-1])
            elif name == "BRANCH":
                out += walk(arg[1][0])
        return out

    return walk(re._parser.parse(pattern))  # type: ignore[attr-defined]


class ScriptedLLM:
    def __init__(
        self,
        script: Script,
        *,
        report_stop_reason: bool = True,
        fail_first: int = 0,
        fail_status: int = 500,
        delay_first: int = 0,
        delay_s: float = 0.0,
        hang: bool = False,
        model: str = "scripted",
        slots: int | None = None,
        work_s: float = 0.0,
        vllm_version: str | None = "0.11.0",
        constrain: bool = True,
        logprob: Callable[[str], float] | None = None,
        tokenizer: Literal["llama-cpp-python", "llama.cpp"] | None = "llama-cpp-python",
        interrupt_first: int = 0,
    ) -> None:
        self.tokenizer = tokenizer
        #: The first N streams end after one event with ``[DONE]`` and no finish reason, as
        #: llama-cpp-python's server cuts a stream when another request waits (``interrupt_requests``).
        self.interrupt_first = interrupt_first
        self.counted: list[str] = []
        self.vllm_version = vllm_version
        self.constrain = constrain
        self.logprob = logprob
        #: (kind, the constraint, the scripted text, what was sent) of every constrained generation.
        self.constrained: list[tuple[str, Any, str, str]] = []
        self.script = script
        self.report_stop_reason = report_stop_reason
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.delay_first = delay_first
        self.delay_s = delay_s
        self.hang = hang
        self.model = model
        self.slots = slots
        self.work_s = work_s
        self.queued = 0
        self.max_queued = 0
        self.served: list[tuple[float, float]] = []
        self._slot_gate: asyncio.Semaphore | None = None
        self.requests: list[dict[str, Any]] = []
        self.streamed: list[int] = []
        self.generation_requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def prompts(self) -> list[str]:
        """The prompt (or final message) of every generation request, in order."""
        return [r["_prompt"] for r in self.requests if "_prompt" in r]

    # --- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> ScriptedLLM:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("scripted LLM server did not start")

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(10)

    def _serve(self, ready: threading.Event) -> None:
        asyncio.run(self._main(ready))

    async def _main(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        if self.report_stop_reason and self.vllm_version is not None:
            app.router.add_get("/version", self._version)
        if self.slots is not None:
            app.router.add_get("/props", self._props)
            self._slot_gate = asyncio.Semaphore(self.slots)
        if self.tokenizer == "llama-cpp-python":
            app.router.add_post("/extras/tokenize/count", self._count)
        elif self.tokenizer == "llama.cpp":
            app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, shutdown_timeout=0.2)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        ready.set()
        await self._stopping.wait()
        await self._runner.cleanup()

    # --- handlers ------------------------------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        owner = "vllm" if self.report_stop_reason else "llamacpp"
        return web.json_response({"object": "list", "data": [{"id": self.model, "owned_by": owner}]})

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.vllm_version})

    async def _props(self, request: web.Request) -> web.Response:
        return web.json_response({"total_slots": self.slots, "model_path": self.model})

    async def _count(self, request: web.Request) -> web.Response:
        text = str((await request.json())["input"])
        self.counted.append(text)
        return web.json_response({"count": tokens(text)})

    async def _tokenize(self, request: web.Request) -> web.Response:
        text = str((await request.json())["content"])
        self.counted.append(text)
        return web.json_response({"tokens": list(range(tokens(text)))})

    async def _one_slot_turn(self) -> None:
        """Wait in the server's queue for a slot, then spend ``work_s`` generating (slots mode)."""
        gate = self._slot_gate
        if gate is None:
            return
        waits = gate.locked()  # every slot busy: this request waits in the server's queue
        if waits:
            self.queued += 1
            self.max_queued = max(self.max_queued, self.queued)
        try:
            await gate.acquire()
        finally:
            if waits:
                self.queued -= 1
        try:
            began = time.monotonic()
            await asyncio.sleep(self.work_s)
            self.served.append((began, time.monotonic()))
        finally:
            gate.release()

    async def _fault(self) -> web.Response | None:
        self.generation_requests += 1
        number = self.generation_requests
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.hang:
                await asyncio.sleep(3600)
            if number <= self.delay_first:
                await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1
        if number <= self.fail_first:
            return web.json_response({"error": {"message": "scripted failure"}}, status=self.fail_status)
        await self._one_slot_turn()
        return None

    async def _completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        fault = await self._fault()
        if fault is not None:
            return fault
        prompt = str(body["prompt"])
        self.requests.append({**body, "_prompt": prompt, "_at": time.monotonic()})
        if body.get("echo") and body.get("logprobs") is not None:
            return self._echo_logprobs(prompt, body)
        text, finish, reason = self._generate(ScriptRequest("completions", prompt, body), body)
        if body.get("stream"):
            return await self._stream(request, "text_completion", text, finish)
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        return self._reply("text_completion", choice, reason, prompt, text)

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        fault = await self._fault()
        if fault is not None:
            return fault
        messages = body["messages"]
        prompt = str(messages[-1]["content"])
        self.requests.append({**body, "_prompt": prompt, "_at": time.monotonic()})
        text, finish, reason = self._generate(ScriptRequest("chat", prompt, body), body)
        if body.get("stream"):
            return await self._stream(request, "chat.completion.chunk", text, finish)
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "finish_reason": finish}
        rendered = " ".join(str(m["content"]) for m in messages)
        return self._reply("chat.completion", choice, reason, rendered, text)

    def _generate(self, script_request: ScriptRequest, body: dict[str, Any]) -> tuple[str, str, str | None]:
        stops = body.get("stop") or []
        if isinstance(stops, str):
            stops = [stops]
        generated = self.script(script_request)
        constraint = self._constraint(body) if self.constrain else None
        if constraint is not None:
            kind, value = constraint
            sent = constrained(generated, kind, value)
            self.constrained.append((kind, value, generated, sent))
            generated = sent
        return apply_limits(generated, list(stops), int(body.get("max_tokens") or 16))

    def _constraint(self, body: dict[str, Any]) -> tuple[str, Any] | None:
        """The constraint this server reads from the request, as (kind, value); None if none it knows."""
        if not self.report_stop_reason:  # llama.cpp-like
            grammar = body.get("grammar")
            return ("grammar", grammar) if isinstance(grammar, str) else None
        version = tuple(int(n) for n in re.findall(r"\d+", self.vllm_version or "0.11.0")[:3])
        outputs = body.get("structured_outputs")
        if version >= (0, 10, 2) and isinstance(outputs, dict):
            if outputs.get("choice") is not None:
                return "choice", list(outputs["choice"])
            if outputs.get("regex") is not None:
                return "regex", str(outputs["regex"])
        if version < (0, 12, 0):
            if body.get("guided_choice") is not None:
                return "choice", list(body["guided_choice"])
            if body.get("guided_regex") is not None:
                return "regex", str(body["guided_regex"])
        return None

    def _echo_logprobs(self, prompt: str, body: dict[str, Any]) -> web.Response:
        """Prompt logprobs (``echo``): each whitespace token of the prompt with ``logprob(token)``, then
        one generated token; 400 where this server gives no logprobs."""
        if self.logprob is None:
            return web.json_response({"error": {"message": "logprobs are not supported"}}, status=400)
        pieces = [(m.group(), m.start()) for m in _PIECE.finditer(prompt)]
        generated = " x"
        logprobs = {
            "tokens": [p for p, _ in pieces] + [generated],
            "token_logprobs": [None] + [self.logprob(p.strip()) for p, _ in pieces[1:]] + [-1.0],
            "text_offset": [at for _, at in pieces] + [len(prompt)],
            "top_logprobs": None,
        }
        choice = {"index": 0, "text": prompt + generated, "finish_reason": "length", "logprobs": logprobs}
        return self._reply("text_completion", choice, None, prompt, generated)

    async def _stream(self, request: web.Request, kind: str, text: str, finish: str) -> web.StreamResponse:
        """One event per whitespace token, the finish reason on the last; stops when the client goes."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        pieces = _PIECE.findall(text) or [""]
        sent = 0
        cut = self.interrupt_first > 0  # one event, then [DONE] without a finish reason
        if cut:
            self.interrupt_first -= 1
            pieces = pieces[:1]
        try:
            for number, piece in enumerate(pieces, start=1):
                last = finish if number == len(pieces) and not cut else None
                if kind == "text_completion":
                    choice: dict[str, Any] = {"index": 0, "text": piece, "finish_reason": last}
                else:
                    choice = {"index": 0, "delta": {"content": piece}, "finish_reason": last}
                event = {"id": "scripted", "object": kind, "model": self.model, "choices": [choice]}
                await response.write(f"data: {json.dumps(event)}\n\n".encode())
                sent += 1
                await asyncio.sleep(0.01)  # a token's time: a client that closes is seen before the next
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self.streamed.append(sent)
        return response

    def _reply(self, kind: str, choice: dict[str, Any], reason: str | None, prompt: str, text: str) -> web.Response:
        if self.report_stop_reason:
            choice["stop_reason"] = reason
        usage = {"prompt_tokens": tokens(prompt), "completion_tokens": tokens(text)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        payload = {"id": "scripted", "object": kind, "model": self.model, "choices": [choice], "usage": usage}
        return web.json_response(payload)
