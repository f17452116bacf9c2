"""A password inside a configured URL (``http://user:password@host``) never shows in what hopsearch
prints or raises: the embedder's and the reranker's errors (the settings and ``doctor`` are checked in
test_cli_admin.py)."""

from __future__ import annotations

import pytest

from hopsearch.service.config.settings import shown_url
from hopsearch.service.embedders.openai import OpenAIEmbedder
from hopsearch.service.errors import EmbedderError, RerankError
from hopsearch.service.retrieval.rerank import HttpReranker
from hopsearch.service.types import Hit
from tests.api_fixtures import dead_url


def with_password(url: str, password: str) -> str:
    return url.replace("http://", f"http://someone:{password}@", 1)


async def test_embedder_and_reranker_errors_mask_the_url_password() -> None:
    embedder = OpenAIEmbedder(with_password(dead_url(), "embed-pw-81"), "m", dims=4, retries=0)
    try:
        with pytest.raises(EmbedderError) as embedding:
            await embedder.embed(["text"])
    finally:
        await embedder.aclose()
    reranker = HttpReranker(with_password(dead_url(), "rerank-pw-82"), "m", top_n=2)
    try:
        with pytest.raises(RerankError) as reranking:
            await reranker.rerank("q", [Hit(id="a", score=1.0, title="t", text="x")])
    finally:
        await reranker.aclose()
    assert "embed-pw-81" not in str(embedding.value) and "someone:**********@127.0.0.1" in str(embedding.value)
    assert "rerank-pw-82" not in str(reranking.value) and "someone:**********@127.0.0.1" in str(reranking.value)


def test_shown_url_masks_only_the_password() -> None:
    assert shown_url("http://u:p@ss@h:9/x") == "http://u:**********@h:9/x"
    assert shown_url("http://a:b@c,https://d:e@f") == "http://a:**********@c,https://d:**********@f"
    assert shown_url("http://host:9200/v1") == "http://host:9200/v1"
    assert shown_url("http://token@host") == "http://token@host"
