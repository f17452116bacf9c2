"""The nesting depth of a request body, bounded before anything parses or walks it.

Every JSON body of a hopsearch route meets recursive code: the standard library's parser (FastAPI's),
pydantic, the models' text check, the filter parser. Each recursion eats the one interpreter stack: a
body nested 1,000 deep drops the connection (RecursionError) or answers a bare 500 or "error parsing the
body", depending on how deep the stack already is. :func:`too_deep` scans the raw bytes without
recursion and names the first value nested deeper than :data:`MAX_JSON_DEPTH`, so the request is a 400
naming the field and the limit. The bound is far above any body the routes accept (filters nest at most
:data:`~hopsearch.service.retrieval.filters.MAX_DEPTH` deep: about 20 levels of JSON).
"""

from __future__ import annotations

import re

from hopsearch.service.errors import RequestInvalid

MAX_JSON_DEPTH = 64
#: A string (escapes included, so a bracket inside one is text).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
#: Strings and the structural characters.
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]')
#: Every byte but the brackets (deleted to leave the nesting alone).
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
#: An empty pair; one pass deletes those there are, not those the deletion makes: one level a pass.
_EMPTY_PAIR = re.compile(rb"\[\]|\{\}")


def _depth_within(body: bytes, limit: int) -> bool:
    """Whether the brackets outside strings nest at most ``limit`` deep: each round of deleting the
    empty pairs takes one level off (in C, ~100 times faster than walking the tokens, which is left
    for the body that fails, to name the field)."""
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    for _ in range(limit):
        if not brackets:
            return True
        brackets = _EMPTY_PAIR.sub(b"", brackets)
    return not brackets


class _Frame:
    """An open array (``key`` is the current index) or object (the current key)."""

    __slots__ = ("is_object", "key", "want_key")

    def __init__(self, is_object: bool) -> None:
        self.is_object = is_object
        self.key: str | int = "" if is_object else 0
        self.want_key = is_object


def too_deep(body: bytes, limit: int = MAX_JSON_DEPTH, where: str = "body") -> RequestInvalid | None:
    """Return the 400 for a body nesting arrays or objects deeper than ``limit``, naming the first such
    value (``body.filters.0.and.0…``); None for any other body (invalid JSON is the parser's to refuse)."""
    if body.count(b"[") + body.count(b"{") <= limit:  # cannot nest deeper than its brackets: no scan
        return None
    if _depth_within(body, limit):
        return None
    stack: list[_Frame] = []
    for token in _TOKENS.finditer(body):
        text = token.group()
        if text in (b"[", b"{"):
            if len(stack) >= limit:
                path = ".".join([where, *(str(frame.key) for frame in stack)])
                message = f"nested deeper than {limit} arrays and objects (the limit of a request body)"
                return RequestInvalid(message, field=path)
            stack.append(_Frame(text == b"{"))
        elif text in (b"]", b"}"):
            if not stack:
                return None
            stack.pop()
        elif not stack:
            continue
        elif text == b",":
            frame = stack[-1]
            if frame.is_object:
                frame.want_key = True
            elif isinstance(frame.key, int):
                frame.key += 1
        elif stack[-1].want_key:  # a string where an object's key goes
            stack[-1].key = text[1:-1].decode("utf-8", "replace")[:100]
            stack[-1].want_key = False
    return None
