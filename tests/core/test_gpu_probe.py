"""A job kept beside idle GPUs at a count its learned model never saw beyond tries the next
size once (``gpu_probe``): a prior that says more GPUs do not pay is otherwise never
corrected, because nothing ever measures them."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from scheduling.core.online_fit import fit_online
from scheduling.core.online_model import Observation, config_of
from scheduling.core.perf_models import FittedPerfModel, load_catalog
from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import Budget, PowerLimits
from tests.core.corekit import AnalyticModel, Catalog, job, make_cluster, running, snapshot

CATALOG = load_catalog()
# The prior: inception3 on an A100, which at a global batch of 32 says eight GPUs are
# slower than four. The truth computes as inception3 does, with a twentieth of its
# all-reduce time: fastest on 32-64 GPUs. Its one-GPU time is the prior's, so the first
# measurement moves no level, and the learned model keeps the prior's shape until more
# GPUs are measured.
PRIOR = CATALOG.get("inception3", "A100")
_TP = PRIOR.throughput
TRUTH = FittedPerfModel(
    workload="deepspeech2",
    gpu=PRIOR.gpu,
    batch_sizes=PRIOR.batch_sizes,
    throughput=replace(
        _TP,
        alpha_r_s=_TP.alpha_r_s / 20,
        beta_r_s=_TP.beta_r_s / 20,
        alpha_n_s=_TP.alpha_n_s / 20,
        beta_n_s=_TP.beta_n_s / 20,
    ),
    power=PRIOR.power,
)
ROUND_S = 300.0


def _job(**kw):
    kw = {"workload": "deepspeech2", "gpu_model": "A100", "global_batch": 32, **kw}
    return job("d", n=1, iters=600_000.0, min_gpus=1, max_gpus=64, **kw)


def _rounds(
    j, *, n_rounds, frac=0.03, others=(), budgets=(), model_of=None, snaps=None,
    policy="elastic", power_limits=None,
):  # fmt: skip
    """Plan ``n_rounds`` elastic rounds on 8 nodes of 8 A100s; after each, job ``d`` is
    observed in the configuration it ran (the truth) and refitted from the prior, as the
    live service does each round. ``others``: jobs that hold GPUs as they are; ``snaps``:
    a list that gets each round's snapshot."""
    cluster = make_cluster(nodes_per_switch=8)
    node_of = {gpu.gpu_id: gpu.node for gpu in cluster.gpus}
    seen: list[Observation] = []
    records: dict = {}
    plans = []
    for k in range(n_rounds):
        now = k * ROUND_S
        model = model_of(seen) if model_of else fit_online(PRIOR, seen, workload="deepspeech2")
        perf = {(j.job_id, "A100"): model, **{(o.job_id, "A100"): TRUTH for o in others}}
        snap = snapshot(cluster, [j, *others], catalog=CATALOG, round_length_s=ROUND_S,
                        job_perf=perf, exploration=records, exploration_budget_frac=frac,
                        budgets=budgets,
                        **({"power_limits": power_limits} if power_limits else {}))  # fmt: skip
        plan = plan_round(snap, policy=policy, now=now)
        plans.append(plan)
        if snaps is not None:
            snaps.append(snap)
        records = dict(plan.exploration)
        a = plan.allocations[j.job_id]
        nodes = len({node_of[g] for g in a.gpu_ids})
        cfg = config_of(a.n_gpus, nodes, a.global_batch / a.n_gpus, None, None)
        t = TRUTH.iter_time_s(cfg)
        seen.append(Observation(a.n_gpus, nodes, a.global_batch / a.n_gpus, t,
                                TRUTH.power_w(cfg)))  # fmt: skip
        started = j.started_s if j.started_s is not None else now
        j = replace(j, allocation=a, started_s=started, done_iters=j.done_iters + ROUND_S / t)
    return plans


def _busy_energy(snap, alloc):
    """What job ``d`` on ``alloc`` is predicted to draw in a round of ``snap``."""
    from scheduling.core.round import admit

    ctx, _ = admit(snap, now=0.0)
    jv = next(v for v in ctx.jobs if v.job.job_id == "d")
    est = ctx.estimate(jv, alloc.n_gpus, alloc.global_batch, alloc.sm_clock_mhz,
                       alloc.power_limit_w)  # fmt: skip
    return est.round_energy_j


def _counts(plans):
    return [p.allocations["d"].n_gpus for p in plans]


def test_without_a_probe_the_prior_keeps_the_job_small_for_good():
    counts = _counts(_rounds(_job(), n_rounds=10, frac=None))
    assert max(counts) <= 4


