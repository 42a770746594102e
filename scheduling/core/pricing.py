"""Prices that trade a job's time against its cost: the arithmetic of PowerFlow's and
GreenFlow's budget price (``policies/budget_greedy.py``, point 4).

A job's options are points (cost, time): remaining energy (or carbon) and remaining
time in one configuration. At a price ``lam`` (seconds per joule, or per gram) the job
is best off in the configuration minimising ``time + lam * cost``; only the points on
the lower-left convex hull are ever chosen, and as ``lam`` falls the choice walks the
hull from its cheapest point towards its fastest. Pure Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import TypeVar

Tag = TypeVar("Tag")
Point = tuple[float, float, Tag]  # (cost, time, what the point stands for)
_cost_time = itemgetter(0, 1)


def lower_hull(points: Sequence[Point]) -> list[Point]:
    """The points that minimise ``time + lam * cost`` for some ``lam >= 0``, cheapest
    (and slowest) first: the lower-left convex hull."""
    pareto: list[Point] = []
    for p in sorted(points, key=_cost_time):
        if not pareto or p[1] < pareto[-1][1]:
            pareto.append(p)
    hull: list[Point] = []
    for p in pareto:
        while len(hull) >= 2:
            (c1, t1, _), (c2, t2, _) = hull[-2], hull[-1]
            if (t2 - t1) * (p[0] - c1) >= (p[1] - t1) * (c2 - c1):
                hull.pop()  # the middle point lies on or above the line: never chosen
            else:
                break
        hull.append(p)
    return hull


def hull_choice(hull: Sequence[Point], lam: float) -> Tag:
    """The tag of the hull point that minimises ``time + lam * cost``."""
    k = 0
    while k + 1 < len(hull) and (hull[k][1] - hull[k + 1][1]) > lam * (hull[k + 1][0] - hull[k][0]):
        k += 1
    return hull[k][2]


def price_for_share(
    hulls: Sequence[Sequence[Point]], share: float, weights: Sequence[float] | None = None
) -> float:
    """The lowest price at which the jobs' choices together cost at most ``share``
    (0 when even their fastest points fit; the cheapest points are assumed to fit).

    Every hull step from one point to the next buys ``dt`` seconds for ``dc`` more cost;
    taking steps in order of seconds per unit cost until the share is spent gives the
    price at which the next step is no longer worth it.

    ``weights`` (default all 1) multiply each hull's costs: a hull of one unit of work
    with weight ``w`` stands for jobs of ``w`` units in all whose hulls are that one
    scaled (cost and time alike, so its steps' seconds per cost are the same). Jobs
    that share a hull are priced once, with the same result as one by one.
    """
    if weights is None:
        weights = [1.0] * len(hulls)
    steps = [
        ((a[1] - b[1]) / (b[0] - a[0]), (b[0] - a[0]) * w)
        for h, w in zip(hulls, weights, strict=True)
        for a, b in zip(h, h[1:])  # noqa: B905 (pairs of neighbours)
    ]
    steps.sort(reverse=True)
    spent = sum(h[0][0] * w for h, w in zip(hulls, weights, strict=True))
    for seconds_per_cost, dc in steps:
        if spent + dc > share:
            return seconds_per_cost
        spent += dc
    return 0.0
