"""The Plotly figure builders are pure: plain values in, figure dicts out. No database."""

from datetime import UTC, datetime, timedelta

import pytest

from frontend import figures

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_projection_continues_the_average_rate_to_the_period_end():
    # given 3 kWh used in the first 10 of 30 days
    projected = figures.project_to_period_end(
        3.0, period_start=T0, period_end=T0 + timedelta(days=30), now=T0 + timedelta(days=10)
    )
    # then the same rate over 30 days gives 9 kWh
    assert projected == pytest.approx(9.0)


@pytest.mark.parametrize(
    ("now", "expected"),
    [(T0 - timedelta(hours=1), 0.0), (T0, 0.0), (T0 + timedelta(days=31), 3.0)],
)
def test_projection_before_the_period_is_zero_and_after_it_is_the_use(now, expected):
    assert (
        figures.project_to_period_end(
            3.0, period_start=T0, period_end=T0 + timedelta(days=30), now=now
        )
        == expected
    )


def test_a_stopped_budget_projects_what_it_has_used():
    # spent with pause_jobs, its jobs wait for the next period (a live probe's paused team
    # was projected at 17 times its limit)
    end = T0 + timedelta(days=30)
    now = T0 + timedelta(days=10)
    assert figures.project_to_period_end(
        3.0, period_start=T0, period_end=end, now=now, stopped=True
    ) == pytest.approx(3.0)


def test_cluster_power_figure_has_one_bar_per_node_and_the_total_in_kw():
    fig = figures.cluster_power_figure([("node-01", 887.25), ("node-02", 519.0)])
    (bar,) = fig["data"]
    assert (bar["type"], bar["x"], bar["y"]) == ("bar", ["node-01", "node-02"], [887.2, 519.0])
    assert fig["layout"]["title"]["text"] == "Cluster power now: 1.41 kW"
    assert bar["marker"]["color"] == figures.OKABE_ITO["sky_blue"]


def test_heatmap_places_each_gpu_in_its_node_row_and_index_column_with_gaps():
    fig = figures.gpu_utilisation_heatmap(
        [("node-02", 1, 50.0), ("node-01", 0, 97.0), ("node-01", 1, None), ("node-02", 0, 0.0)]
    )
    (heat,) = fig["data"]
    assert heat["y"] == ["node-01", "node-02"]
    assert heat["x"] == ["GPU 0", "GPU 1"]
    assert heat["z"] == [[97.0, None], [0.0, 50.0]]
    assert (heat["zmin"], heat["zmax"], heat["colorscale"]) == (0, 100, "Cividis")


def test_budget_burn_figure_carries_use_projection_and_both_limits():
    end = T0 + timedelta(days=30)
    now = T0 + timedelta(days=10)
    fig = figures.budget_burn_figure(
        title="Vision: energy (kWh)",
        unit="kWh",
        cumulative=[(T0 + timedelta(days=5), 1.0), (now, 3.0)],
        limit=12.0,
        warn_fraction=0.75,
        period_start=T0,
        period_end=end,
        now=now,
    )
    used, projection, hard, soft = fig["data"]
    assert used["x"] == [T0.isoformat(), (T0 + timedelta(days=5)).isoformat(), now.isoformat()]
    assert used["y"] == [0.0, 1.0, 3.0]
    assert (projection["x"], projection["y"]) == ([now.isoformat(), end.isoformat()], [3.0, 9.0])
    assert projection["line"]["dash"] == "dash"
    assert (hard["name"], hard["y"]) == ("hard limit", [12.0, 12.0])
    assert (soft["name"], soft["y"]) == ("soft limit", [9.0, 9.0])
    assert fig["layout"]["xaxis"]["range"] == [T0.isoformat(), end.isoformat()]
    # the used line is the thickest line of the chart
    assert used["line"]["width"] > max(t["line"]["width"] for t in (projection, hard, soft))
    # neither limit was crossed: no markers; the limits are in scale: no zoom
    assert "range" not in fig["layout"]["yaxis"]
    assert fig["layout"]["annotations"] == []


