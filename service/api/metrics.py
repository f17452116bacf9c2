"""Prometheus metrics of one app: requests and latencies, retrievals, questions, LLM calls, tokens.

Each app owns its :class:`~prometheus_client.CollectorRegistry`, so several apps in one process (tests)
do not share counters. Labels are bounded: routes are templates (``/{index}/_retrieve``), never paths.

Every figure is this process's own: with ``hopsearch serve --workers N`` (or several instances) each
process counts what it served, and ``hopsearch_process_info{pid=…}`` says which process answered the
scrape; add the processes up (scrape each instance, or sum by ``pid``) for the whole service.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.process = Info("hopsearch_process", "The service process these figures belong to.", registry=r)
        self.process.info({"pid": str(os.getpid())})
        self.requests = Counter(
            "hopsearch_http_requests", "HTTP requests served.", ["method", "route", "status"], registry=r
        )
        self.latency = Histogram(
            "hopsearch_http_request_duration_seconds",
            "HTTP request latency (until the response is sent).",
            ["method", "route"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.retrievals = Counter(
            "hopsearch_retrievals", "Retrievals (queries sent to Elasticsearch).", ["source", "mode"], registry=r
        )
        self.questions = Counter("hopsearch_questions", "Questions answered.", ["strategy", "status"], registry=r)
        self.asks_in_flight = Gauge("hopsearch_asks_in_flight", "Questions being answered now.", registry=r)
        self.llm_calls = Counter("hopsearch_llm_calls", "LLM calls made by strategies.", ["strategy"], registry=r)
        self._children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        self._retrieval_children: dict[str, Counter] = {}
        self.audit_events = Counter(
            "hopsearch_audit_events",
            "Audit events: keys created and revoked, refused credentials and requests, by event.",
            ["event"],
            registry=r,
        )
        self.tokens = Counter(
            "hopsearch_llm_tokens", "LLM tokens, by direction (in, out).", ["strategy", "direction"], registry=r
        )

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:  # a label lookup costs more than the update itself: once per label set
            children = self.requests.labels(method, route, str(status)), self.latency.labels(method, route)
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def audit(self, event: str) -> None:
        """One audit event (a bounded name: ``key_created``, ``auth_missing``, ``action_refused``…)."""
        self.audit_events.labels(event).inc()

    def retrieval(self, mode: str, count: int = 1) -> None:
        child = self._retrieval_children.get(mode)
        if child is None:
            child = self._retrieval_children[mode] = self.retrievals.labels("retrieve", mode)
        child.inc(count)

    def question(self, strategy: str, status: str, totals: Mapping[str, Any]) -> None:
        self.questions.labels(strategy, status).inc()
        self.retrievals.labels("ask", "strategy").inc(int(totals.get("retrievals", 0)))
        self.llm_calls.labels(strategy).inc(int(totals.get("llm_calls", 0)))
        self.tokens.labels(strategy, "in").inc(int(totals.get("tokens_in", 0)))
        self.tokens.labels(strategy, "out").inc(int(totals.get("tokens_out", 0)))

    def render(self) -> bytes:
        return generate_latest(self.registry)
