"""The API's JSON parser: DRF's, refusing bodies nested deeper than any request needs.

Python's JSON decoder raises ``RecursionError`` on about a thousand levels of ``[`` (10 KB
of brackets), which DRF's parser does not catch: a 500 on every JSON endpoint, the
anonymous token endpoint included (a live probe). Such a body, and any nested deeper than
``MAX_DEPTH`` (no Wattflow request nests more than a few levels), is a 400 parse error.

Two more, from a fifth probe. DRF refuses the tokens ``NaN`` and ``Infinity``, but a number
past any float (``1e400``) was read as infinity: a 500 where it met a primary key
(``int(inf)``), and a team named "inf" where a string was expected. It is refused as those
tokens are. And an object naming a key twice (``{"name": "a", "name": "b"}``) was read as
its last value, silently: a body that two readers (a proxy, a log, this service) may read
two ways. It is refused, naming the key.
"""

from __future__ import annotations

import codecs
import json
import math

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.utils.json import strict_constant

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


def finite_float(text: str) -> float:
    """A JSON number with a fraction or exponent, refused past any float (``1e400``)."""
    value = float(text)
    if not math.isfinite(value):
        strict_constant(text)  # raises ValueError, DRF's own words for NaN and Infinity
    return value


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object, refused if it names a key twice."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"the key {twice!r} is given more than once")
    return data


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            data = json.load(
                codecs.getreader(encoding)(stream),
                parse_constant=strict_constant,
                parse_float=finite_float,
                object_pairs_hook=unique_keys,
            )
        except ValueError as exc:  # (as DRF's parser words it)
            raise ParseError(f"JSON parse error - {exc}") from None
        except RecursionError:
            raise ParseError(DEPTH_MESSAGE) from None
        if too_deep(data):
            raise ParseError(DEPTH_MESSAGE)
        return data