def test_budget_burn_figure_marks_where_soft_and_hard_limits_were_first_crossed():
    end = T0 + timedelta(days=30)
    at = [T0 + timedelta(days=d) for d in (1, 2, 3, 4)]
    fig = figures.budget_burn_figure(
        title="t",
        unit="kg CO2e",
        cumulative=[(at[0], 0.02), (at[1], 0.045), (at[2], 0.06), (at[3], 0.09)],
        limit=0.05,
        warn_fraction=0.8,
        period_start=T0,
        period_end=end,
        now=at[3],
    )
    by_name = {trace["name"]: trace for trace in fig["data"]}
    soft = by_name["soft limit crossed 11-03 00:00"]
    hard = by_name["hard limit crossed 11-04 00:00"]
    assert (soft["x"], soft["y"]) == ([at[1].isoformat()], [0.045])
    assert (hard["x"], hard["y"]) == ([at[2].isoformat()], [0.06])


def test_budget_burn_figure_zooms_to_a_tiny_use_and_names_the_limits_above_the_scale():
    now = T0 + timedelta(days=15)
    fig = figures.budget_burn_figure(
        title="t",
        unit="kWh",
        cumulative=[(now, 0.5)],
        limit=2304.0,
        warn_fraction=0.8,
        period_start=T0,
        period_end=T0 + timedelta(days=30),
        now=now,
    )
    # projection 1.0 kWh: the axis ends at 1.3, so the used line is drawn large
    assert fig["layout"]["yaxis"]["range"] == [0, pytest.approx(1.3)]
    (note,) = fig["layout"]["annotations"]
    assert "soft limit 1843, hard limit 2304 kWh are above this scale" in note["text"]


def test_budget_burn_figure_with_nothing_used_shows_the_limits_unzoomed():
    # given a 12 kWh budget with nothing used yet (zoomed to the use, the axis read 0-1 nano)
    fig = figures.budget_burn_figure(
        title="t", unit="kWh", cumulative=[], limit=12.0, warn_fraction=0.8,
        period_start=T0, period_end=T0 + timedelta(days=1), now=T0 + timedelta(hours=1),
    )  # fmt: skip
    # then the axis is Plotly's own, from zero to above the hard limit, and says nothing zoomed
    assert "range" not in fig["layout"]["yaxis"]
    assert fig["layout"]["yaxis"]["rangemode"] == "tozero"
    assert not fig["layout"].get("annotations")


def test_budget_burn_figure_without_a_limit_draws_no_limit_lines():
    fig = figures.budget_burn_figure(
        title="t",
        unit="kg CO2e",
        cumulative=[],
        limit=None,
        warn_fraction=0.8,
        period_start=T0,
        period_end=T0 + timedelta(days=1),
        now=T0 + timedelta(hours=12),
        colour=figures.CARBON_COLOUR,
    )
    assert [trace["name"] for trace in fig["data"]] == [
        "used (kg CO2e)",
        "projection (0 kg CO2e)",
    ]
    assert fig["data"][1]["y"] == [0.0, 0.0]
    assert fig["data"][0]["line"]["color"] == "#D55E00"


def test_whatif_figure_plots_hours_against_budget_and_marks_the_proposal():
    fig = figures.whatif_figure([(5.0, None), (10.0, 7200.0)], unit="kWh", proposed=10.0)
    (line,) = fig["data"]
    assert (line["x"], line["y"]) == ([5.0, 10.0], [None, 2.0])
    (marker,) = fig["layout"]["shapes"]
    assert (marker["x0"], marker["x1"]) == (10.0, 10.0)
    assert fig["layout"]["xaxis"]["title"]["text"] == "kWh"


def test_energy_carbon_bars_put_carbon_on_the_second_axis():
    fig = figures.energy_carbon_bars([("Vision", 2.5, 0.4), ("Language", 1.0, 0.2)], title="t")
    energy, carbon = fig["data"]
    assert (energy["x"], energy["y"]) == (["Vision", "Language"], [2.5, 1.0])
    assert (carbon["y"], carbon["yaxis"]) == ([0.4, 0.2], "y2")
    assert (energy["marker"]["color"], carbon["marker"]["color"]) == ("#0072B2", "#D55E00")
