"""Hybrid fusion: which one can run here, and the request bodies of the server-side ones.

- ``rrf`` (default): Reciprocal Rank Fusion here, score(d) = Σ wᵢ / (k + rankᵢ(d)), with per-leg weights.
  Runs everywhere, also where Elasticsearch has no vectors (dense scores computed here).
- ``bool``: ONE request, ``bool.should`` of the BM25 ``multi_match`` and a ``knn`` query (8.12+ knn
  servers; Basic licence) — scores add up (``boost`` = the leg's weight).
- ``es_rrf``: Elasticsearch's ``rrf`` retriever (8.14+, the ``rank-rrf`` module and an Enterprise or
  trial licence; a Basic cluster refuses it). Without per-leg weights.

:func:`choose` decides from the server's capabilities and licence; what was asked but cannot run
falls back to ``rrf`` with a note saying why (reported with every result). The request bodies of the
server-side fusions are in :mod:`hopsearch.service.retrieval.bodies`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any, TypeVar

from hopsearch.service.store.esclient import ServerInfo
from hopsearch.service.types import Fusion, Hit, make_hit

T = TypeVar("T")

RRF_K = 60
#: Licence types under which Elasticsearch's ``rrf`` retriever runs.
RRF_LICENCES = frozenset({"enterprise", "trial"})


def rrf(
    lists: Sequence[Sequence[Hit]],
    *,
    k: int = RRF_K,
    size: int | None = None,
    weights: Sequence[float] | None = None,
) -> list[Hit]:
    """Weighted Reciprocal Rank Fusion, ranks from 1. Ties keep first-seen order."""
    return [with_score(hit, score) for hit, score in rrf_order(lists, _HIT_ID, k=k, size=size, weights=weights)]


def rrf_order(
    lists: Sequence[Sequence[T]],
    key: Callable[[T], str],
    *,
    k: int = RRF_K,
    size: int | None = None,
    weights: Sequence[float] | None = None,
) -> list[tuple[T, float]]:
    """Return the core of :func:`rrf` over any items named by ``key`` (:class:`Hit` objects, or Elasticsearch's
    raw hits by ``_id``): the first-seen item of each id and its score, best first, cut to ``size``.
    score(d) = Σ wᵢ / (k + rankᵢ(d)), ranks from 1; ties keep first-seen order."""
    scores: dict[str, float] = {}
    first: dict[str, T] = {}
    get = scores.get
    for number, items in enumerate(lists):
        weight = 1.0 if weights is None else weights[number]
        for rank, item in enumerate(items, start=k + 1):
            doc_id = key(item)
            previous = get(doc_id)
            if previous is None:
                scores[doc_id] = weight / rank
                first[doc_id] = item
            else:
                scores[doc_id] = previous + weight / rank
    order = sorted(scores.items(), key=itemgetter(1), reverse=True)  # stable: ties keep first-seen order
    return [(first[doc_id], score) for doc_id, score in order[:size]]


def rrf_groups(groups: Sequence[int], lists: Sequence[Sequence[Hit]], *, size: int | None = None) -> list[list[Hit]]:
    """Cut ``lists`` into consecutive groups of the given lengths, each group fused by :func:`rrf`."""
    return [rrf(group, size=size) for group in split(groups, lists)]


def split(lengths: Sequence[int], items: Sequence[T]) -> list[Sequence[T]]:
    """``items`` cut into consecutive runs of the given lengths."""
    out: list[Sequence[T]] = []
    at = 0
    for length in lengths:
        out.append(items[at : at + length])
        at += length
    return out


_HIT_ID: Callable[[Hit], str] = attrgetter("id")


def with_score(hit: Hit, score: float) -> Hit:
    return make_hit(hit.id, score, hit.title, hit.text, hit.source)


@dataclass(frozen=True, slots=True)
class Licence:
    """``GET /_license``: its type and status (``none`` where the server has no licensing)."""

    type: str
    status: str

    @property
    def rrf_retriever(self) -> bool:
        return self.status == "active" and self.type in RRF_LICENCES


def licence_of(response: Mapping[str, Any] | None) -> Licence:
    body = (response or {}).get("license") or {}
    return Licence(type=str(body.get("type") or "none"), status=str(body.get("status") or "none"))


def choose(
    asked: Fusion, info: ServerInfo, dense_method: str, licence: Licence | None, weighted: bool
) -> tuple[Fusion, str]:
    """Return the fusion that runs for ``asked`` here, and why it differs (empty when it does not)."""
    if asked in ("rrf", "none"):
        return "rrf", ""
    if asked == "bool":
        if dense_method == "knn" and info.version >= (8, 12):
            return "bool", ""
        if dense_method == "script_score":
            return "bool", ""
        return "rrf", f"bool fusion needs vectors on the server (kNN 8.12+ or script_score); here {dense_method}"
    if dense_method != "knn" or info.version < (8, 14):
        return "rrf", f"the rrf retriever needs Elasticsearch 8.14+ with kNN; here {info.number} ({dense_method})"
    if weighted:
        return "rrf", "the rrf retriever takes no per-leg weights"
    if licence is None or not licence.rrf_retriever:
        kind = licence.type if licence else "unknown"
        return "rrf", f"the rrf retriever needs an enterprise or trial licence; this cluster's is {kind}"
    return "es_rrf", ""


def refused(error: Mapping[str, Any]) -> bool:
    """Whether an ``_msearch`` item error says the server cannot run a retriever (module or licence)."""
    text = str(error).lower()
    return any(part in text for part in ("unknown retriever", "license", "security_exception", "non-compliant"))
