"""OpenAI-compatible ``/v1/embeddings`` client (vLLM, TEI, llama.cpp, OpenAI)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import httpx

from hopsearch.service.errors import EmbedderError
from hopsearch.service.settings import shown_url


class OpenAIEmbedder:
    """Batched calls to ``POST {base_url}/embeddings``; vectors come back in input order."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        dims: int,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout: float = 60.0,
        retries: int = 2,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )
        self._model = model
        self._dims = dims
        self._batch_size = batch_size
        self._retries = retries

    @property
    def model_id(self) -> str:
        return f"openai:{self._model}"

    @property
    def dims(self) -> int:
        return self._dims

    async def _post(self, batch: Sequence[str]) -> list[list[float]]:
        last: Exception | None = None
        for attempt in range(self._retries + 1):
            try:
                response = await self._client.post("/embeddings", json={"model": self._model, "input": list(batch)})
                if response.status_code in (429, 500, 502, 503, 504) and attempt < self._retries:
                    await asyncio.sleep(0.2 * 2**attempt)
                    continue
                response.raise_for_status()
                data = sorted(response.json()["data"], key=lambda item: int(item["index"]))
                vectors = [[float(v) for v in item["embedding"]] for item in data]
            except (httpx.HTTPError, KeyError, ValueError, TypeError) as exc:
                last = exc
                if attempt < self._retries and isinstance(exc, httpx.TransportError):
                    await asyncio.sleep(0.2 * 2**attempt)
                    continue
                break
            if len(vectors) != len(batch) or any(len(v) != self._dims for v in vectors):
                raise EmbedderError(
                    f"embeddings server returned {len(vectors)} vectors for {len(batch)} texts "
                    f"or a dimension other than {self._dims}"
                )
            return vectors
        # httpx's messages quote the URL, user:password@ included.
        raise EmbedderError(shown_url(f"embeddings request to {self._client.base_url} failed: {last}")) from last

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            out.extend(await self._post(texts[start : start + self._batch_size]))
        return out

    async def aclose(self) -> None:
        await self._client.aclose()
