"""Builders for pure core tests: clusters, jobs, snapshots and a small analytic perf
model whose numbers are easy to compute by hand.

The analytic model is deliberately not fitted to data: hand-computed expectations
need round numbers. Tests about real workloads use the fitted catalog instead.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from scheduling.core.policies.budget_greedy import _Round
from scheduling.core.policies.powerflow import PowerFlow
from scheduling.core.types import (
    Allocation,
    Budget,
    CarbonSignal,
    Cluster,
    Gpu,
    GpuConfig,
    Job,
    Node,
    Snapshot,
)


@dataclass(frozen=True)
class AnalyticModel:
    """T(n, b, f) = t1_s * (b / ref_batch) / n**scaling * (phi + (1 - phi) * f_max / f)
    P(n, b, f) = idle_power_w + (busy_power_w - idle_power_w) * (f / f_max)**2"""

    workload: str
    gpu_model: str = "A100"
    t1_s: float = 1.0  # seconds per iteration on one GPU at ref_batch and max clock
    scaling: float = 1.0  # 1.0 = perfect scaling, 0.0 = none
    ref_batch: int = 64
    phi: float = 0.5  # share of the iteration that does not speed up with the clock
    idle_power_w: float = 50.0
    busy_power_w: float = 250.0
    clocks_mhz: tuple[int, ...] = (1000, 1500, 2000)
    batch_sizes: tuple[int, ...] = (64,)

    def _clock(self, cfg: GpuConfig) -> int:
        return cfg.sm_clock_mhz or self.clocks_mhz[-1]

    def iter_time_s(self, cfg: GpuConfig) -> float:
        r = self._clock(cfg) / self.clocks_mhz[-1]
        return (
            self.t1_s
            * (cfg.global_batch / self.ref_batch)
            / cfg.n_gpus**self.scaling
            * (self.phi + (1 - self.phi) / r)
        )

    def power_w(self, cfg: GpuConfig) -> float:
        r = self._clock(cfg) / self.clocks_mhz[-1]
        return self.idle_power_w + (self.busy_power_w - self.idle_power_w) * r**2

    def energy_per_iter_j(self, cfg: GpuConfig) -> float:
        return cfg.n_gpus * self.power_w(cfg) * self.iter_time_s(cfg)


@dataclass(frozen=True)
class PriorOnly(AnalyticModel):
    """A job's learned model before any observation of its own
    (``OnlinePerfModel.estimated``): its prior alone speaks for it."""

    estimated: bool = True


class Catalog:
    def __init__(self, *models: AnalyticModel) -> None:
        self._m = {(m.workload, m.gpu_model): m for m in models}

    def get(self, workload: str, gpu_model: str) -> AnalyticModel:
        return self._m[(workload, gpu_model)]

    def workloads(self) -> tuple[str, ...]:
        return tuple(sorted({w for w, _ in self._m}))


def make_cluster(
    switches: int = 1, nodes_per_switch: int = 2, gpus_per_node: int = 8, model: str = "A100"
) -> Cluster:
    nodes = []
    for s in range(switches):
        for k in range(nodes_per_switch):
            name = f"s{s}n{k}"
            gpus = tuple(Gpu(f"{name}/{i}", name, i, model) for i in range(gpus_per_node))
            nodes.append(Node(name=name, switch=f"s{s}", gpus=gpus))
    return Cluster(nodes=tuple(nodes))


def job(job_id: str, *, submit: float = 0.0, n: int = 1, iters: float = 3600.0, **kw) -> Job:
    kw.setdefault("workload", "w")
    kw.setdefault("team", "t")
    kw.setdefault("global_batch", 64)
    kw.setdefault("min_gpus", kw.get("min_gpus", n))
    kw.setdefault("max_gpus", n)
    return Job(job_id=job_id, submit_time_s=submit, total_iters=iters, requested_gpus=n, **kw)


def running(j: Job, gpu_ids: tuple[str, ...], clock: int | None = None) -> Job:
    from dataclasses import replace

    return replace(
        j, allocation=Allocation(gpu_ids, j.global_batch, sm_clock_mhz=clock), started_s=0.0
    )


def snapshot(cluster: Cluster, jobs, catalog=None, **kw) -> Snapshot:
    catalog = catalog or Catalog(AnalyticModel("w"))
    kw.setdefault("round_length_s", 300.0)
    return Snapshot(cluster=cluster, jobs=tuple(jobs), perf=catalog, **kw)


WORKLOADS = (
    AnalyticModel("lin", t1_s=1.0, scaling=1.0),
    AnalyticModel("sub", t1_s=0.5, scaling=0.7, busy_power_w=300.0),
    AnalyticModel("flat", t1_s=2.0, scaling=0.2, busy_power_w=200.0, phi=0.8),
    AnalyticModel(
        "elastic",
        t1_s=1.0,
        scaling=0.9,
        batch_sizes=(32, 64, 128),
        clocks_mhz=(900, 1200, 1500, 1800),
    ),
)


def random_snapshot(
    seed: int,
    cluster: Cluster,
    *,
    n_jobs: int,
    running_share: float = 0.3,
    budgets: tuple[Budget, ...] = (),
    ci: float = 200.0,
    now: float = 10_000.0,
) -> Snapshot:
    """A seeded mix of waiting and running jobs; running ones sit on valid GPUs."""
    rng = random.Random(seed)
    free = [g.gpu_id for g in cluster.gpus]
    rng.shuffle(free)
    jobs = []
    for i in range(n_jobs):
        w = rng.choice(WORKLOADS)
        n = rng.choice((1, 1, 1, 2, 2, 4, 8, 3))
        elastic = rng.random() < 0.5
        j = Job(
            job_id=f"j{i:04d}",
            workload=w.workload,
            team=rng.choice(("red", "blue")),
            submit_time_s=rng.uniform(0, now),
            total_iters=rng.choice((100.0, 1000.0, 10_000.0, 100_000.0)),
            done_iters=0.0,
            global_batch=64,
            requested_gpus=n,
            min_gpus=1 if elastic else n,
            max_gpus=max(n, 16) if elastic else n,
            min_batch=32 if w.workload == "elastic" else None,
            max_batch=128 if w.workload == "elastic" else None,
        )
        if rng.random() < running_share and len(free) >= n:
            ids = tuple(free.pop() for _ in range(n))
            j = running(j, ids)
        jobs.append(j)
    return Snapshot(
        cluster=cluster,
        jobs=tuple(jobs),
        perf=Catalog(*WORKLOADS),
        round_length_s=300.0,
        budgets=budgets,
        carbon=CarbonSignal(ci_g_per_kwh=ci),
    )


class RoundSpy(PowerFlow):
    """PowerFlow that keeps a copy of its last round after admission (``rnd``: its cost
    model, what admission charged each budget), which ``allocate`` does not expose."""

    def allocate(self, ctx):
        self.rnd = _Round(self, ctx)
        self.rnd.order()
        self.rnd.price()
        self.rnd.admit()
        return super().allocate(ctx)
