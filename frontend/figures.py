"""Plotly figures of the pages, built by pure functions from plain values (no ORM, no request).

Each function returns a figure *dict* (``{"data": [...], "layout": {...}}``) that the template
hands to ``Plotly.newPlot`` as JSON, and that the live JS updates with ``Plotly.react``.
Views gather the numbers; these functions only shape them, so their tests need no database.

Colours: the Okabe-Ito palette (Okabe & Ito, "Color Universal Design", 2008), readable with
the common colour-vision deficiencies, always in the same role (energy blue, carbon vermilion,
limits black, projections dashed); sequential data use cividis. Job states use the colours of
``cluster.choices.JobState`` and are always labelled in text as well.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

# Okabe-Ito, by role.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermilion": "#D55E00",
    "purple": "#CC79A7",
}
ENERGY_COLOUR = OKABE_ITO["blue"]
CARBON_COLOUR = OKABE_ITO["vermilion"]
LIMIT_COLOUR = OKABE_ITO["black"]
SOFT_LIMIT_COLOUR = OKABE_ITO["orange"]
JCT_COLOUR = OKABE_ITO["green"]
QUEUE_COLOUR = OKABE_ITO["purple"]
POWER_COLOUR = OKABE_ITO["sky_blue"]
SEQUENTIAL_SCALE = "Cividis"

_BASE_LAYOUT = {
    "margin": {"l": 56, "r": 16, "t": 40, "b": 44},
    "height": 260,
    "font": {"family": "system-ui, sans-serif", "size": 12},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "#ffffff",
    "legend": {"orientation": "h", "y": -0.25},
}


def _layout(title: str, **extra) -> dict:
    layout = {**_BASE_LAYOUT, "title": {"text": title, "font": {"size": 14}}}
    layout.update(extra)
    return layout


def _iso(when: datetime) -> str:
    return when.isoformat()


def project_to_period_end(
    used: float,
    *,
    period_start: datetime,
    period_end: datetime,
    now: datetime,
    stopped: bool = False,
) -> float:
    """Linear projection of a budget's use to the end of its period: the average rate so far,
    continued. Before the period starts nothing is projected (0); after it ends, or once the
    budget is ``stopped`` (spent, its action ``pause_jobs``: its jobs wait for the next
    period), ``used`` (a live probe's paused team was projected 17 times its limit)."""
    if now <= period_start:
        return 0.0
    if now >= period_end or stopped:
        return used
    elapsed_s = (now - period_start).total_seconds()
    total_s = (period_end - period_start).total_seconds()
    return used * total_s / elapsed_s


def cluster_power_figure(node_power_w: Sequence[tuple[str, float]]) -> dict:
    """Power drawn now, one bar per node, with the cluster total in the title (kW)."""
    names = [name for name, _ in node_power_w]
    watts = [round(float(power_w), 1) for _, power_w in node_power_w]
    total_kw = sum(watts) / 1000.0
    return {
        "data": [
            {
                "type": "bar",
                "x": names,
                "y": watts,
                "marker": {"color": POWER_COLOUR},
                "name": "power (W)",
                "hovertemplate": "%{x}: %{y:.0f} W<extra></extra>",
            }
        ],
        "layout": _layout(
            f"Cluster power now: {total_kw:.2f} kW",
            yaxis={"title": {"text": "W"}, "rangemode": "tozero"},
            showlegend=False,
        ),
    }


def gpu_utilisation_heatmap(cells: Iterable[tuple[str, int, float | None]]) -> dict:
    """GPU utilisation (%) as a node x GPU-index grid; a GPU with no reading is a gap."""
    cells = list(cells)
    nodes = sorted({node for node, _, _ in cells})
    indices = sorted({index for _, index, _ in cells})
    grid: list[list[float | None]] = [[None for _ in indices] for _ in nodes]
    for node, index, util in cells:
        grid[nodes.index(node)][indices.index(index)] = None if util is None else float(util)
    return {
        "data": [
            {
                "type": "heatmap",
                "x": [f"GPU {i}" for i in indices],
                "y": nodes,
                "z": grid,
                "zmin": 0,
                "zmax": 100,
                "colorscale": SEQUENTIAL_SCALE,
                "colorbar": {"title": {"text": "%"}},
                "hovertemplate": "%{y} %{x}: %{z:.0f}%<extra></extra>",
            }
        ],
        "layout": _layout("GPU utilisation", yaxis={"autorange": "reversed", "automargin": True}),
    }


def first_crossing(
    cumulative: Sequence[tuple[datetime, float]], level: float
) -> tuple[datetime, float] | None:
    """The first point of ``cumulative`` at or above ``level``; None if it never got there."""
    for at, value in cumulative:
        if value >= level:
            return at, value
    return None


# When the hard limit is this many times the larger of use and projection, the chart zooms
# to the use and names the limits in a note: drawn to scale, the used line would be a flat
# line on the axis (0.1 kWh against a 2,304 kWh month).
ZOOM_FACTOR = 20.0


def budget_burn_figure(
    *,
    title: str,
    unit: str,
    cumulative: Sequence[tuple[datetime, float]],
    limit: float | None,
    warn_fraction: float,
    period_start: datetime,
    period_end: datetime,
    now: datetime,
    colour: str = ENERGY_COLOUR,
    stopped: bool = False,
) -> dict:
    """Cumulative use (thick, filled) against a budget's hard limit (``limit``) and soft
    limit (``warn_fraction * limit``), with a dashed linear projection from now to the period's
    end and a marker where each limit was first crossed. ``cumulative`` is (time, total so
    far) in ``unit``, ascending."""
    used = cumulative[-1][1] if cumulative else 0.0
    projected = project_to_period_end(
        used, period_start=period_start, period_end=period_end, now=now, stopped=stopped
    )
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "x": [_iso(period_start)] + [_iso(t) for t, _ in cumulative],
            "y": [0.0] + [round(v, 6) for _, v in cumulative],
            "name": f"used ({unit})",
            "line": {"color": colour, "shape": "hv", "width": 3.5},
            "fill": "tozeroy",
        },
        {
            "type": "scatter",
            "mode": "lines",
            "x": [_iso(min(now, period_end)), _iso(period_end)],
            "y": [round(used, 6), round(projected, 6)],
            "name": f"projection ({projected:.3g} {unit})",
            "line": {"color": colour, "dash": "dash", "width": 2},
        },
    ]
    yaxis: dict = {"title": {"text": unit}, "rangemode": "tozero"}
    annotations = []
    if limit is not None:
        soft = limit * warn_fraction
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": [_iso(period_start), _iso(period_end)],
                "y": [limit, limit],
                "name": "hard limit",
                "line": {"color": LIMIT_COLOUR, "width": 1},
            }
        )
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": [_iso(period_start), _iso(period_end)],
                "y": [soft, soft],
                "name": "soft limit",
                "line": {"color": SOFT_LIMIT_COLOUR, "width": 1, "dash": "dot"},
            }
        )
        for level, name, symbol, marker_colour in (
            (soft, "soft limit crossed", "diamond", SOFT_LIMIT_COLOUR),
            (limit, "hard limit crossed", "x", LIMIT_COLOUR),
        ):
            crossed = first_crossing(cumulative, level)
            if crossed is None:
                continue
            at, value = crossed
            # The time goes in the legend, not beside the marker: both limits are often
            # crossed in the same ledger hour, and two labels would print over each other.
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "x": [_iso(at)],
                    "y": [round(value, 6)],
                    "name": f"{name} {at:%m-%d %H:%M}",
                    "marker": {"color": marker_colour, "size": 13, "symbol": symbol},
                }
            )
        top = max(used, projected)
        # Nothing used yet: the axis runs to the limits (zoomed to nothing, its ticks read
        # in nano-units).
        if 0.0 < top and top * ZOOM_FACTOR < limit:
            yaxis["range"] = [0, top * 1.3]
            annotations.append(
                {
                    "xref": "paper",
                    "yref": "paper",
                    "x": 0,
                    "y": 1,
                    "xanchor": "left",
                    "yanchor": "top",
                    "showarrow": False,
                    "align": "left",
                    "font": {"size": 11},
                    "text": (
                        f"zoomed to the use: soft limit {soft:.4g}, hard limit {limit:.4g} "
                        f"{unit} are above this scale"
                    ),
                }
            )
    return {
        "data": data,
        "layout": _layout(
            title,
            yaxis=yaxis,
            xaxis={"range": [_iso(period_start), _iso(period_end)]},
            annotations=annotations,
        ),
    }


