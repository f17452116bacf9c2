"""Answering strategies behind one protocol: ``answer(question, options) -> Answer``."""

from hopsearch.service.strategies.base import (
    Answer,
    AskOptions,
    Budget,
    RetrieveMode,
    RunContext,
    Strategy,
    depth_for,
    run_recorded,
)
from hopsearch.service.strategies.deeprag import DeepRAG
from hopsearch.service.strategies.single import SingleRetrieval

__all__ = [
    "Answer",
    "AskOptions",
    "Budget",
    "DeepRAG",
    "RetrieveMode",
    "RunContext",
    "SingleRetrieval",
    "Strategy",
    "depth_for",
    "run_recorded",
]
