"""An async OpenAI-compatible client: completions and chat over several base URLs.

Bounded concurrency (one semaphore per client, and per base URL the server's capacity: its slot count
where it reports one, llama.cpp's ``/props`` ``total_slots``, or ``llm_slots_per_url``), per-request
timeouts, an overall deadline, retries with exponential back-off and full jitter on connect errors,
timeouts, 429 and 5xx. A request waits for a free slot in this process before it is sent, and its
timeout starts only then: time queued behind our own requests never times a request out (a one-slot
server sent 8 requests at once would otherwise serve them in turn while the later ones time out and
are retried). Every HTTP
request is recorded as an :class:`Attempt`; failures carry them in ``error.details["attempts"]``.
The transport is injectable (``httpx.MockTransport``, ``httpx.ASGITransport``) instead of patching.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx

from hopsearch.service.config.settings import Settings
from hopsearch.service.errors import LLMError, LLMTimeout, LLMUnavailable
from hopsearch.service.llm.capacity import ServerSlots
from hopsearch.service.llm.sse import read_until
from hopsearch.service.llm.tokencount import PromptCounter
from hopsearch.service.llm.types import Attempt, Completion, Engine, StopMethod, Usage

log = logging.getLogger(__name__)

Message = Mapping[str, str]
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class _Pool:
    """Chooses a base URL per request: least in-flight requests (ties round-robin) or round-robin."""

    def __init__(self, urls: Sequence[str], balance: str) -> None:
        if not urls:
            raise LLMError("no LLM base URL configured")
        # user:password@ in a base URL becomes basic auth, so credentials never reach logs or traces.
        self.auth: dict[str, tuple[str, str]] = {}
        self.urls = []
        for raw in urls:
            parsed = httpx.URL(raw.rstrip("/"))
            clean = str(parsed.copy_with(username=None, password=None)).rstrip("/")
            if parsed.username:
                self.auth[clean] = (parsed.username, parsed.password or "")
            self.urls.append(clean)
        self.balance = balance
        self.in_flight = dict.fromkeys(self.urls, 0)
        self._turn = itertools.count()

    def pick(self, avoid: str | None = None) -> str:
        start = next(self._turn) % len(self.urls)
        order = self.urls[start:] + self.urls[:start]
        if avoid is not None and len(order) > 1:
            order = [url for url in order if url != avoid] + [avoid]
        if self.balance == "round-robin":
            return order[0]
        return min(order, key=lambda url: self.in_flight[url])


def backoff_delay(retry: int, base: float, cap: float, rng: random.Random) -> float:
    """Full-jitter exponential back-off: uniform in [0, min(cap, base * 2**retry)]."""
    return rng.uniform(0.0, min(cap, base * (2**retry)))


class LLMClient:
    """One client per process; use as ``async with LLMClient(settings) as llm``."""

    def __init__(
        self,
        settings: Settings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.model = settings.llm_model
        self._pool = _Pool(settings.llm_base_url, settings.llm_balance)
        self._semaphore = asyncio.Semaphore(settings.llm_max_concurrency)
        self._rng = rng or random.Random()
        headers = {}
        if settings.llm_api_key is not None:
            headers["Authorization"] = f"Bearer {settings.llm_api_key.get_secret_value()}"
        self._http = httpx.AsyncClient(transport=transport, headers=headers, timeout=settings.llm_timeout)
        self.slots = ServerSlots(self._http, settings, self._pool.auth)
        self._counter = PromptCounter(self._http)
        self._engine: Engine | None = None if settings.llm_engine == "auto" else settings.llm_engine
        self._version: tuple[str | None] | None = None
        self._questions: asyncio.Semaphore | None = None

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def base_urls(self) -> list[str]:
        return list(self._pool.urls)

    def in_flight(self, base_url: str) -> int:
        """Return how many requests of this client ``base_url`` is serving now."""
        return self._pool.in_flight.get(base_url, 0)

    async def get_models(self, base_url: str, wait_s: float) -> httpx.Response:
        """One ``GET /models`` to ``base_url``, outside the concurrency limit and without retries
        (the readiness probe); httpx errors pass through so a caller can tell connect from read."""
        auth = self._pool.auth.get(base_url, httpx.USE_CLIENT_DEFAULT)
        return await self._http.get(f"{base_url}/models", timeout=wait_s, auth=auth)

    def deadline_in(self, seconds: float | None = None) -> float:
        """Return an absolute deadline (``time.monotonic()`` clock); default ``settings.llm_deadline``."""
        return time.monotonic() + (self.settings.llm_deadline if seconds is None else seconds)

    async def models(self, *, timeout_s: float = 3.0) -> dict[str, Any]:
        """``GET /models`` (the server's readiness probe) within ``timeout_s``."""
        body, _ = await self.request("GET", "/models", None, deadline=self.deadline_in(timeout_s))
        return body

    async def engine(self) -> Engine:
        """Return the server kind: from settings, else probed once (vLLM names itself in ``owned_by``)."""
        if self._engine is None:
            try:
                body = await self.models(timeout_s=30.0)
                owners = {str(item.get("owned_by", "")) for item in body.get("data", [])}
                self._engine = "vllm" if "vllm" in owners else "llamacpp"
            except LLMError:
                log.warning("could not probe the LLM server kind; assuming no vLLM extensions")
                return "llamacpp"
        return self._engine

    async def server_version(self) -> str | None:
        """Return the server's release from ``GET /version`` beside ``/v1`` of the first base URL (vLLM serves it), read
        once; None when the server gives none."""
        if self._version is None:
            base = self._pool.urls[0]
            root = base.removesuffix("/v1")
            found: str | None = None
            try:
                auth = self._pool.auth.get(base, httpx.USE_CLIENT_DEFAULT)
                response = await self._http.get(f"{root}/version", timeout=10.0, auth=auth)
                body = response.json() if response.status_code == 200 else {}
                found = str(body["version"]) if isinstance(body, dict) and "version" in body else None
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("could not read the server release from %s/version: %s", root, exc)
            self._version = (found,)
        return self._version[0]

    @contextlib.asynccontextmanager
    async def question(self) -> AsyncIterator[None]:
        """Hold one of the servers' question slots for a question's calls (``llm_question_slots``;
        0: on llama.cpp the servers' slot counts added up, a server that reports none counting one):
        on a one-slot llama.cpp server a question's prompts then follow one another and each
        extends the last one in the slot's cache, instead of every prompt being evaluated anew."""
        if self._questions is None:
            slots = self.settings.llm_question_slots or await self._auto_question_slots()
            if not slots:  # vLLM, OpenAI: no turns
                yield
                return
            if self._questions is None:  # another question may have set it while this one probed
                self._questions = asyncio.Semaphore(slots)
        async with self._questions:
            yield

    async def _auto_question_slots(self) -> int:
        if await self.engine() != "llamacpp":
            return 0
        total = 0
        for base in self._pool.urls:
            await self.slots.for_url(base)
            total += self.slots.capacity.get(base) or 1
        return total

    # --- the two endpoints ---------------------------------------------------------------------
    async def complete(
        self,
        prompt: str,
        *,
        stop: Sequence[str] = (),
        max_tokens: int = 128,
        temperature: float = 0.0,
        deadline: float | None = None,
        extra: Mapping[str, Any] | None = None,
        stream_cut: Sequence[str] = (),
    ) -> Completion:
        """``POST /completions``. ``stop`` is reported by ``stop_reason`` where the server sends it.
        ``stream_cut``: stream instead, and stop reading at the first of these strings, cut
        client-side (``stop`` names it; see :mod:`~hopsearch.service.llm.sse`)."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if stop:
            body["stop"] = list(stop)
        body.update(extra or {})
        return await self._generate("/completions", body, deadline, stream_cut)

    async def chat(
        self,
        messages: Sequence[Message],
        *,
        stop: Sequence[str] = (),
        max_tokens: int = 256,
        temperature: float = 0.0,
        continue_final_message: bool = False,
        deadline: float | None = None,
        extra: Mapping[str, Any] | None = None,
        stream_cut: Sequence[str] = (),
    ) -> Completion:
        """``POST /chat/completions``. ``continue_final_message`` (vLLM) continues the last
        assistant turn inside the model's own chat template instead of opening a new turn."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(message) for message in messages],
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if stop:
            body["stop"] = list(stop)
        if continue_final_message:
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        body.update(extra or {})
        return await self._generate("/chat/completions", body, deadline, stream_cut)

    async def _generate(
        self, path: str, body: dict[str, Any], deadline: float | None, stream_cut: Sequence[str] = ()
    ) -> Completion:
        started = time.monotonic()
        if stream_cut:
            body = {**body, "stream": True, "stream_options": {"include_usage": True}}
            body.pop("stop", None)
        data, attempts = await self.request("POST", path, body, deadline=deadline, stream_cut=stream_cut or None)
        try:
            choice = data["choices"][0]
            text = choice["text"] if "text" in choice else choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMError("malformed LLM response", details={"attempts": attempts}) from exc
        finish = choice.get("finish_reason")
        found: str | None = None
        method: StopMethod = "finish_reason"
        if stream_cut:
            streamed = data.get("_streamed_stop")
            found = streamed if isinstance(streamed, str) else None
            method = "fallback-stream"
        elif "stop_reason" in choice and finish == "stop":
            reason = choice.get("stop_reason")
            found = reason if isinstance(reason, str) else None  # int: a stop token id (EOS)
            method = "stop_reason"
        usage = data.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        if stream_cut and not prompt_tokens and isinstance(body.get("prompt"), str):
            prompt_tokens = await self._count_prompt(attempts[-1].url.removesuffix(path), body["prompt"], deadline)
        return Completion(
            text=str(text),
            finish_reason=finish,
            stop=found,
            stop_method=method,
            usage=Usage(prompt_tokens, int(usage.get("completion_tokens") or 0)),
            attempts=tuple(attempts),
            latency_ms=round((time.monotonic() - started) * 1000, 3),
            model=str(data.get("model") or self.model),
        )

    async def _count_prompt(self, base_url: str, prompt: str, deadline: float | None) -> int:
        """Return a streamed completion's prompt tokens, counted by the server that served it (a stream closed at its
        marker carries no usage; :mod:`~hopsearch.service.llm.tokencount`); 0 where it cannot count."""
        left = self.settings.llm_timeout if deadline is None else deadline - time.monotonic()
        if left <= 0:
            return 0
        auth = self._pool.auth.get(base_url, httpx.USE_CLIENT_DEFAULT)
        counted = await self._counter.count(base_url, prompt, auth=auth, wait_s=min(self.settings.llm_timeout, left))
        return counted or 0

    # --- transport with retries ----------------------------------------------------------------
    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        *,
        deadline: float | None,
        stream_cut: Sequence[str] | None = None,
    ) -> tuple[dict[str, Any], list[Attempt]]:
        """Send with retries; return the JSON body and every attempt made. With ``stream_cut`` the
        response is a stream read until one of those strings (:func:`~hopsearch.service.llm.sse.read_until`)."""
        deadline = self.deadline_in() if deadline is None else deadline
        attempts: list[Attempt] = []
        last_url: str | None = None
        timed_out = False
        for retry in range(self.settings.llm_retries + 1):
            if retry:
                pause = backoff_delay(
                    retry - 1, self.settings.llm_backoff_base, self.settings.llm_backoff_max, self._rng
                )
                if time.monotonic() + pause >= deadline:
                    break
                await asyncio.sleep(pause)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            timeout = min(self.settings.llm_timeout, remaining)
            attempt, data, retryable = await self._attempt(
                method, path, body, timeout, avoid=last_url, stream_cut=stream_cut, deadline=deadline
            )
            last_url = attempt.url.removesuffix(path)
            attempts.append(attempt)
            if data is not None:
                return data, attempts
            timed_out = attempt.status is None and "timeout" in (attempt.error or "").lower()
            if not retryable and timed_out:
                break
            if not retryable:
                raise LLMError(f"LLM request failed: {attempt.error}", details=_details(attempts))
            log.info("LLM attempt %d failed (%s); retrying", retry + 1, attempt.error)
        details = _details(attempts)
        if timed_out or time.monotonic() >= deadline:
            raise LLMTimeout(f"LLM call did not finish in time after {len(attempts)} attempt(s)", details=details)
        last = attempts[-1].error if attempts else "no attempt made"
        raise LLMUnavailable(f"LLM unavailable after {len(attempts)} attempt(s): {last}", details=details)

    async def _attempt(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        seconds: float,
        *,
        avoid: str | None,
        stream_cut: Sequence[str] | None = None,
        deadline: float | None = None,
    ) -> tuple[Attempt, dict[str, Any] | None, bool]:
        """One request; returns (attempt, JSON body or None, retryable). The base URL is picked
        once a concurrency slot is free, so least-busy sees the requests really in flight; then the
        request waits for one of that server's slots, and its timeout starts once it has one."""
        async with self._semaphore:
            base = self._pool.pick(avoid=avoid)
            url = base + path
            self._pool.in_flight[base] += 1
            queued = started = time.monotonic()
            auth = self._pool.auth.get(base, httpx.USE_CLIENT_DEFAULT)
            try:
                slots = await self.slots.for_url(base)
                async with contextlib.AsyncExitStack() as held:
                    if slots is not None:
                        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                        try:
                            async with asyncio.timeout(wait):
                                await held.enter_async_context(slots)
                        except TimeoutError:  # the deadline passed in our own queue: nothing to retry
                            why = "timeout: the deadline passed while queued for a server slot"
                            return _fail(url, None, queued, why), None, False
                        if deadline is not None:
                            seconds = min(self.settings.llm_timeout, deadline - time.monotonic())
                    started = time.monotonic()
                    if stream_cut is not None:
                        return await self._stream(method, url, body, seconds, auth, stream_cut, started)
                    response = await self._http.request(method, url, json=body, timeout=seconds, auth=auth)
            except (httpx.TimeoutException, TimeoutError) as exc:
                return _fail(url, None, started, f"timeout: {type(exc).__name__}"), None, True
            except (httpx.TransportError, OSError) as exc:
                return _fail(url, None, started, f"connect error: {type(exc).__name__}: {exc}"), None, True
            finally:
                self._pool.in_flight[base] -= 1
        if response.status_code >= 400:
            return _http_error(url, response, started)
        try:
            data = response.json()
        except ValueError:
            return _fail(url, response.status_code, started, "response is not JSON"), None, True
        if not isinstance(data, dict):
            return _fail(url, response.status_code, started, "response is not a JSON object"), None, False
        latency = round((time.monotonic() - started) * 1000, 3)
        return Attempt(url=url, status=response.status_code, latency_ms=latency), data, False

    async def _stream(
        self,
        method: str,
        url: str,
        body: Mapping[str, Any] | None,
        seconds: float,
        auth: Any,
        stops: Sequence[str],
        started: float,
    ) -> tuple[Attempt, dict[str, Any] | None, bool]:
        """Send a streamed request and read it until a stop string; leaving the block closes the connection."""
        async with asyncio.timeout(seconds):
            async with self._http.stream(method, url, json=body, timeout=seconds, auth=auth) as response:
                if response.status_code >= 400:
                    await response.aread()
                    return _http_error(url, response, started)
                try:
                    streamed = await read_until(response, stops)
                except ValueError:
                    return _fail(url, response.status_code, started, "stream event is not JSON"), None, True
                if not streamed.complete:
                    error = (
                        f"the stream ended after {streamed.chunks} token(s) without a finish reason or a stop "
                        "string (cut by the server: llama-cpp-python cuts a stream when another request "
                        "arrives unless started with --interrupt_requests false)"
                    )
                    return _fail(url, response.status_code, started, error), None, True
        latency = round((time.monotonic() - started) * 1000, 3)
        return Attempt(url=url, status=response.status_code, latency_ms=latency), streamed.to_body(), False


def _http_error(url: str, response: httpx.Response, started: float) -> tuple[Attempt, None, bool]:
    excerpt = response.text[:300]
    retryable = response.status_code in _RETRY_STATUS or response.status_code >= 500
    return _fail(url, response.status_code, started, f"HTTP {response.status_code}: {excerpt}"), None, retryable


def _fail(url: str, status: int | None, started: float, error: str) -> Attempt:
    return Attempt(url=url, status=status, latency_ms=round((time.monotonic() - started) * 1000, 3), error=error)


def _details(attempts: Sequence[Attempt]) -> dict[str, Any]:
    return {"attempts": [attempt.to_dict() for attempt in attempts]}
