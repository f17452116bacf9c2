"""Answering strategies behind one protocol: ``answer(question, options) -> Answer``."""

from hopsearch.service.strategies.base import (
    Answer,
    AskOptions,
    Budget,
    RetrievalPolicy,
    RunContext,
    Strategy,
    depth_for,
    run_recorded,
)
from hopsearch.service.strategies.deeprag import DeepRAG
from hopsearch.service.strategies.dualrag import DualRAG
from hopsearch.service.strategies.hyde import HyDE
from hopsearch.service.strategies.iterative import Iterative
from hopsearch.service.strategies.registry import STRATEGIES, build_strategy
from hopsearch.service.strategies.single import SingleRetrieval

__all__ = [
    "STRATEGIES",
    "Answer",
    "AskOptions",
    "Budget",
    "DeepRAG",
    "DualRAG",
    "HyDE",
    "Iterative",
    "RetrievalPolicy",
    "RunContext",
    "SingleRetrieval",
    "Strategy",
    "build_strategy",
    "depth_for",
    "run_recorded",
]
