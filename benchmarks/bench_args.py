"""Argument types the benchmark scripts share, so that a bad value is argparse's usage and
one line, not a traceback after minutes of set-up (``--repeats 0`` ended in an IndexError,
an unknown ``--policy`` in a KeyError)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

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


def fraction(text: str) -> float:
    """A finite number from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1")
    return value


def add_floor_args(parser: argparse.ArgumentParser) -> None:
    """The light-work floor's three constants (``online_model.FLOOR_MIN_WORKLOADS``,
    ``FLOOR_SHARE``, ``FLOOR_CAP``; docs/benchmarks.md, "The floor, read live"), for the
    benchmarks that read a job's draw as the service does; ``apply_floor_args`` sets them."""
    from scheduling.core import online_model as om

    parser.add_argument(
        "--floor-min",
        type=positive_int,
        default=om.FLOOR_MIN_WORKLOADS,
        help="online_model.FLOOR_MIN_WORKLOADS: the fewest workloads measured that set a floor",
    )
    parser.add_argument(
        "--floor-share",
        type=fraction,
        default=om.FLOOR_SHARE,
        help="online_model.FLOOR_SHARE: the light-work floor from idle (0) to the least draw (1)",
    )
    parser.add_argument(
        "--floor-cap", action="store_true", help="online_model.FLOOR_CAP = True (the capped rule)"
    )
    parser.add_argument(
        "--limit-bound",
        choices=("shape", "floor"),
        help="online_model.LIMIT_BOUND: the draw rises no higher than the lowest limit that "
        "did not cut the job's draw at its batch",
    )
    parser.add_argument(
        "--uncut-tol",
        type=fraction,
        default=om.UNCUT_TOL,
        help="online_model.UNCUT_TOL: a draw this far below the default limit's is not cut",
    )
    add_light_draw_arg(parser)


def add_light_draw_arg(parser: argparse.ArgumentParser) -> None:
    """``--light-draw-share S``: ``online_model.LIGHT_DRAW_SHARE`` (a job measured at one
    batch whose draw uses less than S of what the limits that left it alone allow is read
    flat in batch; off by default); ``apply_light_draw_arg`` sets it."""
    parser.add_argument(
        "--light-draw-share",
        type=fraction,
        default=None,
        help="online_model.LIGHT_DRAW_SHARE: read a job's draw as light work throughout below "
        "this share of the span from idle to its lowest uncut limit (off unless given)",
    )


def apply_light_draw_arg(args: argparse.Namespace) -> None:
    from scheduling.core import online_model as om

    om.LIGHT_DRAW_SHARE = args.light_draw_share


def apply_floor_args(args: argparse.Namespace) -> None:
    from scheduling.core import online_model as om

    om.FLOOR_MIN_WORKLOADS = args.floor_min
    om.FLOOR_SHARE = args.floor_share
    om.FLOOR_CAP = args.floor_cap
    om.LIMIT_BOUND = args.limit_bound
    om.UNCUT_TOL = args.uncut_tol
    apply_light_draw_arg(args)


def positive_float(text: str) -> float:
    """A finite number above 0 (an arrival scale of -1 reached the trace code as a
    traceback)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite positive number")
    return value


def policy_variants(parser: argparse.ArgumentParser, text: str, flag: str) -> dict:
    """``text`` as JSON mapping names to constructor-parameter objects, else the parser's
    error (a list ended in AttributeError after the baselines' runs)."""
    try:
        variants = json.loads(text)
    except ValueError as exc:
        parser.error(f"{flag} is not JSON: {exc}")
    if not isinstance(variants, dict) or not all(isinstance(v, dict) for v in variants.values()):
        parser.error(f"{flag} must map names to parameter objects")
    return variants


def scenario_or_error(parser: argparse.ArgumentParser, trace, cluster, **options):
    """``load_scenario(trace, cluster, **options)``, or the parser's error line where the
    inputs are refused (a trace, cluster or carbon file the simulator's command line
    refuses with one line ended these scripts in a traceback; an empty trace in a
    ValueError after its baselines had run)."""
    from scheduling.core.carbon_data import CarbonDataError
    from scheduling.simulator.cluster_spec import ClusterSpecError
    from scheduling.simulator.scenario import load_scenario
    from scheduling.simulator.traces import TraceError

    try:
        scenario = load_scenario(trace, cluster, **options)
    except (TraceError, ClusterSpecError, CarbonDataError, ValueError) as exc:
        parser.error(str(exc))
    if not scenario.jobs:
        parser.error(f"{Path(trace).name}: the trace has no jobs")
    return scenario
