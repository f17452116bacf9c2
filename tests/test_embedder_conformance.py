"""One suite every local embedder passes (MiniLM, multilingual e5): the Embedder protocol's promises."""

from __future__ import annotations

import math

import pytest

from hopsearch.service.embedders import E5Embedder, MiniLMEmbedder
from hopsearch.service.types import Embedder, embed_queries

TEXTS = ["経費精算の締め日は毎月２５日です。", "The canteen opens at noon.", "", "保養所は軽井沢町にあります。"]


@pytest.fixture(scope="module", params=["minilm", "e5"])
def embedder(request: pytest.FixtureRequest, minilm: MiniLMEmbedder) -> Embedder:
    return minilm if request.param == "minilm" else E5Embedder(batch_size=2)


def dot(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


async def test_unit_vectors_of_the_announced_dimension_in_input_order(embedder: Embedder) -> None:
    vectors = await embedder.embed(TEXTS)
    assert len(vectors) == len(TEXTS) and all(len(v) == embedder.dims for v in vectors)
    assert all(math.isclose(dot(v, v), 1.0, rel_tol=1e-3) for v in vectors)
    one_by_one = [(await embedder.embed([text]))[0] for text in TEXTS]
    assert all(dot(a, b) > 0.999 for a, b in zip(vectors, one_by_one, strict=True))  # batching changes nothing
    assert await embedder.embed([]) == []
    assert embedder.model_id and isinstance(embedder.model_id, str)


async def test_query_vectors_have_the_same_shape(embedder: Embedder) -> None:
    [query] = await embed_queries(embedder, ["When does the canteen open?"])
    passages = await embedder.embed(["The canteen opens at noon.", "Leave requests go through HR."])
    assert len(query) == embedder.dims
    assert dot(query, passages[0]) > dot(query, passages[1])