def whatif_figure(
    points: Sequence[tuple[float, float | None]], *, unit: str, proposed: float | None
) -> dict:
    """Predicted average JCT (hours) against budget (``unit``) from simulator replays; the
    proposed budget is marked with a vertical line. A budget under which not every job
    finished has ``None`` and shows as a gap."""
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "x": [b for b, _ in points],
            "y": [None if v is None else round(v / 3600.0, 4) for _, v in points],
            "name": "predicted average JCT",
            "line": {"color": JCT_COLOUR},
        }
    ]
    shapes = []
    if proposed is not None:
        shapes.append(
            {
                "type": "line",
                "x0": proposed,
                "x1": proposed,
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "line": {"color": LIMIT_COLOUR, "dash": "dash"},
            }
        )
    return {
        "data": data,
        "layout": _layout(
            "Predicted average JCT against budget",
            xaxis={"title": {"text": unit}},
            yaxis={"title": {"text": "hours"}, "rangemode": "tozero"},
            shapes=shapes,
            showlegend=False,
        ),
    }


def energy_carbon_bars(rows: Sequence[tuple[str, float, float]], *, title: str) -> dict:
    """Energy (kWh, left axis) and carbon (kg, right axis) per label, side by side."""
    labels = [label for label, _, _ in rows]
    return {
        "data": [
            {
                "type": "bar",
                "x": labels,
                "y": [round(kwh, 6) for _, kwh, _ in rows],
                "name": "energy (kWh)",
                "marker": {"color": ENERGY_COLOUR},
                "offsetgroup": "energy",
            },
            {
                "type": "bar",
                "x": labels,
                "y": [round(kg, 6) for _, _, kg in rows],
                "name": "carbon (kg CO2e)",
                "marker": {"color": CARBON_COLOUR},
                "yaxis": "y2",
                "offsetgroup": "carbon",
            },
        ],
        "layout": _layout(
            title,
            barmode="group",
            margin={**_BASE_LAYOUT["margin"], "r": 64},
            yaxis={"title": {"text": "kWh"}, "rangemode": "tozero"},
            yaxis2={
                "title": {"text": "kg CO2e"},
                "overlaying": "y",
                "side": "right",
                "rangemode": "tozero",
            },
        ),
    }
