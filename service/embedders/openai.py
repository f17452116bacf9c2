"""OpenAI-compatible ``/v1/embeddings`` client (vLLM, TEI, llama.cpp, OpenAI).

One ``embed`` call is cut into batches of ``batch_size`` texts, and up to ``concurrency`` of them (over
all the calls in flight: the loader embeds the next batch while the last is still out) are sent at once:
a GPU server batches concurrent requests together, so one request at a time leaves it idle for each
round trip and each client-side JSON decode.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import httpx
import orjson

from hopsearch.service.config.settings import shown_url
from hopsearch.service.errors import EmbedderError


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
        concurrency: int = 4,
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
        self._concurrency = max(1, concurrency)
        self._slots: asyncio.Semaphore | None = None

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
                # orjson: a GPU server answers thousands of vectors a second, and decoding them with the
                # standard library took most of a core
                data = sorted(orjson.loads(response.content)["data"], key=lambda item: int(item["index"]))
                vectors = [item["embedding"] for item in data]
                if not all(isinstance(v, list) for v in vectors):
                    raise TypeError("an embedding is not a list of numbers")
            except (httpx.HTTPError, orjson.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
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
        batches = [texts[start : start + self._batch_size] for start in range(0, len(texts), self._batch_size)]
        if self._slots is None:  # one limit over every call in flight (the loader runs several at once)
            self._slots = asyncio.Semaphore(self._concurrency)
        slots = self._slots

        async def post(batch: Sequence[str]) -> list[list[float]]:
            async with slots:
                return await self._post(batch)

        if len(batches) == 1:
            return await post(batches[0])

        tasks = [asyncio.ensure_future(post(batch)) for batch in batches]
        try:
            results = await asyncio.gather(*tasks)
        finally:  # one failed batch: the others are not left running
            for task in tasks:
                task.cancel()
        return [vector for result in results for vector in result]

    async def aclose(self) -> None:
        await self._client.aclose()
