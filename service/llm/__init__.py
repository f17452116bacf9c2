"""The LLM client: OpenAI-compatible completions and chat, stop-string resolution, JSON replies."""

from hopsearch.service.llm.client import LLMClient, Message, backoff_delay
from hopsearch.service.llm.jsonmode import chat_json, parse_json_object, response_format
from hopsearch.service.llm.sse import cut_at_first
from hopsearch.service.llm.stops import complete_until, continue_until, identify_marker
from hopsearch.service.llm.types import Attempt, Completion, Engine, JsonReply, StopFallback, StopMethod, Usage

__all__ = [
    "Attempt",
    "Completion",
    "Engine",
    "JsonReply",
    "LLMClient",
    "Message",
    "StopFallback",
    "StopMethod",
    "Usage",
    "backoff_delay",
    "chat_json",
    "complete_until",
    "continue_until",
    "cut_at_first",
    "identify_marker",
    "parse_json_object",
    "response_format",
]
