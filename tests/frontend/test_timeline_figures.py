"""The over-time figures (grid, queue, JCT, a job's allocations) are pure: no database."""

from datetime import UTC, datetime, timedelta

import pytest

from frontend import timeline_figures as tf

T0 = datetime(2026, 11, 1, tzinfo=UTC)
H = timedelta(hours=1)


def test_tertiles_split_the_values_in_thirds():
    assert tf.tertiles([300.0, 100.0, 200.0, 400.0, 500.0, 600.0, 700.0]) == (300.0, 500.0)


def test_grid_figure_shades_clean_and_dirty_hours_across_both_panels():
    intensity = [(T0 + i * H, ci) for i, ci in enumerate([100.0, 200.0, 300.0, 150.0, 250.0])]
    fig = tf.grid_intensity_figure(
        intensity,
        now=T0 + 2 * H + timedelta(minutes=30),
        zone="ES",
        power_kw=[(T0 + H, 1.5), (T0 + 2 * H, 2.0)],
        running=[(T0 + H, 3)],
        note="replayed",
    )
    names = [t["name"] for t in fig["data"]]
    assert names[:2] == ["grid intensity (g/kWh)", "ahead (g/kWh)"]
    past, ahead = fig["data"][:2]
    # the past ends at the hour containing now; the stored hours ahead start there, dashed
    assert past["y"] == [100.0, 200.0, 300.0]
    assert (ahead["y"], ahead["line"]["dash"]) == ([300.0, 150.0, 250.0], "dash")
    # tertiles (150, 250): 100 and 150 are clean, 300 and 250 dirty, 200 neither
    fills = [(s["x0"], s["fillcolor"]) for s in fig["layout"]["shapes"]]
    assert fills == [
        (T0.isoformat(), tf.CLEAN_FILL),
        ((T0 + 2 * H).isoformat(), tf.DIRTY_FILL),
        ((T0 + 3 * H).isoformat(), tf.CLEAN_FILL),
        ((T0 + 4 * H).isoformat(), tf.DIRTY_FILL),
    ]
    assert all((s["yref"], s["y0"], s["y1"]) == ("paper", 0, 1) for s in fig["layout"]["shapes"])
    power = next(t for t in fig["data"] if t["name"] == "cluster GPU power (kW)")
    running = next(t for t in fig["data"] if t["name"] == "jobs running")
    assert (power["y"], power["yaxis"]) == ([1.5, 2.0], "y2")
    assert (running["y"], running["yaxis"]) == ([3], "y3")
    assert "replayed" in fig["layout"]["title"]["text"]


def test_grid_figure_without_stored_hours_draws_no_intensity_and_no_shading():
    fig = tf.grid_intensity_figure([], now=T0, zone="ES", power_kw=[], running=[])
    assert [t["name"] for t in fig["data"]] == ["cluster GPU power (kW)", "jobs running"]
    assert fig["layout"]["shapes"] == []


def test_queue_running_figure_draws_both_as_steps_and_names_its_scope():
    fig = tf.queue_running_figure([(T0, 2, 0), (T0 + H, 1, 1)], scope="your team Vision")
    queued, running = fig["data"]
    assert (queued["y"], running["y"]) == ([2, 1], [0, 1])
    assert queued["x"][0] == T0.isoformat()  # starts at the first event, no zeros before
    assert queued["line"]["shape"] == running["line"]["shape"] == "hv"
    assert fig["layout"]["title"]["text"] == "Queued and running jobs (your team Vision)"


def test_jct_figure_has_a_cdf_and_a_rolling_mean_in_hours():
    done = [(T0 + i * H, jct) for i, jct in enumerate([3600.0, 7200.0, 10800.0, 1800.0])]
    fig = tf.jct_figure(done, scope="all teams")
    cdf, dots, rolling = fig["data"]
    assert (cdf["x"], cdf["y"]) == ([0.5, 0.5, 1.0, 2.0, 3.0], [0.0, 0.25, 0.5, 0.75, 1.0])
    assert dots["y"] == [1.0, 2.0, 3.0, 0.5]
    assert rolling["y"] == [1.0, 1.5, 2.0, pytest.approx(1.625)]
    assert fig["layout"]["title"]["text"] == (
        "JCT of completed jobs (all teams): 4 jobs, median 1.00 h, mean 1.62 h"
    )


def test_a_jct_title_of_seconds_or_minutes_says_them_not_a_rounded_zero():
    # a new user's walkthrough of make run (jobs sped up 1000x): "median 0.01 h, mean 0.01 h"
    done = [(T0 + i * H, jct) for i, jct in enumerate([10.0, 21.0, 30.0])]
    title = tf.jct_figure(done, scope="all teams")["layout"]["title"]["text"]
    assert title == "JCT of completed jobs (all teams): 3 jobs, median 21 s, mean 20 s"
    done = [(T0, 90.0), (T0 + H, 1530.0)]
    title = tf.jct_figure(done, scope="s")["layout"]["title"]["text"]
    assert title.endswith("2 jobs, median 1.5 min, mean 13.5 min")


