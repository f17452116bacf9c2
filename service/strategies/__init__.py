"""Answering strategies behind one protocol: ``answer(request, on_step=None) -> Answer``."""

from hopsearch.service.requests import AskOptions, AskRequest, Budget, RetrievalPolicy
from hopsearch.service.strategies.base import (
    Answer,
    RunContext,
    StepListener,
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
    "AskRequest",
    "Budget",
    "DeepRAG",
    "DualRAG",
    "HyDE",
    "Iterative",
    "RetrievalPolicy",
    "RunContext",
    "SingleRetrieval",
    "StepListener",
    "Strategy",
    "build_strategy",
    "depth_for",
    "run_recorded",
]
