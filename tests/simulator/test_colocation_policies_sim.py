"""EaCO, ONES and netdelay through the simulator with the real core and perf catalog."""

from __future__ import annotations

from scheduling.core.colocation import ColocationModel
from scheduling.core.perf_models import load_catalog
from scheduling.core.policies.eaco import Eaco
from scheduling.core.policies.netdelay import NetDelay
from scheduling.core.policies.ones import Ones
from scheduling.core.round import admit, plan_round
from scheduling.core.types import Cluster, Gpu, Job, Node
from scheduling.simulator.engine import SimConfig, Simulator
from scheduling.simulator.metrics import summarise

CATALOG = load_catalog()
R18 = "ResNet-18 (batch size 64)"


def _cluster(nodes: int, gpus: int) -> Cluster:
    return Cluster(
        nodes=tuple(
            Node(
                name=f"n{v}",
                switch="s0",
                gpus=tuple(Gpu(f"n{v}/{i}", f"n{v}", i, "A100") for i in range(gpus)),
            )
            for v in range(nodes)
        )
    )


def _table(x: float) -> ColocationModel:
    return ColocationModel(gpu="t", ratios={(R18, R18, 1): (x, x)}, batches={"ResNet-18": (64,)})


class Recorder:
    def __init__(self, policy) -> None:
        self.policy = policy
        self.rounds = []

    def __call__(self, snapshot, now):
        plan = plan_round(snapshot, policy=self.policy, now=now)
        self.rounds.append((now, snapshot, plan))
        return plan


def _cifar(job_id: str, submit: float = 0.0, iters: float = 20_000.0) -> Job:
    return Job(job_id, "resnet50_cifar10", "t", submit, iters, 64, per_gpu_batch=64)


def test_pair_observed_over_tolerance_is_separated_and_learned():
    # Given a policy that predicts no interference and a simulator whose truth is 40% speed
    rec = Recorder(Eaco(colocation=_table(1.0)))
    sim = Simulator(
        [_cifar("a"), _cifar("b")],
        cluster=_cluster(1, 1),
        catalog=CATALOG,
        planner=rec,
        config=SimConfig(round_length_s=300.0),
        colocation=_table(0.4),
    )
    result = sim.run()
    # Then the first round co-locates them on the single GPU
    first = rec.rounds[0][2]
    assert first.allocations["a"].gpu_ids == first.allocations["b"].gpu_ids == ("n0/0",)
    # the next round sees 150% slowdowns, separates b and learns the pair
    second = rec.rounds[1][2]
    assert "b" not in second.allocations
    assert second.waiting["b"].code == "preempted"
    assert second.policy_state["history"]["|".join((R18, R18))][0] == 1
    # and it is never paired again: both finish, b after a
    assert all(len(p.allocations) == 1 for _, _, p in rec.rounds[1:])
    finish = {r.spec.job_id: r.finish_s for r in result.jobs}
    assert finish["a"] < finish["b"]
    assert {r.spec.job_id: r.n_preemptions for r in result.jobs} == {"a": 0, "b": 1}


def test_pair_within_tolerance_runs_to_the_end_together():
    rec = Recorder(Eaco(colocation=_table(1.0)))
    sim = Simulator(
        [_cifar("a"), _cifar("b")],
        cluster=_cluster(1, 1),
        catalog=CATALOG,
        planner=rec,
        config=SimConfig(round_length_s=300.0),
        colocation=_table(0.95),
    )
    result = sim.run()
    assert summarise(result)["n_colocated_jobs"] == 2
    assert all(r.n_preemptions == 0 for r in result.jobs)


def _mixed_jobs(n: int = 24, gap_s: float = 200.0, scale: float = 1.0) -> list[Job]:
    workloads = ("bert", "resnet50_cifar10", "vgg16", "resnet50", "gpt2", "deepspeech2")
    jobs = []
    for i in range(n):
        gpus = (1, 2, 4, 1)[i % 4]
        w = workloads[i % len(workloads)]
        jobs.append(
            Job(f"j{i:02d}", w, "t", gap_s * i, scale * (2000.0 + 500.0 * (i % 5)), 64 * gpus,
                requested_gpus=gpus, min_gpus=gpus, max_gpus=gpus)
        )  # fmt: skip
    return jobs


def test_ones_finishes_every_job_without_exceeding_caps():
    rec = Recorder(Ones(seed=3))
    sim = Simulator(
        _mixed_jobs(),
        cluster=_cluster(2, 4),
        catalog=CATALOG,
        planner=rec,
        config=SimConfig(round_length_s=300.0),
    )
    result = sim.run()
    assert all(r.finish_s is not None for r in result.jobs)
    request = {j.job_id: j.requested_gpus for j in _mixed_jobs()}
    for _, _, plan in rec.rounds:
        caps = plan.policy_state["ones"]["caps"]
        for jid, a in plan.allocations.items():
            assert a.n_gpus <= caps[jid] <= 4 * request[jid]
            assert a.global_batch == 64 * a.n_gpus  # per-GPU batch 64 kept


def test_netdelay_spreads_a_job_only_once_its_timer_has_run_out():
    # Given two 3-GPU jobs that leave one GPU free on each node, and a sensitive
    # 2-GPU job arriving after them under 4x congestion
    pol = NetDelay(preempt=False, delay_per_sensitivity_s=2_000.0, congestion=4.0)
    rec = Recorder(pol)
    jobs = [
        Job("a", "bert", "t", 0.0, 200_000.0, 192, requested_gpus=3, min_gpus=3, max_gpus=3),
        Job("b", "bert", "t", 0.0, 200_000.0, 192, requested_gpus=3, min_gpus=3, max_gpus=3),
        Job("c", "resnet50_cifar10", "t", 10.0, 20_000.0, 256, requested_gpus=2, min_gpus=2,
            max_gpus=2),
    ]  # fmt: skip
    sim = Simulator(
        jobs,
        cluster=_cluster(2, 4),
        catalog=CATALOG,
        planner=rec,
        config=SimConfig(round_length_s=300.0, congestion=4.0),
    )
    result = sim.run()
    ctx, _ = admit(rec.rounds[1][1], now=rec.rounds[1][0])
    jv = next(v for v in ctx.jobs if v.job.job_id == "c")
    due_s = 10.0 + pol.timer_s(pol.sensitivity(ctx, jv, 2), 2_000.0)
    assert due_s > 600.0
    # Then c waits for locality in every round before its timer runs out
    for now, _, plan in rec.rounds:
        if 10.0 <= now < due_s:
            assert plan.waiting["c"].code == "delayed_for_locality"
            assert plan.waiting["c"].until_s == due_s
    # and starts spread over both nodes in the first round after it
    first = min(now for now, _, plan in rec.rounds if "c" in plan.allocations)
    assert first == 300.0 * -(-due_s // 300.0)
    start_plan = next(plan for now, _, plan in rec.rounds if now == first)
    assert {g.split("/")[0] for g in start_plan.allocations["c"].gpu_ids} == {"n0", "n1"}
    assert all(r.finish_s is not None for r in result.jobs)
    assert summarise(result)["comm_overhead_gpu_h"] > 0.0
