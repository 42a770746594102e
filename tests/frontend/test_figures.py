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
    assert [trace["name"] for trace in fig["data"]] == ["used (kg CO2e)", "projection"]
    assert fig["data"][1]["y"] == [0.0, 0.0]
    assert fig["data"][0]["line"]["color"] == "#D55E00"


def test_average_jct_figure_is_in_hours_with_gaps_where_nothing_finished():
    fig = figures.avg_jct_figure([(T0, 5400.0), (T0 + timedelta(hours=1), None)])
    (line,) = fig["data"]
    assert line["y"] == [1.5, None]
    assert line["x"] == [T0.isoformat(), (T0 + timedelta(hours=1)).isoformat()]
    assert fig["layout"]["yaxis"]["title"]["text"] == "hours"


def test_queue_length_figure_steps_between_samples():
    fig = figures.queue_length_figure([(T0, 2), (T0 + timedelta(hours=1), 0)])
    assert fig["data"][0]["y"] == [2.0, 0.0]
    assert fig["data"][0]["line"]["shape"] == "hv"


def test_allocation_timeline_draws_closed_and_open_allocations_up_to_now():
    now = T0 + timedelta(hours=3)
    fig = figures.allocation_timeline_figure(
        [
            {
                "started_at": T0,
                "ended_at": T0 + timedelta(hours=1),
                "gpus": 2,
                "batch_size": 128,
                "sm_clock_mhz": None,
            },
            {
                "started_at": T0 + timedelta(hours=2),
                "ended_at": None,
                "gpus": 4,
                "batch_size": 256,
                "sm_clock_mhz": 1200,
            },
        ],
        now=now,
        state_colour="royalblue",
    )
    (bars,) = fig["data"]
    assert bars["base"] == [T0.isoformat(), (T0 + timedelta(hours=2)).isoformat()]
    assert bars["x"] == [3_600_000, 3_600_000]
    assert bars["y"] == ["#1", "#2"]
    assert bars["text"] == [
        "2 GPU · batch 128 · default clock",
        "4 GPU · batch 256 · 1200 MHz",
    ]
    assert bars["marker"]["color"] == "royalblue"


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
