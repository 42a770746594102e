"""Argument types the benchmark scripts share, so that a bad value is argparse's usage and
one line, not a traceback after minutes of set-up (``--repeats 0`` ended in an IndexError,
an unknown ``--policy`` in a KeyError)."""

from __future__ import annotations

import argparse

from scheduling.core.registry import policy_names


def _whole_at_least(low: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} {what}")
        return value

    return parse


# A whole number of at least 1 (repeats, runs, jobs, nodes), and of at least 0.
positive_int = _whole_at_least(1, "must be at least 1")
non_negative_int = _whole_at_least(0, "must not be negative")


def policy_list(text: str) -> list[str]:
    """Comma-separated policy names from the core's registry."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = policy_names()
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"{text!r}: {'unknown ' + ', '.join(unknown) if unknown else 'no policy'}; "
            f"known: {', '.join(known)}"
        )
    return names
