"""Readiness of the service's dependencies: one probe of Elasticsearch and of each LLM base URL.

Liveness (the process answers) needs no probe; readiness does. An LLM server that accepted the
connection but has not answered ``GET /models`` within the wait is *busy*, not down: llama.cpp
serves one generation at a time and answers nothing else meanwhile. Only a refused or broken
connection or an error status makes a server *unreachable* (a 429/503 while this process has a
request in flight there is busy too). The LLM is ready when one base URL is ready or busy.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from hopsearch.service.errors import HopsearchError
from hopsearch.service.llm import LLMClient
from hopsearch.service.store import Store

LlmState = Literal["ready", "busy", "unreachable"]


@dataclass(frozen=True, slots=True)
class LlmProbe:
    """What one LLM base URL answered (``in_flight``: requests of this process there at the time)."""

    url: str
    state: LlmState
    ms: float
    in_flight: int = 0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"url": self.url, "state": self.state, "ms": self.ms, "in_flight": self.in_flight}
        if self.error is not None:
            body["error"] = self.error
        return body


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


async def probe_llm_url(llm: LLMClient, url: str, wait_s: float) -> LlmProbe:
    in_flight = llm.in_flight(url)
    started = time.perf_counter()
    try:
        response = await llm.get_models(url, wait_s)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        return LlmProbe(url, "unreachable", _ms(started), in_flight, f"connect error: {type(exc).__name__}")
    except httpx.TimeoutException as exc:  # connected (or queued behind our own requests), no answer yet
        return LlmProbe(url, "busy", _ms(started), in_flight, f"no answer within {wait_s:g} s ({type(exc).__name__})")
    except httpx.HTTPError as exc:
        return LlmProbe(url, "unreachable", _ms(started), in_flight, type(exc).__name__)
    if response.status_code == 200:
        return LlmProbe(url, "ready", _ms(started), in_flight)
    state: LlmState = "busy" if response.status_code in (429, 503) and in_flight else "unreachable"
    return LlmProbe(url, state, _ms(started), in_flight, f"HTTP {response.status_code}")


async def probe_llm(llm: LLMClient, wait_s: float) -> list[LlmProbe]:
    """Every base URL, probed at once."""
    return list(await asyncio.gather(*(probe_llm_url(llm, url, wait_s) for url in llm.base_urls)))


def llm_report(llm: LLMClient, probes: list[LlmProbe]) -> dict[str, Any]:
    states = {probe.state for probe in probes}
    state: LlmState = "ready" if "ready" in states else "busy" if "busy" in states else "unreachable"
    ms = min((probe.ms for probe in probes), default=0.0)
    body: dict[str, Any] = {"reachable": state != "unreachable", "state": state, "model": llm.model, "ms": ms}
    body["servers"] = [probe.to_dict() for probe in probes]
    return body


async def probe_es(store: Store, wait_s: float) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        cluster = await asyncio.wait_for(store.cluster_health(), wait_s)
    except TimeoutError:
        return {"reachable": False, "error": "timeout", "ms": _ms(started)}
    except HopsearchError as exc:
        return {"reachable": False, "error": exc.error_type, "ms": _ms(started)}
    status = cluster.get("status")
    return {"reachable": True, "version": store.info.number, "cluster_status": status, "ms": _ms(started)}


async def readiness(store: Store, llm: LLMClient, wait_s: float) -> dict[str, Any]:
    """``{"status": green|yellow|red, "ready", "elasticsearch", "llm"}``; yellow: the LLM is busy."""
    es, probes = await asyncio.gather(probe_es(store, wait_s), probe_llm(llm, wait_s))
    model = llm_report(llm, probes)
    ready = bool(es["reachable"]) and bool(model["reachable"])
    status = "red" if not ready else "green" if model["state"] == "ready" else "yellow"
    return {"status": status, "ready": ready, "elasticsearch": es, "llm": model}