def test_a_probe_measures_the_larger_count_and_the_job_grows_within_its_bound():
    plans = _rounds(_job(), n_rounds=12)
    counts = _counts(plans)
    assert max(counts) >= 16  # the probes found that more GPUs pay, and the job kept them
    rec = plans[-1].exploration["d"]
    probed = [p["n_gpus"] for p in rec["gpu_probes"]]
    assert len(probed) == len(set(probed))  # each count at most once
    assert all(p["n_gpus"] > p["from_gpus"] for p in rec["gpu_probes"])
    assert rec["spent_s"] <= rec["budget_s"]
    # a probe lasts one round: the policy then decides with the measurement
    for p in rec["gpu_probes"]:
        k = int(p["since_s"] // ROUND_S)
        assert counts[k] == p["n_gpus"]


@pytest.mark.parametrize("policy", ["elastic", "powerflow"])
def test_a_job_a_budget_pays_for_probes_at_a_clock_that_draws_no_more(policy):
    budget = Budget("b", "t", 0.0, 1e7, energy_limit_j=1e12)
    snaps: list = []
    plans = _rounds(_job(), n_rounds=8, budgets=(budget,), policy=policy, snaps=snaps)
    probes = plans[-1].exploration["d"]["gpu_probes"]
    assert probes
    for p in probes:
        k = int(p["since_s"] // ROUND_S)
        assert p["sm_clock_mhz"] is not None
        assert plans[k].allocations["d"].sm_clock_mhz == p["sm_clock_mhz"]
        # the probe's round is predicted to draw no more than the plan it replaced, and a
        # policy's allowance still holds what the plan spends
        assert p["energy_j"] <= p["plan_energy_j"]
        alloc = plans[k].allocations["d"]
        assert _busy_energy(snaps[k], alloc) == pytest.approx(p["energy_j"])
        assert plans[k].predicted_energy_by_budget_j["b"] == pytest.approx(p["energy_j"])
        allowance = plans[k].energy_allowance_by_budget_j.get("b")
        assert allowance is None or plans[k].predicted_energy_by_budget_j["b"] <= allowance + 1e-6


def test_an_oracle_model_is_never_probed():
    plans = _rounds(_job(), n_rounds=4, model_of=lambda seen: TRUTH)
    assert all("d" not in p.exploration for p in plans)


def test_a_probe_takes_no_gpu_another_job_holds():
    cluster = make_cluster(nodes_per_switch=8)
    # another job holds every GPU but the first node's: the probe may not grow past 8
    held = tuple(g.gpu_id for g in cluster.gpus if not g.node.endswith("n0"))
    other = running(job("o", n=56, iters=1e9, gpu_model="A100", workload="deepspeech2"), held)
    plans = _rounds(_job(), n_rounds=10, others=(other,))
    assert max(_counts(plans)) <= 8
    assert all(p.allocations["o"].gpu_ids == held for p in plans)


def test_the_probes_resize_says_why():
    from scheduling.core.explain import explain_change
    from scheduling.core.types import ChangeKind

    snaps: list = []
    plans = _rounds(_job(), n_rounds=3, snaps=snaps)
    probe = plans[-1].exploration["d"]["gpu_probes"][0]
    k = int(probe["since_s"] // ROUND_S)
    change = next(c for c in plans[k].changes if c.job_id == "d")
    assert change.kind == ChangeKind.RESIZE
    text = explain_change(change, snaps[k], plans[k], now=probe["since_s"])
    assert f"a probe of {probe['n_gpus']} GPUs for one round" in text


@dataclass(frozen=True)
class Measured(AnalyticModel):
    """A learned model that has measured up to ``most`` GPUs; flat beyond one GPU, so the
    policy never grows the job itself."""

    most: int = 0

    @property
    def max_measured_gpus(self) -> int:
        return self.most


def _ids(cluster, node, idx):
    return tuple(g.gpu_id for g in cluster.gpus if g.node == node and g.index in idx)


def _one_round(cluster, jobs, perf, *, policy="elastic", **snap):
    snap = snapshot(cluster, jobs, catalog=Catalog(Measured("w", scaling=0.0)), job_perf=perf,
                    exploration_budget_frac=0.03, **snap)  # fmt: skip
    return plan_round(snap, policy=policy, now=1000.0)


def test_a_probe_gets_the_aligned_block_the_buddy_placer_would_give():
    # One node: d on GPUs 0-1, another job on 2-3. Four GPUs for d can only be 4-7 (a
    # buddy block); taking the other job's GPUs out of the node instead of marking them
    # used gave d 0, 1, 4, 5.
    cluster = make_cluster(1, 1, 8)
    n0 = cluster.nodes[0].name
    d = running(job("d", n=2, iters=1e7, min_gpus=2, max_gpus=8), _ids(cluster, n0, {0, 1}))
    a = running(job("a", n=2, iters=1e7), _ids(cluster, n0, {2, 3}))
    plan = _one_round(cluster, [d, a], {("d", "A100"): Measured("w", scaling=0.0, most=2),
                                        ("a", "A100"): Measured("w")})  # fmt: skip
    assert plan.exploration["d"]["gpu_probes"][0]["n_gpus"] == 4
    assert plan.allocations["d"].gpu_ids == _ids(cluster, n0, {4, 5, 6, 7})
    assert plan.allocations["a"].gpu_ids == a.allocation.gpu_ids


def test_no_probe_where_the_larger_block_would_span_nodes_unaligned():
    # Two nodes with two GPUs taken on each: eight GPUs for d are a whole node or nothing.
    cluster = make_cluster(1, 2, 8)
    n0, n1 = cluster.nodes[0].name, cluster.nodes[1].name
    d = running(job("d", n=4, iters=1e7, min_gpus=4, max_gpus=16),
                _ids(cluster, n0, {0, 1, 2, 3}))  # fmt: skip
    a = running(job("a", n=2, iters=1e7), _ids(cluster, n0, {4, 5}))
    b = running(job("b", n=2, iters=1e7), _ids(cluster, n1, {0, 1}))
    perf = {("d", "A100"): Measured("w", scaling=0.0, most=4), ("a", "A100"): Measured("w"),
            ("b", "A100"): Measured("w")}  # fmt: skip
    plan = _one_round(cluster, [d, a, b], perf)
    assert "d" not in plan.exploration
    assert plan.allocations["d"].gpu_ids == d.allocation.gpu_ids


def test_no_probe_where_the_policy_would_keep_the_probes_count_or_idle_nodes_are_off():
    cluster = make_cluster(1, 1, 8)
    d = running(job("d", n=1, iters=1e7, min_gpus=1, max_gpus=8), (cluster.gpus[0].gpu_id,))
    perf = {("d", "A100"): Measured("w", scaling=0.0, most=1)}
    assert _one_round(cluster, [d], perf, policy="powerflow").exploration["d"]["gpu_probes"]
    kept = get_policy("powerflow", keep_running=True)
    assert "d" not in _one_round(cluster, [d], perf, policy=kept).exploration
    assert "d" not in _one_round(cluster, [d], perf, power_off_idle_nodes=True).exploration


@pytest.mark.parametrize(
    ("watts", "expected"),
    [
        ({900: 10.0, 1200: 20.0, 1500: 30.0}, 1200),  # the highest clock that fits
        ({900: 10.0, 1200: 5.0, 1500: 30.0}, 1200),  # the lowest fits: the scan from the top
        ({900: 25.0, 1200: 20.0, 1500: 30.0}, None),  # not even the lowest clock fits
        ({900: 30.0, 1200: 40.0, 1500: 50.0}, None),
    ],
)
def test_a_budget_paid_probe_runs_at_the_highest_clock_that_draws_no_more(watts, expected):
    from types import SimpleNamespace

    from scheduling.core.gpu_probe import _clock

    def remaining_and_power(jv, n, batch, clock, limit=None):
        return 1e6, watts[clock]  # busy the whole round at every clock

    ctx = SimpleNamespace(round_length_s=10.0, remaining_and_power=remaining_and_power)
    jv = SimpleNamespace(perf=SimpleNamespace(clocks_mhz=sorted(watts)))
    # two GPUs for ten seconds: 400 J is 20 W each
    assert _clock(ctx, jv, 2, 64, 400.0) == expected


@pytest.mark.parametrize(
    ("low_w", "high_w", "default_w"),
    [(150.0, 400.0, 350.0), (150.0, 350.0, 350.0)],
    ids=["below-their-top", "their-top-below-the-models"],
)
def test_a_budget_paid_probe_on_gpus_with_a_default_below_their_top_is_recorded_at_it(
    low_w, high_w, default_w
):
    """A plan with no power limit is recorded and predicted at the default the GPUs run at
    (``PowerLimits.unset_for``); a budget-paid probe that sets a clock and no limit was left
    at None after placement: recorded without a limit while the GPUs ran at their default,
    and its clock chosen and its draw predicted at their top. The same where the default
    is the GPUs' own top but below the catalog A100's 400 W (A100s that top out at 350 W;
    at a 250 W top, as a PCIe A100's, no clock fits the budget's rule on this job, as at
    a 200 W default below a 250 W top)."""
    limits = {"A100": PowerLimits(low_w=low_w, high_w=high_w, default_w=default_w)}
    budget = Budget("b", "t", 0.0, 1e7, energy_limit_j=1e12)
    snaps: list = []
    plans = _rounds(_job(), n_rounds=8, budgets=(budget,), snaps=snaps, power_limits=limits)
    probes = plans[-1].exploration["d"]["gpu_probes"]
    assert probes
    for p in probes:
        k = int(p["since_s"] // ROUND_S)
        alloc = plans[k].allocations["d"]
        assert alloc.sm_clock_mhz == p["sm_clock_mhz"] is not None
        assert alloc.power_limit_w == default_w
        # predicted at what the GPUs run at, and kept so the round after (no retune)
        assert _busy_energy(snaps[k], alloc) == pytest.approx(p["energy_j"])
        if k + 1 < len(plans):
            assert plans[k + 1].allocations["d"].power_limit_w == default_w
