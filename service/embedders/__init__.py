"""Embedders: a local CPU all-MiniLM-L6-v2 (numpy) and an OpenAI-compatible ``/v1/embeddings`` client."""

from __future__ import annotations

from hopsearch.service.embedders.factory import make_embedder
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.embedders.openai import OpenAIEmbedder

__all__ = ["MiniLMEmbedder", "OpenAIEmbedder", "make_embedder"]