def test_jct_rolling_mean_spans_the_last_ten_completions():
    done = [(T0 + i * H, 3600.0 * (i + 1)) for i in range(12)]
    rolling = tf.jct_figure(done, scope="s")["data"][2]["y"]
    assert rolling[-1] == pytest.approx(sum(range(3, 13)) / 10)


def _jct_sizes(n: int) -> tuple[int, ...]:
    done = [(T0 + i * timedelta(seconds=30), 60.0 + (i * 7919) % 86400) for i in range(n)]
    fig = tf.jct_figure(done, scope="all teams")
    return tuple(len(trace["x"]) for trace in fig["data"])


def test_the_jct_figure_draws_a_bounded_number_of_points_of_every_job():
    # A week of a 100-node cluster is 20,000 completions: the figure was 1.8 MB of the
    # dashboard's 3 MB, a point per job three times over.
    limit = getattr(tf, "MAX_POINTS", 600)  # (absent before it was bounded)
    assert max(_jct_sizes(10 * limit)) <= limit + 1
    assert _jct_sizes(10 * limit) == _jct_sizes(40 * limit)
    n = 10 * limit + 7
    done = [(T0 + i * timedelta(seconds=30), 60.0 + (i * 7919) % 86400) for i in range(n)]
    fig = tf.jct_figure(done, scope="all teams")
    cdf, dots, rolling = fig["data"]
    hours = sorted(jct / 3600 for _, jct in done)
    # the title still counts every job; the CDF's points lie on the whole CDF, to the last
    assert fig["layout"]["title"]["text"].startswith(f"JCT of completed jobs (all teams): {n} jobs")
    assert (cdf["x"][-1], cdf["y"][-1]) == (round(hours[-1], 4), 1.0)
    for x, y in zip(cdf["x"][1:], cdf["y"][1:], strict=True):
        below = sum(h <= x + 5e-5 for h in hours)
        assert abs(below / n - y) <= 1 / n + 1e-4
    # one job in every (11 of 6,007): each drawn point is a job, the last one last
    every = -(-n // limit)  # ceil
    assert dots["name"] == f"one job in {every}" and rolling["name"] == f"rolling mean of {every}"
    assert dots["x"][-1] == done[-1][0].isoformat()
    assert dots["y"][-1] == round(done[-1][1] / 3600, 4)
    window = [jct / 3600 for _, jct in done[-every:]]
    assert rolling["y"][-1] == pytest.approx(sum(window) / every, abs=1e-4)


def test_the_queue_figure_draws_the_state_at_the_end_of_each_slice_past_its_limit():
    limit = getattr(tf, "MAX_POINTS", 600)  # (absent before it was bounded)
    steps = [(T0 + k * timedelta(seconds=6), k % 7, k % 5) for k in range(20 * limit)]
    fig = tf.queue_running_figure(steps, scope="all teams")
    queued, running = fig["data"]
    assert len(queued["x"]) <= limit + 2
    by_time = {t.isoformat(): (q, r) for t, q, r in steps}
    # every point drawn is a real step (its exact state), the first and the last kept
    assert [by_time[x] for x in queued["x"]] == list(zip(queued["y"], running["y"], strict=True))
    assert (queued["x"][0], queued["x"][-1]) == (steps[0][0].isoformat(), steps[-1][0].isoformat())
    # a short series is drawn whole
    assert len(tf.queue_running_figure(steps[:limit], scope="s")["data"][0]["x"]) == limit


def test_job_timeline_puts_each_allocation_on_its_gpu_count_row_with_energy_below():
    now = T0 + 3 * H
    allocations = [
        {
            "started_at": T0,
            "ended_at": T0 + H,
            "gpus": 4,
            "placement": "node-01: 0,1,2,3",
            "batch_size": 256,
            "sm_clock_mhz": None,
            "power_limit_w": 250,
        },
        {
            "started_at": T0 + 2 * H,
            "ended_at": None,
            "gpus": 2,
            "placement": "node-02: 4,5",
            "batch_size": 128,
            "sm_clock_mhz": 1200,
            "power_limit_w": None,
        },
    ]
    fig = tf.job_timeline_figure(
        allocations, [(T0 + H, 0.4), (now, 0.9)], now=now, state_colour="royalblue"
    )
    bars, energy = fig["data"]
    assert bars["base"] == [T0.isoformat(), (T0 + 2 * H).isoformat()]
    assert bars["x"] == [3_600_000, 3_600_000]  # the open one is drawn up to now
    assert bars["y"] == ["4 GPU", "2 GPU"]
    assert bars["text"] == [
        "node-01: 0,1,2,3 · batch 256 · 250 W limit",
        "node-02: 4,5 · batch 128 · 1200 MHz",
    ]
    assert fig["layout"]["yaxis"]["categoryarray"] == ["2 GPU", "4 GPU"]
    assert (energy["y"], energy["yaxis"], energy["name"]) == ([0.4, 0.9], "y2", "energy used (kWh)")
