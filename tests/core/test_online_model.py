"""The per-job online performance model: learned from a job's own observations, no clamp."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from scheduling.core import online_model
from scheduling.core.online_fit import fit_online
from scheduling.core.online_model import (
    NETWORK_LEVEL,
    BlendedPerfModel,
    Observation,
    apply_params,
    batch_matched_prior,
    config_of,
    draw_busy_fraction,
    draw_range_w,
    draw_shaped_prior,
    nearest_prior,
    observation_from_dict,
    observation_to_dict,
    pooled_observations,
    refusal_reason,
    rescale_batch,
)
from scheduling.core.perf_models import FittedPerfModel, load_catalog

CATALOG = load_catalog()
PRIOR = CATALOG.get("resnet50", "A100")
TRUTH = CATALOG.get("bert", "A100")


def observe(model, n, nodes, local_batch, *, scale=1.0, limit=None, clock=None, weight=1.0):
    cfg = config_of(n, nodes, local_batch, clock, limit)
    return Observation(
        n_gpus=n,
        n_nodes=nodes,
        local_batch=local_batch,
        iter_time_s=model.iter_time_s(cfg) * scale,
        power_w=model.power_w(cfg),
        sm_clock_mhz=clock,
        power_limit_w=limit,
        weight=weight,
    )


def test_without_observations_the_model_is_the_prior_and_says_so():
    model = fit_online(PRIOR, [])
    cfg = config_of(8, 1, 32)
    assert model.estimated
    assert model.iter_time_s(cfg) == pytest.approx(PRIOR.iter_time_s(cfg), rel=1e-12)
    assert model.power_w(cfg) == pytest.approx(PRIOR.power_w(cfg), rel=1e-12)


def test_a_job_twenty_times_slower_than_its_prior_is_learned_from_one_report():
    # A 3B-parameter model where the catalog knows ResNet-50: the old scales stopped at 4x.
    obs = observe(PRIOR, 1, 1, 32, scale=20.0)
    model = fit_online(PRIOR, [obs])
    assert not model.estimated
    assert model.iter_time_s(obs.config()) == pytest.approx(obs.iter_time_s, rel=1e-3)
    # on four GPUs its compute is the prior's x 20 and its all-reduce the prior's x 20 **
    # NETWORK_LEVEL: a level learned on one GPU says less of what the network costs
    other = config_of(4, 1, 32)
    at_level = apply_params(PRIOR, [math.log(20.0)])
    assert model.iter_time_s(other) == pytest.approx(at_level.iter_time_s(other), rel=0.02)
    assert 20.0**NETWORK_LEVEL * 1.02 < model.iter_time_s(other) / PRIOR.iter_time_s(other) < 19.0


def test_the_shape_follows_the_job_where_it_differs_from_the_prior():
    # Given a BERT job with a ResNet-50 prior, observed at batch and GPU counts it runs at,
    observed = [observe(TRUTH, n, 1, b) for n in (1, 2, 4, 8) for b in (8, 32) if n * b <= 256]
    model = fit_online(PRIOR, observed)
    # then every observed configuration is predicted within 5 %, and one it never ran in
    # (two nodes) closer than the prior moved to the job's level.
    for obs in observed:
        assert model.iter_time_s(obs.config()) == pytest.approx(obs.iter_time_s, rel=0.05)
    unseen = config_of(16, 2, 16)
    level = model.params[0]
    prior_guess = PRIOR.iter_time_s(unseen) * math.exp(level)
    err_model = abs(model.iter_time_s(unseen) / TRUTH.iter_time_s(unseen) - 1)
    err_prior = abs(prior_guess / TRUTH.iter_time_s(unseen) - 1)
    assert err_model < err_prior


def test_power_per_power_limit_is_learned_from_nvml_samples():
    truth = CATALOG.get("deepspeech2", "A100")
    observed = [observe(truth, 1, 1, 16, limit=lim) for lim in (400.0, 300.0, 200.0, 150.0)]
    model = fit_online(PRIOR, observed)
    for obs in observed:
        cfg = obs.config()
        assert model.power_w(cfg) == pytest.approx(obs.power_w, rel=0.02)
        assert model.energy_per_iter_j(cfg) == pytest.approx(
            obs.power_w * obs.iter_time_s, rel=0.03
        )
    assert model.n_power_obs == 4


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"iter_time_s": math.nan}, "iteration time nan is not finite"),
        ({"iter_time_s": math.inf}, "iteration time inf is not finite"),
        ({"iter_time_s": -1.0}, "iteration time -1.0 s is not positive"),
        ({"iter_time_s": 0.0}, "iteration time 0.0 s is not positive"),
        ({"iter_time_s": 200_000.0}, "iteration time 200000 s is outside [1e-05, 86400] s"),
        ({"power_w": math.nan}, "power nan is not finite"),
        ({"power_w": -5.0}, "power -5.0 W is not positive"),
        ({"power_w": 900.0}, "power 900 W per GPU is above 600 W, more than this GPU can draw"),
        ({"local_batch": 0.0}, "per-GPU batch 0.0 is not a positive finite number"),
        ({"n_gpus": 0}, "GPU count 0 is not a positive integer"),
        ({"n_nodes": 3}, "node count 3 is not between 1 and the GPU count"),
        ({"iter_time_s": None, "power_w": None}, "neither an iteration time nor a power"),
        ({"log_t_ss": -0.1}, "log_t_ss -0.1 is not a finite number, not negative"),
        ({"log_p_ss": math.nan}, "log_p_ss nan is not a finite number, not negative"),
    ],
)
def test_absurd_observations_are_refused_with_a_reason(changes, reason):
    good = {"n_gpus": 2, "n_nodes": 1, "local_batch": 32.0, "iter_time_s": 0.2, "power_w": 250.0}
    assert refusal_reason(Observation(**good), gpu=PRIOR.gpu) is None
    assert refusal_reason(Observation(**{**good, **changes}), gpu=PRIOR.gpu) == reason


def test_nearest_prior_picks_the_workload_whose_shape_matches():
    candidates = [m for m in CATALOG.models() if m.gpu_model == "A100" and m.workload != "bert"]
    # gpt2 measured three times slower: the level is irrelevant, the shape decides.
    truth = CATALOG.get("gpt2", "A100")
    observed = [observe(truth, n, 1, 16, scale=3.0) for n in (1, 2, 4, 8)]
    assert nearest_prior(candidates, observed).workload == "gpt2"
    # With one configuration there is no shape yet: the hint, else the closest level.
    assert nearest_prior(candidates, observed[:1], hint="vgg16").workload == "vgg16"


def test_pooling_keeps_geometric_means_and_weights_and_survives_json():
    a = observe(PRIOR, 2, 1, 32, scale=1.0)
    b = observe(PRIOR, 2, 1, 32, scale=4.0)
    (pooled,) = pooled_observations([a, b], PRIOR.gpu.gpus_per_node)
    assert pooled.weight == 2.0
    assert pooled.iter_time_s == pytest.approx(a.iter_time_s * 2.0, rel=1e-12)
    assert observation_from_dict(observation_to_dict(pooled)) == pooled


def test_pooling_keeps_the_spread_of_repeated_measurements_however_often_it_pools():
    # given four measurements of one configuration, times and draws scattered
    scales = (1.0, 1.1, 0.95, 1.2)
    obs = [replace(observe(PRIOR, 1, 1, 32, scale=k, limit=300.0), power_w=200.0 * k * k)
           for k in scales]  # fmt: skip
    logs = [math.log(k) for k in scales]
    mean = sum(logs) / 4
    ss = sum((v - mean) ** 2 for v in logs)
    # when pooled at once, or two by two and then again (as a job's state is, round after
    # round), and through JSON
    per_node = PRIOR.gpu.gpus_per_node
    (once,) = pooled_observations(obs, per_node)
    (twice,) = pooled_observations(
        [*pooled_observations(obs[:2], per_node), *pooled_observations(obs[2:], per_node)],
        per_node,
    )
    again = observation_from_dict(observation_to_dict(twice))
    # then the sum of squared deviations of the logs is kept (the draw's logs are 2x)
    for p in (once, twice, again):
        assert p.weight == 4.0
        assert p.log_t_ss == pytest.approx(ss, rel=1e-9)
        assert p.log_p_ss == pytest.approx(4 * ss, rel=1e-9)
    # and a model fitted on them reports it for that configuration, nothing elsewhere
    model = fit_online(PRIOR, [again])
    m = model.measured(config_of(1, 1, 32, None, 300.0))
    assert m is not None and (m.w_t, m.w_p) == (4.0, 4.0)
    assert m.ss_t == pytest.approx(ss, rel=1e-9)
    assert model.measured(config_of(1, 1, 32, None, 250.0)) is None
    # one measurement has no spread
    (single,) = pooled_observations(obs[:1], per_node)
    assert (single.log_t_ss, single.log_p_ss) == (0.0, 0.0)


def test_a_batch_matched_prior_bends_at_the_jobs_batch_as_the_prior_at_its_own():
    # A Zeus-like one-GPU prior whose typical per-GPU batch is 32, for a job submitted at 512.
    sizes = sorted(PRIOR.batch_sizes)
    typical = float(sizes[len(sizes) // 2])
    matched = batch_matched_prior(PRIOR, 512.0)
    factor = typical / 512.0
    for b in (128.0, 512.0, 2048.0):
        mine, theirs = config_of(1, 1, b), config_of(1, 1, b * factor)
        assert matched.iter_time_s(mine) == pytest.approx(PRIOR.iter_time_s(theirs), rel=0.02)
        assert matched.power_w(mine) == pytest.approx(PRIOR.power_w(theirs), rel=0.02)
    # The ratio between two batches follows the prior's ratio between the mapped ones.
    r_job = matched.iter_time_s(config_of(1, 1, 2048)) / matched.iter_time_s(config_of(1, 1, 512))
    r_pri = PRIOR.iter_time_s(config_of(1, 1, 2048 * factor)) / PRIOR.iter_time_s(
        config_of(1, 1, 512 * factor)
    )
    assert r_job == pytest.approx(r_pri, rel=0.02)
    with pytest.raises(ValueError):
        rescale_batch(PRIOR, 0.0)


def test_nearest_prior_prefers_the_candidate_that_loads_the_gpu_like_the_job():
    # Two candidates with the same time shape; one draws twice as much. The job's draw
    # decides, although the fit would learn either level.
    hungry = FittedPerfModel(
        workload="hungry",
        gpu=PRIOR.gpu,
        batch_sizes=PRIOR.batch_sizes,
        throughput=PRIOR.throughput,
        power=replace(PRIOR.power, busy_max_w=2.0 * PRIOR.power.busy_max_w),
    )
    observed = [observe(PRIOR, 1, 1, b) for b in (16, 64)]
    assert nearest_prior([hungry, PRIOR], observed, draw_level=True).workload == PRIOR.workload
    observed_hungry = [observe(hungry, 1, 1, b) for b in (16, 64)]
    assert nearest_prior([PRIOR, hungry], observed_hungry, draw_level=True).workload == "hungry"
    # Without the level (candidates carried from other GPU models) the tie stays a tie.
    assert nearest_prior([hungry, PRIOR], observed).workload == "hungry"


def test_a_blend_predicts_the_geometric_mean_of_its_models():
    observed = [observe(TRUTH, 1, 1, 32, scale=2.0), observe(TRUTH, 2, 1, 32, scale=2.0)]
    a = fit_online(PRIOR, observed)
    b = fit_online(CATALOG.get("gpt2", "A100"), observed)
    blend = BlendedPerfModel([a, b])
    cfg = config_of(8, 1, 64)
    assert blend.iter_time_s(cfg) == pytest.approx(
        math.sqrt(a.iter_time_s(cfg) * b.iter_time_s(cfg)), rel=1e-12
    )
    assert blend.power_w(cfg) == pytest.approx(math.sqrt(a.power_w(cfg) * b.power_w(cfg)))
    assert blend.energy_per_iter_j(cfg) == pytest.approx(
        8 * blend.power_w(cfg) * blend.iter_time_s(cfg)
    )
    # Where both models learned the same measurement, so does the blend.
    seen = observed[0].config()
    assert blend.iter_time_s(seen) == pytest.approx(observed[0].iter_time_s, rel=0.02)
    assert not blend.estimated and blend.gpu_model == "A100"
    with pytest.raises(ValueError):
        BlendedPerfModel([])


IDLE_W, BUSY_MAX_W = 50.0, 350.0


def drawing(power_w, local_batch=64.0, *, limit=None, n=1, nodes=1, iter_time_s=0.1):
    return Observation(
        n_gpus=n,
        n_nodes=nodes,
        local_batch=local_batch,
        iter_time_s=iter_time_s,
        power_w=power_w,
        power_limit_w=limit,
    )


def test_the_busy_fraction_is_where_the_draw_sits_between_idle_and_busy_maximum():
    def u(obs):
        return draw_busy_fraction(PRIOR, obs, idle_w=IDLE_W, busy_max_w=BUSY_MAX_W)

    assert u([drawing(200.0)]) == (64.0, pytest.approx(0.5))
    assert u([drawing(40.0)]) == (64.0, 0.0)  # below idle: clipped
    assert u([drawing(400.0)]) == (64.0, 1.0)
    # Only the default limit and top clock count: a capped GPU draws less however busy.
    capped = drawing(110.0, limit=PRIOR.gpu.power_limit_min_w)
    assert u([capped, drawing(350.0)]) == (64.0, pytest.approx(1.0))
    assert u([capped]) is None
    assert u([Observation(n_gpus=1, n_nodes=1, local_batch=64.0, iter_time_s=0.1)]) is None
    # A draw without a time counts (the live service pools NVML samples apart from progress
    # reports), weighted by its own count.
    draw_only = Observation(n_gpus=1, n_nodes=1, local_batch=32.0, power_w=200.0, weight=3.0)
    assert u([drawing(350.0), draw_only]) == (32.0, pytest.approx(0.5))
    # The batch measured most often decides.
    assert u([drawing(50.0, 8.0), drawing(350.0), drawing(350.0)])[0] == 64.0
    # On 8 GPUs the GPU also waits on the all-reduce: the draw is read against that share.
    cfg = config_of(8, 1, 64.0)
    parts = PRIOR.compute_parts(64.0, None, None)
    share = parts[0] / PRIOR.combine_parts(8, 1, *parts)[0]
    assert share < 1.0
    on8 = drawing(IDLE_W + 0.5 * (BUSY_MAX_W - IDLE_W) * share, n=8)
    assert on8.config() == cfg
    assert u([on8])[1] == pytest.approx(0.5)


def test_a_job_drawing_idle_power_gets_an_iteration_time_flat_in_batch():
    # Whatever the prior's workload says, a job whose GPU waits (draws idle) at its batch
    # has a time dominated by what does not grow with the batch, and a flat draw.
    seen = [drawing(IDLE_W, iter_time_s=PRIOR.iter_time_s(config_of(1, 1, 64.0)))]
    shaped = draw_shaped_prior(PRIOR, seen, idle_w=IDLE_W, busy_max_w=BUSY_MAX_W, draw_shape=True)
    at = {b: config_of(1, 1, b) for b in (64.0, 512.0)}
    assert shaped.iter_time_s(at[64.0]) == pytest.approx(PRIOR.iter_time_s(at[64.0]), rel=1e-9)
    assert shaped.iter_time_s(at[512.0]) == pytest.approx(shaped.iter_time_s(at[64.0]), rel=0.01)
    assert PRIOR.iter_time_s(at[512.0]) > 2.0 * PRIOR.iter_time_s(at[64.0])  # the prior bends
    assert shaped.power_w(at[512.0]) == pytest.approx(shaped.power_w(at[64.0]), rel=0.01)


def test_a_job_drawing_its_gpus_busy_maximum_gets_a_time_proportional_to_batch():
    seen = [drawing(BUSY_MAX_W)]
    shaped = draw_shaped_prior(PRIOR, seen, idle_w=IDLE_W, busy_max_w=BUSY_MAX_W, draw_shape=True)
    t64, t512 = (shaped.iter_time_s(config_of(1, 1, b)) for b in (64.0, 512.0))
    assert t512 / t64 == pytest.approx(8.0, rel=0.01)
    # With the prior's share at 1 the split is the prior's own; without a draw, the prior.
    same = draw_shaped_prior(PRIOR, seen, idle_w=IDLE_W, busy_max_w=BUSY_MAX_W, prior_share=1.0)
    cfg = config_of(1, 1, 512.0)
    assert same.iter_time_s(cfg) == pytest.approx(PRIOR.iter_time_s(cfg), rel=1e-3)
    timed = [Observation(n_gpus=1, n_nodes=1, local_batch=64.0, iter_time_s=0.1)]
    assert draw_shaped_prior(PRIOR, timed, idle_w=IDLE_W, busy_max_w=BUSY_MAX_W) is PRIOR


def test_the_fit_keeps_the_draws_batch_shape_after_five_reports_at_one_batch():
    # A job that waits on its input (draws idle): five reports at one batch, five limits.
    b0 = 64.0
    t0 = PRIOR.iter_time_s(config_of(1, 1, b0)) * 3.0
    limits = [None] + [PRIOR.gpu.power_limit_max_w - 25.0 * k for k in range(1, 5)]
    seen = [drawing(IDLE_W + 5.0, b0, limit=lim, iter_time_s=t0) for lim in limits]
    shaped = draw_shaped_prior(PRIOR, seen, idle_w=IDLE_W, busy_max_w=BUSY_MAX_W, draw_shape=True)
    far = config_of(1, 1, 8 * b0)
    with_draw = fit_online(shaped, seen).iter_time_s(far)
    without = fit_online(PRIOR, seen).iter_time_s(far)
    u = 5.0 / (BUSY_MAX_W - IDLE_W)  # busy 1.7% of the time: 8x the batch adds 7 x 1.7%
    assert with_draw == pytest.approx(t0 * (1.0 + 7.0 * u), rel=0.05)
    assert without > 2.0 * t0


def test_a_job_at_the_light_work_floor_gets_a_flat_draw_and_a_time_that_grows_per_sample():
    # A GPU that runs a job's light work (lookups, copies, clocks up) draws more than at rest
    # but no more as the batch grows: the time's split is read against the idle draw, the
    # draw's batch shape against that floor (ncf on an A40: 84 W at every batch).
    floor_w = 120.0
    b0 = 64.0
    t0 = PRIOR.iter_time_s(config_of(1, 1, b0))
    seen = [drawing(floor_w, b0, iter_time_s=t0)]
    at = {b: config_of(1, 1, b) for b in (8.0, b0, 512.0)}

    def shaped(**floor):
        return draw_shaped_prior(
            PRIOR, seen, idle_w=IDLE_W, busy_max_w=BUSY_MAX_W, draw_shape=True, **floor
        )

    two = shaped(floor_w=floor_w)
    u = (floor_w - IDLE_W) / (BUSY_MAX_W - IDLE_W)  # busy a share u above rest
    assert two.iter_time_s(at[b0]) == pytest.approx(t0, rel=1e-9)
    assert two.iter_time_s(at[512.0]) == pytest.approx(t0 * (1.0 + 7.0 * u), rel=1e-6)
    assert two.power_w(at[b0]) == pytest.approx(floor_w, rel=0.01)
    assert two.power_w(at[512.0]) == pytest.approx(floor_w, rel=0.01)
    assert two.power_w(at[8.0]) == pytest.approx(floor_w, rel=0.01)
    # One reading (the default, and floor_w at the idle draw): the draw rises with the time's
    # per-sample share, 2.2x from 64 to 512 here; the time is the same.
    one = shaped()
    assert shaped(floor_w=IDLE_W).power_w(at[512.0]) == one.power_w(at[512.0])
    assert one.power_w(at[512.0]) > 2.0 * one.power_w(at[b0])
    assert one.iter_time_s(at[512.0]) == pytest.approx(two.iter_time_s(at[512.0]), rel=1e-9)


@pytest.mark.parametrize("cap", [False, True])
def test_a_job_above_the_floor_draws_its_own_at_its_batch_and_rises_with_the_batch(
    cap, monkeypatch
):
    # Of the time the GPU works (u, read against idle), the job's draw above the floor is a
    # share u_f of the span above it. The draw is the job's own at b0 and rises with the
    # batch: uncapped (the default, FLOOR_CAP False) towards the busy maximum, half way there
    # at b0 (1 - u_f) / u_f; capped, at the time's batch shape towards floor + span x u_f / u.
    monkeypatch.setattr(online_model, "FLOOR_CAP", cap)
    floor_w, b0 = 120.0, 64.0
    t0 = PRIOR.iter_time_s(config_of(1, 1, b0))
    mid_w = (floor_w + BUSY_MAX_W) / 2.0
    above = draw_shaped_prior(
        PRIOR,
        [drawing(mid_w, b0, iter_time_s=t0)],
        idle_w=IDLE_W,
        busy_max_w=BUSY_MAX_W,
        draw_shape=True,
        floor_w=floor_w,
    )
    u = (mid_w - IDLE_W) / (BUSY_MAX_W - IDLE_W)
    if cap:
        top_w = floor_w + (BUSY_MAX_W - floor_w) * 0.5 / u
        half = b0 * (1.0 - u) / u  # the time's alpha_c / beta_c
    else:
        top_w, half = BUSY_MAX_W, b0  # u_f = 0.5
    assert above.power.busy_max_w == pytest.approx(top_w, rel=1e-9)
    assert above.power_w(config_of(1, 1, b0)) == pytest.approx(mid_w, rel=1e-6)
    expected = floor_w + (top_w - floor_w) * 512.0 / (512.0 + half)
    assert above.power_w(config_of(1, 1, 512.0)) == pytest.approx(expected, rel=1e-6)
    assert above.power_w(config_of(1, 1, 1e7)) == pytest.approx(top_w, rel=1e-4)
    low = floor_w + (top_w - floor_w) / (1.0 + half)  # one sample per GPU: near the floor
    assert above.power_w(config_of(1, 1, 1.0)) == pytest.approx(low, rel=1e-6)
    assert low < floor_w * 1.04
    assert (top_w < BUSY_MAX_W) is cap


@pytest.mark.parametrize("cap", [False, True])
@pytest.mark.parametrize(
    ("draw_w", "n"),
    [(90.0, 1), (100.0, 1), (200.0, 1), (130.0, 2), (200.0, 2), (300.0, 2), (200.0, 8)],
)
def test_read_against_a_floor_the_draw_is_the_jobs_own_at_its_batch(draw_w, n, cap, monkeypatch):
    # Whatever the floor, the draw at the batch the job was measured at is what it drew: on
    # several GPUs too (where its GPUs wait on the all-reduce at the model's idle draw), and
    # for a job that draws less than the floor (the least loading workload yet: flat at its
    # own draw, not at the floor).
    monkeypatch.setattr(online_model, "FLOOR_CAP", cap)
    b0, floor_w = 64.0, 120.0
    seen = [drawing(draw_w, b0, n=n)]
    one = draw_shaped_prior(PRIOR, seen, idle_w=IDLE_W, busy_max_w=BUSY_MAX_W, draw_shape=True)
    two = draw_shaped_prior(
        PRIOR, seen, idle_w=IDLE_W, busy_max_w=BUSY_MAX_W, draw_shape=True, floor_w=floor_w
    )
    cfg = config_of(n, 1, b0)
    assert one.power_w(cfg) == pytest.approx(draw_w, rel=1e-6)  # the one reading already is
    assert two.power_w(cfg) == pytest.approx(draw_w, rel=1e-6)
    assert two.iter_time_s(cfg) == pytest.approx(one.iter_time_s(cfg), rel=1e-12)
    if draw_w < floor_w and n == 1:
        for b in (1.0, 512.0, 1e6):  # below the floor: flat at its own draw
            assert two.power_w(config_of(1, 1, b)) == pytest.approx(draw_w, rel=1e-6)


def test_the_floor_and_busy_maximum_come_from_enough_other_workloads_measured_draws():
    draws = {"a": [150.0, 190.0], "b": [200.0], "c": [260.0, float("nan"), -1.0]}
    assert online_model.measured_draw_span_w(draws) == (150.0, 260.0)
    assert online_model.measured_draw_span_w({k: draws[k] for k in "ab"}) == (150.0, 200.0)
    # one workload is too few (a heavy one alone would read every job as light); a workload
    # with no usable draw does not count; nor do draws that span nothing
    assert online_model.measured_draw_span_w({"a": draws["a"]}) is None
    assert online_model.measured_draw_span_w({"a": draws["a"], "c": [float("inf")]}) is None
    assert online_model.measured_draw_span_w({"a": [100.0], "b": [100.0]}) is None
    # the floor is FLOOR_SHARE of the way from idle to the least draw; too few: no floor and
    # the estimate's busy maximum
    light = online_model.light_work_span_w
    assert light(50.0, 300.0, draws) == (150.0, 260.0)
    assert light(50.0, 300.0, draws, share=0.5) == (100.0, 260.0)
    assert light(50.0, 300.0, draws, share=0.0) == (None, 260.0)
    assert light(160.0, 300.0, draws) == (None, 260.0)  # the least draw below idle
    assert light(50.0, 300.0, {"a": [150.0]}) == (None, 300.0)


def test_the_draw_range_is_the_least_and_most_loading_candidates_draw():
    low, high = draw_range_w([PRIOR, TRUTH])
    draws = [m.power_w(config_of(1, 1, float(b))) for m in (PRIOR, TRUTH) for b in m.batch_sizes]
    assert (low, high) == (min(draws), max(draws))
    assert draw_range_w([]) is None


# --- a launch floor (compute_sharpness) ---------------------------------------------------


def test_the_soft_maximum_is_the_sum_at_one_the_maximum_when_sharp_and_never_overflows():
    from scheduling.core.perf_models import soft_max_sum

    assert soft_max_sum(2e-3, 3e-3, 1.0) == pytest.approx(5e-3, rel=1e-12)
    assert soft_max_sum(2e-3, 3e-3, 2.0) == pytest.approx(math.hypot(2e-3, 3e-3), rel=1e-12)
    assert soft_max_sum(2e-3, 3e-3, 1e6) == pytest.approx(3e-3, rel=1e-6)
    assert soft_max_sum(1e-5, 1e-5, 600.0) == pytest.approx(1e-5, rel=2e-3)
    assert soft_max_sum(0.0, 0.0, 4.0) == 0.0


def _hinge(local_batch, floor_s=2.7e-3, per_sample_s=15.8e-6):
    """Launch-bound until the GPU fills, then linear (an H100's cnn: 2.7 ms flat to batch
    128, 8.1 ms at 512, 16.1 ms at 1024; data/device/h100_2026-11-26/sweep.json)."""
    return max(floor_s, per_sample_s * local_batch)


def _observed(times, weight):
    return [
        Observation(n_gpus=1, n_nodes=1, local_batch=b, iter_time_s=t, weight=weight)
        for b, t in times.items()
    ]


PRIOR_BERT = CATALOG.get("bert", "A100")
SEEN = (32, 64, 128, 256, 512)


def test_a_round_of_measurements_at_batches_that_bend_teaches_a_launch_floor():
    # given a job measured at a round's weight (about 60 samples a configuration) at five
    # batches where its time is flat, then linear
    times = {b: _hinge(b) for b in SEEN}
    model = fit_online(PRIOR_BERT, _observed(times, weight=60.0))
    # then the fit bends (a sum of the two parts cannot be flat and then linear) and the
    # batches beyond the ones seen are predicted within 10 % (6.5 % and 9.3 % low), where the
    # sum missed by 18 % and 27 %
    assert model.base.throughput.compute_sharpness > 2.0
    for b in (16, 1024):
        truth = _hinge(b)
        assert model.iter_time_s(config_of(1, 1, b)) == pytest.approx(truth, rel=0.10), b


def test_a_flat_time_keeps_a_flat_extrapolation():
    # given a launch-bound job whose time is flat over every batch seen (an H100's MLP)
    times = {b: 2.9e-3 for b in SEEN}
    model = fit_online(PRIOR_BERT, _observed(times, weight=60.0))
    # then nothing in the data places a knee: 1024 is predicted flat too, not where the
    # prior's per-sample-heavy shape would put it (twice as slow)
    assert model.iter_time_s(config_of(1, 1, 1024)) == pytest.approx(2.9e-3, rel=0.15)


def test_one_measurement_a_configuration_does_not_pay_for_a_floor():
    # the catalog's replays (one measurement per configuration) keep the catalog's sum
    times = {b: _hinge(b) for b in SEEN}
    model = fit_online(PRIOR_BERT, _observed(times, weight=1.0))
    assert model.base.throughput.compute_sharpness < 1.2


def test_a_fit_stored_before_the_floor_existed_still_applies():
    from scheduling.core.online_model import N_PARAMS, apply_params

    z = [0.3, 0.1, -0.2, 0, 0, 0, 0, 0.05, 0, 0.2, 0.1, 0, 0]
    assert len(z) == N_PARAMS - 1
    old, new = apply_params(PRIOR_BERT, z), apply_params(PRIOR_BERT, [*z, 0.0])
    cfg = config_of(2, 1, 64)
    assert old.iter_time_s(cfg) == new.iter_time_s(cfg)
    assert old.power_w(cfg) == new.power_w(cfg)


def test_a_profile_that_learned_a_floor_gives_way_to_a_job_whose_time_is_a_sum():
    # given a prior (a workload profile) whose compute time has a sharp floor, and a job of
    # that workload measured at a round's weight whose time is the catalog's plain sum
    p = PRIOR_BERT
    floored = FittedPerfModel(
        workload=p.workload,
        gpu=p.gpu,
        batch_sizes=p.batch_sizes,
        throughput=replace(p.throughput, compute_sharpness=4.0),
        power=p.power,
    )
    times = {b: PRIOR_BERT.iter_time_s(config_of(1, 1, b)) for b in SEEN}
    model = fit_online(floored, _observed(times, weight=60.0))
    # then the floor moves towards the job's sum (it can go down, not only up: it stayed
    # at 4.0 when it could only rise) and the job is predicted as it ran where it ran; the
    # floor's last part is the prior's until the job's batches say otherwise (these five
    # do not: a sum and a soft maximum fit them alike, 2.6 stays)
    assert model.base.throughput.compute_sharpness < 3.0
    for b in (*SEEN, 1024):
        truth = PRIOR_BERT.iter_time_s(config_of(1, 1, b))
        assert model.iter_time_s(config_of(1, 1, b)) == pytest.approx(truth, rel=0.10), b


def test_a_fit_stored_with_thirteen_parameters_starts_the_next_fit():
    times = {b: _hinge(b) for b in SEEN}
    start = fit_online(PRIOR_BERT, _observed(times, weight=60.0)).params[:13]
    model = fit_online(PRIOR_BERT, _observed(times, weight=60.0), start=start)
    assert len(model.params) == 14
    assert model.iter_time_s(config_of(1, 1, 1024)) == pytest.approx(_hinge(1024), rel=0.10)


def test_a_trial_step_whose_model_overflows_is_a_rejected_step_not_a_crash(monkeypatch):
    # philly_week under GreenFlow, learned, ended in an OverflowError: a Levenberg-Marquardt
    # trial step made compute_s ** gamma pass 1e308 in the trial model. Here the first
    # trial step's residuals are infinite as that one's were (the start and the Jacobian's
    # columns come first).
    from scheduling.core import online_fit

    obs = [observe(TRUTH, n, 1, b) for n in (1, 2, 4) for b in (8, 32)]
    expected = fit_online(PRIOR, obs).params
    real = online_fit._Objective.__call__
    calls = []

    def overflowing(self, z):
        # each call: a point (row 0) and its Jacobian's shifted points; the first is the
        # start, the second the first trial step
        calls.append(len(z))
        out = real(self, z)
        if len(calls) == 2:
            out[0, 0] = math.inf
        return out

    monkeypatch.setattr(online_fit._Objective, "__call__", overflowing)
    model = fit_online(PRIOR, obs)
    assert calls[:2] == [online_fit.N_PARAMS + 1] * 2
    assert len(calls) > 2  # it went on after the overflow
    assert model.params == pytest.approx(expected, abs=1e-3)


def test_a_stored_start_that_leaves_the_floats_is_fitted_from_the_cold_start():
    # A warm start from a stored fit whose residuals on the new configurations overflow
    # (the time level at e^700) could never take a step: the fit starts cold instead.
    from scheduling.core.online_fit import fit_params
    from scheduling.core.online_model import N_PARAMS

    obs = [observe(TRUTH, n, 1, b) for n in (1, 2) for b in (8, 32)]
    cold = fit_params(PRIOR, obs)
    assert fit_params(PRIOR, obs, start=[700.0] + [0.0] * (N_PARAMS - 1)) == cold
    assert abs(cold[0]) < 50.0


def test_the_fits_residuals_are_the_models_own_predictions():
    # The fit evaluates the model's equations over numpy arrays; they must be the very
    # equations ``apply_params(...).evaluate_parts`` predicts with, for any move z, on
    # every kind of configuration: one GPU, one node, two nodes, a clock, a power limit
    # that binds and one that does not, a configuration seen without its time or draw.
    import random

    import numpy as np

    from scheduling.core import online_fit
    from scheduling.core.online_model import N_PARAMS, apply_params, pool
    from scheduling.core.perf_models import config_parts

    rng = random.Random(7)
    # besides catalog priors (a sum of fixed and per-sample compute, no zero constant), a
    # profile's: a launch floor (q = 4, which z[13] = -log 4 folds back to exactly 1) and
    # an all-reduce the fit found free (the floors apply_params starts such a constant at)
    floor = FittedPerfModel(
        workload="floor",
        gpu=PRIOR.gpu,
        batch_sizes=PRIOR.batch_sizes,
        throughput=replace(
            PRIOR.throughput, compute_sharpness=4.0, alpha_r_s=0.0, beta_r_s=0.0, beta_n_s=0.0
        ),
        power=PRIOR.power,
    )
    for prior, truth in ((PRIOR, TRUTH), (CATALOG.get("bert", "A100"), PRIOR), (floor, TRUTH)):
        gpu = prior.gpu
        per = gpu.gpus_per_node
        mid_clock = gpu.clocks_mhz[len(gpu.clocks_mhz) // 2]
        obs = []
        for n, nodes in ((1, 1), (2, 1), (per, 1), (2 * per, 2)):
            for clock, limit in ((None, None), (mid_clock, None), (None, gpu.power_limit_min_w)):
                o = observe(truth, n, nodes, rng.choice([4, 32, 256]), clock=clock, limit=limit)
                blank = rng.random()
                if blank < 0.2:
                    o = replace(o, iter_time_s=None)
                elif blank < 0.4:
                    o = replace(o, power_w=None)
                obs.append(o)
        cells = list(pool(obs, per).values())
        grid = online_fit._grid_parts(prior, cells)
        grid_w, ridge, shape_r = [1.0 / len(grid)] * len(grid), 1e-4, 1.4
        objective = online_fit._Objective(prior, cells, grid, grid_w, ridge, shape_r)
        zs = np.array([[rng.gauss(0.0, 0.7) for _ in range(N_PARAMS)] for _ in range(6)])
        zs[0] = 0.0
        zs[1, 13] = -math.log(max(prior.throughput.compute_sharpness, 1.0))  # q exactly 1
        got = objective(zs)
        for z, row in zip(zs, got, strict=True):
            model = apply_params(prior, list(z))

            def log_at(cfg, i, model=model, per=per):
                return math.log(model.evaluate_parts(*config_parts(cfg, per))[i])

            wt = math.sqrt(grid_w[0])
            times = [
                math.sqrt(c.w_t) * (log_at(c.cfg, 0) - c.log_t)
                for c in cells
                if c.log_t is not None
            ]

            # the grid's targets are the prior's own predictions there at the job's level:
            # its compute x e^z0, its all-reduce x e^(NETWORK_LEVEL z0), its draw x e^z9
            tp = prior.throughput
            net = math.exp(NETWORK_LEVEL * z[0])
            at_level = FittedPerfModel(
                workload=prior.workload,
                gpu=prior.gpu,
                batch_sizes=prior.batch_sizes,
                power=prior.power,
                throughput=replace(
                    tp,
                    alpha_c_s=tp.alpha_c_s * math.exp(z[0]),
                    beta_c_s=tp.beta_c_s * math.exp(z[0]),
                    alpha_r_s=tp.alpha_r_s * net,
                    beta_r_s=tp.beta_r_s * net,
                    alpha_n_s=tp.alpha_n_s * net,
                    beta_n_s=tp.beta_n_s * net,
                ),
            )

            def grid_at(parts, i, model=model, at_level=at_level):
                return math.log(model.evaluate_parts(*parts)[i]) - math.log(
                    at_level.evaluate_parts(*parts)[i]
                )

            times += [wt * grid_at(parts, 0) for parts in grid]
            draws = [
                math.sqrt(c.w_p) * (log_at(c.cfg, 1) - c.log_p)
                for c in cells
                if c.log_p is not None
            ]
            draws += [wt * (grid_at(parts, 1) - z[9]) for parts in grid]
            penalties = [math.sqrt(ridge) * v for v in z] + [shape_r * z[13]]
            assert row == pytest.approx([*times, *draws, *penalties], rel=1e-12, abs=1e-12)
