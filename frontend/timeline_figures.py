"""Plotly figures of things over time: grid intensity beside what the cluster did, queue and
running jobs, the JCT distribution, one job's allocations with its energy.

Pure functions like ``frontend.figures`` (plain values in, figure dicts out, no ORM), in the
same colours. Nothing is drawn for times without data: series start where their data starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from frontend.figures import (
    _BASE_LAYOUT,
    CARBON_COLOUR,
    ENERGY_COLOUR,
    JCT_COLOUR,
    OKABE_ITO,
    POWER_COLOUR,
    QUEUE_COLOUR,
    _iso,
    _layout,
)

CLEAN_FILL = "rgba(0, 158, 115, 0.13)"  # Okabe-Ito green, light
DIRTY_FILL = "rgba(213, 94, 0, 0.11)"  # Okabe-Ito vermilion, light
# The same two colours, stronger, for the legend's swatches (small squares).
CLEAN_SWATCH = "rgba(0, 158, 115, 0.45)"
DIRTY_SWATCH = "rgba(213, 94, 0, 0.4)"
ROLLING_JOBS = 10  # the rolling average of JCT spans this many completions
# At most this many points a trace of the JCT and queue figures: a week of a 100-node
# cluster is 20,000 completions and a day 14,000 queue steps, a 3 MB dashboard that no
# 1,400-pixel-wide chart can show. Below it every job and every step is drawn.
MAX_POINTS = 600


def tertiles(values: Sequence[float]) -> tuple[float, float]:
    """The values a third and two thirds of the way up ``values`` (nearest rank)."""
    ordered = sorted(values)
    n = len(ordered)
    return ordered[round((n - 1) / 3)], ordered[round(2 * (n - 1) / 3)]


def grid_intensity_figure(
    intensity: Sequence[tuple[datetime, float]],
    *,
    now: datetime,
    zone: str,
    power_kw: Sequence[tuple[datetime, float]],
    running: Sequence[tuple[datetime, int]],
    note: str = "",
) -> dict:
    """The grid's hourly intensity (g/kWh, a step per hour; past solid, stored hours ahead
    dashed) over the cluster's measured power (kW) and the jobs it ran, on one time axis.
    Hours in the lowest third of the shown intensities are shaded green (clean), the highest
    third vermilion (dirty), across both panels, so what the scheduler did in each is visible.
    """
    data: list[dict] = []
    shapes: list[dict] = []
    if intensity:
        low, high = tertiles([ci for _, ci in intensity])
        past = [(t, ci) for t, ci in intensity if t <= now]
        ahead = [(t, ci) for t, ci in intensity if t >= (past[-1][0] if past else now)]
        for points, name, dash in ((past, "grid intensity", "solid"), (ahead, "ahead", "dash")):
            if not points:
                continue
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": [_iso(t) for t, _ in points],
                    "y": [round(ci, 1) for _, ci in points],
                    "name": f"{name} (g/kWh)",
                    "line": {"color": CARBON_COLOUR, "shape": "hv", "dash": dash, "width": 2},
                    "hovertemplate": "%{x}: %{y:.0f} g/kWh<extra></extra>",
                }
            )
        step = (intensity[1][0] - intensity[0][0]) if len(intensity) > 1 else None
        for t, ci in intensity:
            if step is None or low < ci < high:
                continue
            shapes.append(
                {
                    "type": "rect",
                    "xref": "x",
                    "yref": "paper",
                    "x0": _iso(t),
                    "x1": _iso(t + step),
                    "y0": 0,
                    "y1": 1,
                    "fillcolor": CLEAN_FILL if ci <= low else DIRTY_FILL,
                    "line": {"width": 0},
                    "layer": "below",
                }
            )
        # Legend entries for the shading (shapes have none).
        for label, colour in (
            (f"clean hour (≤ {low:.0f} g/kWh)", CLEAN_SWATCH),
            (f"dirty hour (≥ {high:.0f} g/kWh)", DIRTY_SWATCH),
        ):
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "x": [None],
                    "y": [None],
                    "name": label,
                    "marker": {"symbol": "square", "size": 12, "color": colour},
                    "hoverinfo": "skip",
                }
            )
    data.append(
        {
            "type": "scatter",
            "mode": "lines",
            "x": [_iso(t) for t, _ in power_kw],
            "y": [round(kw, 3) for _, kw in power_kw],
            "name": "cluster GPU power (kW)",
            "yaxis": "y2",
            "line": {"color": POWER_COLOUR, "width": 2},
            "fill": "tozeroy",
            "fillcolor": "rgba(86, 180, 233, 0.25)",
            "hovertemplate": "%{x}: %{y:.2f} kW<extra></extra>",
        }
    )
    data.append(
        {
            "type": "scatter",
            "mode": "lines",
            "x": [_iso(t) for t, _ in running],
            "y": list(n for _, n in running),
            "name": "jobs running",
            "yaxis": "y3",
            "line": {"color": OKABE_ITO["black"], "shape": "hv", "width": 1.5},
            "hovertemplate": "%{x}: %{y} running<extra></extra>",
        }
    )
    title = f"Grid carbon intensity ({zone}) and what the cluster did"
    if note:
        title += f"<br><sup>{note}</sup>"
    return {
        "data": data,
        "layout": _layout(
            title,
            height=420,
            margin={**_BASE_LAYOUT["margin"], "r": 56, "t": 60},
            shapes=shapes,
            xaxis={"type": "date", "anchor": "y2"},
            yaxis={"title": {"text": "g CO2e/kWh"}, "domain": [0.55, 1], "rangemode": "tozero"},
            yaxis2={"title": {"text": "kW"}, "domain": [0, 0.45], "rangemode": "tozero"},
            yaxis3={
                "title": {"text": "jobs"},
                "overlaying": "y2",
                "side": "right",
                "rangemode": "tozero",
                "showgrid": False,
            },
            legend={"orientation": "h", "y": -0.18},
        ),
    }


def _thin_steps(
    points: Sequence[tuple[datetime, int, int]], limit: int
) -> list[tuple[datetime, int, int]]:
    """At most ``limit`` + 2 of ``points`` (steps in time order): the first, then the last
    step of each of ``limit`` equal slices of the time span, then the last: exact values at
    the times drawn; steps within a slice (a span / ``limit`` wide) are not drawn."""
    if len(points) <= limit + 2:
        return list(points)
    first, last = points[0][0], points[-1][0]
    width = (last - first) / limit
    kept, slot = [points[0]], 0
    for point in points[1:-1]:
        k = min(int((point[0] - first) / width), limit - 1)
        if k == slot and len(kept) > 1:
            kept[-1] = point
        else:
            kept.append(point)
            slot = k
    kept.append(points[-1])
    return kept


def queue_running_figure(points: Sequence[tuple[datetime, int, int]], *, scope: str) -> dict:
    """Jobs waiting and running as steps, from the first event on (nothing before data);
    over ``MAX_POINTS`` steps, the state at the last step of each of ``MAX_POINTS`` slices."""
    points = _thin_steps(points, MAX_POINTS)
    x = [_iso(t) for t, _, _ in points]
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines",
                "x": x,
                "y": [q for _, q, _ in points],
                "name": "queued",
                "line": {"color": QUEUE_COLOUR, "shape": "hv", "width": 2},
            },
            {
                "type": "scatter",
                "mode": "lines",
                "x": x,
                "y": [r for _, _, r in points],
                "name": "running",
                "line": {"color": ENERGY_COLOUR, "shape": "hv", "width": 2},
            },
        ],
        "layout": _layout(
            f"Queued and running jobs ({scope})",
            yaxis={"title": {"text": "jobs"}, "rangemode": "tozero"},
            xaxis={"type": "date"},
        ),
    }


def _span(hours: float) -> str:
    """A JCT for a title: hours from one hour up, else minutes, else seconds (the demo's jobs,
    sped up 1000x, take seconds: "0.01 h" and "0.00 h" said nothing)."""
    if hours >= 1.0:
        return f"{hours:.2f} h"
    if hours * 60.0 >= 1.0:
        return f"{hours * 60.0:.1f} min"
    return f"{hours * 3600.0:.0f} s"


def jct_figure(completions: Sequence[tuple[datetime, float]], *, scope: str) -> dict:
    """Completed jobs' JCT: the empirical CDF (left) and each job at its finish time with the
    rolling mean of the last ``ROLLING_JOBS`` completions (right), in hours.
    ``completions`` are (finished_at, jct_s). Over ``MAX_POINTS`` jobs, the CDF is drawn at
    ``MAX_POINTS`` evenly spaced ranks, one job in ``k`` is drawn (every ``k``-th by finish
    time) and the rolling mean spans ``k`` jobs if that is more; the title counts them all."""
    done = sorted(completions)
    hours = [jct / 3600.0 for _, jct in done]
    ordered = sorted(hours)
    n = len(ordered)
    every = max(1, -(-n // MAX_POINTS))  # ceil(n / MAX_POINTS)
    span = max(ROLLING_JOBS, every)
    # The CDF's steps at these ranks (all of them up to MAX_POINTS jobs), the last always.
    ranks = sorted({min(n, -(-(i + 1) * n // MAX_POINTS)) for i in range(MAX_POINTS)})
    ranks = ranks if n > MAX_POINTS else list(range(1, n + 1))
    # Every k-th job by finish time, ending at the last one.
    drawn = list(range((n - 1) % every, n, every))
    rolling = []
    for i in drawn:
        window = hours[max(0, i + 1 - span) : i + 1]
        rolling.append(round(sum(window) / len(window), 4))
    title = f"JCT of completed jobs ({scope})"
    if n:
        median = ordered[(n - 1) // 2]
        title += f": {n} jobs, median {_span(median)}, mean {_span(sum(hours) / n)}"
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines",
                # A leading 0 at the shortest JCT, so the first step rises from the axis.
                "x": [round(h, 4) for h in ordered[:1] + [ordered[r - 1] for r in ranks]],
                "y": [0.0] * min(n, 1) + [round(r / n, 4) for r in ranks],
                "name": "share finished within (CDF)",
                "line": {"color": JCT_COLOUR, "shape": "hv", "width": 2},
                "hovertemplate": "%{y:.0%} within %{x:.2f} h<extra></extra>",
            },
            {
                "type": "scatter",
                "mode": "markers",
                "x": [_iso(done[i][0]) for i in drawn],
                "y": [round(hours[i], 4) for i in drawn],
                "name": "one job" if every == 1 else f"one job in {every}",
                "xaxis": "x2",
                "yaxis": "y2",
                "marker": {"color": JCT_COLOUR, "size": 5, "opacity": 0.45},
                "hovertemplate": "finished %{x}: %{y:.2f} h<extra></extra>",
            },
            {
                "type": "scatter",
                "mode": "lines",
                "x": [_iso(done[i][0]) for i in drawn],
                "y": rolling,
                "name": f"rolling mean of {span}",
                "xaxis": "x2",
                "yaxis": "y2",
                "line": {"color": OKABE_ITO["black"], "width": 2},
            },
        ],
        "layout": _layout(
            title,
            height=300,
            xaxis={"domain": [0, 0.42], "title": {"text": "JCT (hours)"}, "rangemode": "tozero"},
            yaxis={"title": {"text": "share of jobs"}, "range": [0, 1.02], "tickformat": ".0%"},
            xaxis2={"domain": [0.55, 1], "type": "date", "anchor": "y2"},
            yaxis2={"anchor": "x2", "title": {"text": "hours"}, "rangemode": "tozero"},
            legend={"orientation": "h", "y": -0.3},
        ),
    }


def job_timeline_figure(
    allocations: Sequence[dict],
    energy: Sequence[tuple[datetime, float]],
    *,
    now: datetime,
    state_colour: str,
) -> dict:
    """One job's allocations over time (top: a bar per allocation on the row of its GPU
    count, labelled with node, GPUs and clock or power limit) above its cumulative measured
    energy (bottom, kWh). ``allocations`` are dicts with ``started_at``, ``ended_at`` (None:
    open, drawn to ``now``), ``gpus`` (count), ``placement`` (e.g. "node-01: 0,1"),
    ``batch_size``, ``sm_clock_mhz`` and ``power_limit_w``; ``energy`` is (time, kWh so
    far), ascending."""
    bases, widths_ms, rows, texts = [], [], [], []
    for alloc in allocations:
        end = alloc["ended_at"] or now
        bases.append(_iso(alloc["started_at"]))
        widths_ms.append(round((end - alloc["started_at"]).total_seconds() * 1000.0))
        rows.append(f"{alloc['gpus']} GPU")
        if alloc.get("power_limit_w"):
            tuning = f"{alloc['power_limit_w']} W limit"
        elif alloc.get("sm_clock_mhz"):
            tuning = f"{alloc['sm_clock_mhz']} MHz"
        else:
            tuning = "default clock"
        texts.append(f"{alloc['placement']} · batch {alloc['batch_size']} · {tuning}")
    counts = sorted({a["gpus"] for a in allocations})
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "base": bases,
            "x": widths_ms,
            "y": rows,
            "text": texts,
            "textposition": "inside",
            "insidetextanchor": "start",
            "marker": {"color": state_colour, "line": {"color": "#ffffff", "width": 1.5}},
            "name": "allocation",
            "hovertemplate": "%{y}: %{text}<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": [_iso(t) for t, _ in energy],
            "y": [round(kwh, 6) for _, kwh in energy],
            "name": "energy used (kWh)",
            "xaxis": "x",
            "yaxis": "y2",
            "line": {"color": ENERGY_COLOUR, "width": 2},
            "fill": "tozeroy",
            "hovertemplate": "%{x}: %{y:.3f} kWh<extra></extra>",
        },
    ]
    return {
        "data": data,
        "layout": _layout(
            "Allocations and energy",
            height=360,
            xaxis={"type": "date", "anchor": "y2"},
            yaxis={
                "domain": [0.5, 1],
                "type": "category",
                "categoryorder": "array",
                "categoryarray": [f"{c} GPU" for c in counts],
                "title": {"text": "GPUs"},
            },
            yaxis2={"domain": [0, 0.4], "title": {"text": "kWh"}, "rangemode": "tozero"},
            showlegend=False,
            barmode="overlay",
        ),
    }
