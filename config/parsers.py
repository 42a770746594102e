"""The API's JSON parser: DRF's, refusing bodies nested deeper than any request needs.

Python's JSON decoder raises ``RecursionError`` on about a thousand levels of ``[`` (10 KB
of brackets), which DRF's parser does not catch: a 500 on every JSON endpoint, the
anonymous token endpoint included (a live probe). Such a body, and any nested deeper than
``MAX_DEPTH`` (no Wattflow request nests more than a few levels), is a 400 parse error.
"""

from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError

MAX_DEPTH = 32
DEPTH_MESSAGE = f"JSON parse error - nested more than {MAX_DEPTH} levels deep."


def too_deep(value, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` (parsed JSON) nests lists and objects more than ``limit`` deep."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(DEPTH_MESSAGE) from None
        if too_deep(data):
            raise ParseError(DEPTH_MESSAGE)
        return data
