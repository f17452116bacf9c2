"""A cross-encoder reranker behind HTTP, in the common ``/rerank`` shape (vLLM, TEI, Jina, Cohere):

    POST {base_url}/rerank  {"model", "query", "documents": [...], "top_n"}
    → {"results": [{"index", "relevance_score"}, ...]}

Applied to the top ``top_n`` hits of any retrieval mode; the hits come back reordered by the model's
score (``Hit.score`` becomes the relevance score), the rest of the list after them in its old order.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from hopsearch.service.config.settings import Settings, shown_url
from hopsearch.service.errors import ConfigError, RerankError
from hopsearch.service.retrieval.fusion import with_score
from hopsearch.service.types import Hit


class HttpReranker:
    """``POST {base_url}/rerank``; one call per query."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        top_n: int = 20,
        api_key: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )
        self.model = model
        self.top_n = top_n

    async def aclose(self) -> None:
        await self._client.aclose()

    async def rerank(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        """Return the first ``top_n`` hits reordered by relevance to ``query``, then the rest as they were."""
        head, tail = list(hits[: self.top_n]), list(hits[self.top_n :])
        if not head:
            return list(hits)
        documents = [f"{h.title}\n{h.text}" if h.title else h.text for h in head]
        body = {"model": self.model, "query": query, "documents": documents, "top_n": len(head)}
        try:
            response = await self._client.post("/rerank", json=body)
            response.raise_for_status()
            results = response.json()["results"]
            scored = [(int(r["index"]), float(r["relevance_score"])) for r in results]
        except (httpx.HTTPError, KeyError, ValueError, TypeError) as exc:
            # httpx's messages quote the URL, user:password@ included.
            message = f"reranker at {self._client.base_url} failed: {type(exc).__name__}: {exc}"
            raise RerankError(shown_url(message)) from exc
        seen: set[int] = set()
        out: list[Hit] = []
        for index, score in sorted(scored, key=lambda pair: -pair[1]):
            if 0 <= index < len(head) and index not in seen:
                seen.add(index)
                out.append(with_score(head[index], score))
        out += [hit for number, hit in enumerate(head) if number not in seen]
        return out + tail


def make_reranker(settings: Settings) -> HttpReranker | None:
    """Return the configured reranker, or ``None`` when ``rerank_url`` is unset."""
    if not settings.rerank_url:
        return None
    if not settings.rerank_model:
        raise ConfigError("HOPSEARCH_RERANK_URL needs HOPSEARCH_RERANK_MODEL (the model name the server serves)")
    key = settings.rerank_api_key.get_secret_value() if settings.rerank_api_key else None
    return HttpReranker(settings.rerank_url, settings.rerank_model, top_n=settings.rerank_top_n, api_key=key)
