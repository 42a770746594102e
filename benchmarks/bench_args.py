"""Argument types the benchmark scripts share, so that a bad value is argparse's usage and
one line, not a traceback after minutes of set-up (``--repeats 0`` ended in an IndexError,
an unknown ``--policy`` in a KeyError)."""

from __future__ import annotations

import argparse

from scheduling.core.registry import policy_names


def positive_int(text: str) -> int:
    """A whole number of at least 1 (repeats, runs, jobs, nodes)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    """A whole number of at least 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


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
