"""Prompt tokens of a streamed completion, counted by the server that served it.

A streamed request closed at the first marker (:mod:`~hopsearch.service.llm.sse`) comes back without
``usage``: llama-cpp-python sends none when streaming, and a stream closed early never reaches the
final usage event that OpenAI-style servers send. The trace would then show ``tokens_in`` 0 for the
step, as if the prompt were free. Instead the client asks the same server to count the prompt with
its own tokenizer — llama-cpp-python: ``POST /extras/tokenize/count`` (``{"input": …}`` → ``{"count":
N}``, BOS included, as its completions' ``usage.prompt_tokens``); llama.cpp's ``llama-server``: ``POST
/tokenize`` (``{"content": …, "add_special": true}`` → ``{"tokens": […]}``). Both at the server root
(the base URL less ``/v1``). A tokenize request runs no model, and is not an LLM call in the trace.

A server with neither endpoint (checked once per base URL) leaves ``tokens_in`` at 0 and is logged
once; so are counting errors.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import httpx

log = logging.getLogger(__name__)

Endpoint = Literal["llama-cpp-python", "llama.cpp"]
_ORDER: tuple[Endpoint, ...] = ("llama-cpp-python", "llama.cpp")


def _request(endpoint: Endpoint, root: str, prompt: str) -> tuple[str, dict[str, Any]]:
    if endpoint == "llama-cpp-python":
        return f"{root}/extras/tokenize/count", {"input": prompt}
    return f"{root}/tokenize", {"content": prompt, "add_special": True}


def _count(endpoint: Endpoint, body: Any) -> int | None:
    if not isinstance(body, dict):
        return None
    if endpoint == "llama-cpp-python":
        count = body.get("count")
        return count if isinstance(count, int) and not isinstance(count, bool) else None
    tokens = body.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None


class PromptCounter:
    """Counts prompts on the server that served them; remembers per base URL which endpoint works."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http
        #: base URL -> the endpoint that counted there, or None: the server has none of them.
        self._found: dict[str, Endpoint | None] = {}

    async def count(self, base_url: str, prompt: str, *, auth: Any, wait_s: float) -> int | None:
        """Return the server's token count of ``prompt``, or None where it cannot count."""
        known = base_url in self._found
        endpoints = (self._found[base_url],) if known else _ORDER
        root = base_url.removesuffix("/v1")
        for endpoint in endpoints:
            if endpoint is None:
                return None
            url, body = _request(endpoint, root, prompt)
            try:
                response = await self._http.post(url, json=body, auth=auth, timeout=wait_s)
            except httpx.HTTPError as exc:
                log.warning("could not count the prompt's tokens at %s: %s", url, exc)
                return None
            try:
                data = response.json() if response.status_code == 200 else None
            except ValueError:
                data = None
            counted = _count(endpoint, data)
            if counted is not None:
                self._found[base_url] = endpoint
                return counted
            if known:  # it counted before: a passing failure, not a missing endpoint
                log.warning("could not count the prompt's tokens at %s: HTTP %d", url, response.status_code)
                return None
        self._found[base_url] = None
        log.warning("%s has no /extras/tokenize/count nor /tokenize: streamed steps keep tokens_in 0", root)
        return None
