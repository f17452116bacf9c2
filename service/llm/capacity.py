"""How many requests each LLM server runs at once, so the client queues the rest in-process.

llama.cpp serves ``total_slots`` generations at a time (one by default) and queues the others itself;
a request sent into that queue spends its timeout waiting behind our own requests, times out and is
retried. Per base URL the limit is ``llm_slots_per_url``, else the slot count the server reports
(``GET /props`` → ``total_slots``, asked once per URL), else none (vLLM and OpenAI batch: not asked).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import httpx

from hopsearch.service.config.settings import Settings

log = logging.getLogger(__name__)


class ServerSlots:
    """One semaphore per base URL that has a limit; ``capacity`` records what was found."""

    def __init__(self, http: httpx.AsyncClient, settings: Settings, auth: Mapping[str, tuple[str, str]]) -> None:
        self._http = http
        self._settings = settings
        self._auth = auth
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._probing: dict[str, asyncio.Lock] = {}
        self.capacity: dict[str, int | None] = {}

    async def for_url(self, base: str) -> asyncio.Semaphore | None:
        """Return the semaphore a request to ``base`` must hold while it is sent; ``None``: no limit of its own."""
        if base not in self.capacity:
            async with self._probing.setdefault(base, asyncio.Lock()):
                if base not in self.capacity:
                    slots = self._settings.llm_slots_per_url or (
                        None if self._settings.llm_engine in ("vllm", "openai") else await self._probe(base)
                    )
                    self.capacity[base] = slots
                    if slots:
                        self._slots[base] = asyncio.Semaphore(slots)
                        log.info("LLM server %s: %d request(s) at a time", base, slots)
        return self._slots.get(base)

    async def _probe(self, base: str) -> int | None:
        root = base.removesuffix("/v1")
        auth = self._auth.get(base, httpx.USE_CLIENT_DEFAULT)
        try:
            response = await self._http.get(f"{root}/props", timeout=min(5.0, self._settings.llm_timeout), auth=auth)
            total = response.json().get("total_slots") if response.status_code == 200 else None
        except (httpx.HTTPError, OSError, ValueError, AttributeError):
            return None
        return total if isinstance(total, int) and total > 0 else None
