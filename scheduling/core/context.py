"""What a policy sees in one round: admitted jobs, capacity, budgets, cached predictions.

``RoundContext`` is built by the admit stage of ``plan_round`` and handed to
``Policy.allocate``. Predictions are cached per (workload, GPU model, configuration)
for the round, because greedy policies ask for the same configurations many times.

Time model (shared with the simulator): a job's work is ``remaining_iters`` iterations
at its *submitted* global batch, i.e. a number of useful samples; at another batch ``b``
one iteration makes ``b x E(b)`` of them, ``E`` the job's statistical efficiency
(``scheduling/core/goodput.py``), so a bigger batch is never free and a job whose
efficiency is unknown is never predicted to gain from another batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from typing import Any

from scheduling.core.goodput import iters_to_finish, useful_samples_per_iter
from scheduling.core.perf_models import with_clocks, with_limits
from scheduling.core.types import (
    Budget,
    ClockSteps,
    Cluster,
    GpuConfig,
    Job,
    PerfCatalog,
    PerfModel,
    PowerLimits,
    Snapshot,
    WaitReason,
)

_JOB_ID = attrgetter("job.job_id")


class PerfCache:
    """Per-round memo of perf-model lookups and predictions."""

    def __init__(
        self,
        catalog: PerfCatalog,
        job_perf: Mapping[tuple[str, str], PerfModel] | None = None,
        idle_power_w: Mapping[str, float] | None = None,
        clock_steps: Mapping[str, ClockSteps] | None = None,
        power_limits: Mapping[str, PowerLimits] | None = None,
    ) -> None:
        self._catalog = catalog
        self._job_perf = dict(job_perf or {})
        # GPU model -> the clocks and the power limits its GPUs take
        # (``Snapshot.clock_steps``, ``Snapshot.power_limits``): the models this cache
        # hands out plan only those (``with_clocks``, ``with_limits``); (job id, GPU
        # model) -> a job's learned model so restricted, made once a round.
        self._steps = dict(clock_steps or {})
        self._limits = dict(power_limits or {})
        self._own: dict[tuple[str, str], PerfModel] = {}
        # ids of the jobs with a learned model of their own (read only)
        self.learned_jobs = frozenset(job_id for job_id, _ in self._job_perf)
        self._models: dict[tuple[str, str], PerfModel | None] = {}
        self._pred: dict[tuple, tuple[float, float]] = {}
        self._idle: dict[str, float] = dict(idle_power_w or {})

    def model(self, workload: str, gpu_model: str) -> PerfModel | None:
        key = (workload, gpu_model)
        if key not in self._models:
            self._models[key] = self._taken(catalog_model(self._catalog, workload, gpu_model))
        return self._models[key]

    def _taken(self, model: PerfModel | None) -> PerfModel | None:
        """``model`` with only the clocks and power limits its GPUs take
        (``Snapshot.clock_steps``, ``Snapshot.power_limits``)."""
        if model is None:
            return model
        steps = self._steps.get(model.gpu_model)
        if steps is not None and model.clocks_mhz:
            model = with_clocks(model, steps.plannable(model.clocks_mhz))
        limits = self._limits.get(model.gpu_model)
        range_w = getattr(model, "power_limits_w", None)
        if limits is not None and range_w:
            model = with_limits(model, limits.plannable(range_w))
        return model

    def has_own_model(self, job: Job) -> bool:
        """Whether the job has a learned model of its own on some GPU model."""
        return job.job_id in self.learned_jobs

    def model_for(self, job: Job, gpu_model: str) -> PerfModel | None:
        """The job's own learned model on ``gpu_model`` if it has one, else the catalog's."""
        learned = self._job_perf.get((job.job_id, gpu_model))
        if learned is None:
            return self.model(job.workload, gpu_model)
        if not self._steps and not self._limits:
            return learned
        key = (job.job_id, gpu_model)
        if key not in self._own:
            self._own[key] = self._taken(learned)
        return self._own[key]

    def predict(
        self, model: PerfModel, n: int, batch: int, clock: int | None, limit: float | None
    ) -> tuple[float, float]:
        """(seconds per iteration, watts per busy GPU) for one configuration."""
        # Keyed by the model object: two jobs of one workload may have learned different models.
        key = (id(model), n, batch, clock, limit)
        hit = self._pred.get(key)
        if hit is None:
            cfg = GpuConfig(n_gpus=n, global_batch=batch, sm_clock_mhz=clock, power_limit_w=limit)
            both = getattr(model, "time_and_power", None)  # one evaluation, where it has it
            hit = both(cfg) if both is not None else (model.iter_time_s(cfg), model.power_w(cfg))
            self._pred[key] = hit
        return hit

    def idle_power_w(self, gpu_model: str) -> float:
        """Idle power of a GPU model: the snapshot's where it gives one
        (``Snapshot.idle_power_w``), else ``catalog_idle_power_w``; memoised for the round."""
        if gpu_model not in self._idle:
            self._idle[gpu_model] = catalog_idle_power_w(self._catalog, gpu_model)
        return self._idle[gpu_model]


def catalog_model(catalog: PerfCatalog, workload: str, gpu_model: str) -> PerfModel | None:
    """The catalog's model of ``workload`` on ``gpu_model``, None where it has none."""
    try:
        return catalog.get(workload, gpu_model)
    except (LookupError, ValueError):  # KeyError is a LookupError
        return None


def catalog_idle_power_w(catalog: PerfCatalog, gpu_model: str) -> float:
    """Idle power of a GPU model: the lowest any of the catalog's perf models on it reports
    (0 where the catalog has none on it). The rounds charge idle GPUs with it where the
    snapshot gives no other (``Snapshot.idle_power_w``: the service's, for GPU models the
    catalog has no model on), and the live online model reads a job's draw against it
    (``gpu_estimates.gpu_draw_range_w``)."""
    values = [
        m.idle_power_w
        for w in catalog.workloads()
        if (m := catalog_model(catalog, w, gpu_model)) is not None
    ]
    return min(values) if values else 0.0


@dataclass(frozen=True, slots=True)
class Estimate:
    """Predicted outcome of running a job in one configuration from now on."""

    remaining_s: float  # time to finish the remaining work
    power_w: float  # per busy GPU
    round_busy_s: float  # how long it is busy within this round
    round_energy_j: float  # all its GPUs, busy power, within this round
    remaining_energy_j: float  # all its GPUs, busy power, to the end


@dataclass(frozen=True, slots=True)
class JobView:
    """An admitted job with what admission resolved for it."""

    job: Job
    gpu_model: str
    perf: PerfModel
    budget_ids: tuple[str, ...] = ()  # active budgets that pay for it (team, cluster)


@dataclass(frozen=True)
class RoundContext:
    snapshot: Snapshot
    now_s: float
    jobs: tuple[JobView, ...]  # admitted, in snapshot order
    capacity: Mapping[str, int]  # schedulable GPUs per GPU model
    node_gpus: Mapping[str, int]  # GPUs per node per GPU model (largest node)
    budgets: tuple[Budget, ...]  # active at now_s
    cache: PerfCache
    policy_state: Mapping[str, Any] = field(default_factory=dict)
    # Running jobs a spent ``hold_queue`` budget keeps as they are: the round grants
    # them their current allocation unchanged, and their GPUs are in neither
    # ``capacity`` nor ``cluster``, so no policy plans another job onto them.
    pinned: tuple[JobView, ...] = ()
    # Per pinned job: why it would wait were it not running (its spent budget).
    held: Mapping[str, WaitReason] = field(default_factory=dict)
    # The cluster the policy may hand out: the snapshot's, less the pinned GPUs.
    cluster: Cluster | None = None

    @cached_property
    def views_by_id(self) -> dict[str, JobView]:
        """The admitted jobs' views by job id (read only; the round's stages share it)."""
        # (in C, as the comprehension over a long queue would make it)
        return dict(zip(map(_JOB_ID, self.jobs), self.jobs, strict=True))

    @property
    def free_cluster(self) -> Cluster:
        """The cluster less the pinned jobs' GPUs (for policies that name GPUs)."""
        return self.cluster if self.cluster is not None else self.snapshot.cluster

    @property
    def round_length_s(self) -> float:
        return self.snapshot.round_length_s

    @property
    def ci_g_per_kwh(self) -> float:
        return self.snapshot.carbon.ci_g_per_kwh

    def estimate(
        self,
        jv: JobView,
        n: int,
        batch: int | None = None,
        clock: int | None = None,
        limit: float | None = None,
    ) -> Estimate:
        remaining_s, power_w = self.remaining_and_power(jv, n, batch, clock, limit)
        busy_s = min(self.round_length_s, remaining_s)
        return Estimate(
            remaining_s=remaining_s,
            power_w=power_w,
            round_busy_s=busy_s,
            round_energy_j=n * power_w * busy_s,
            remaining_energy_j=n * power_w * remaining_s,
        )

    def remaining_and_power(
        self,
        jv: JobView,
        n: int,
        batch: int | None = None,
        clock: int | None = None,
        limit: float | None = None,
    ) -> tuple[float, float]:
        """(seconds to finish the remaining work, watts per busy GPU): what
        :meth:`estimate` derives the rest from. :meth:`remaining_and_power_grid` is the
        same formula over a whole grid, in one loop; keep the two alike."""
        job = jv.job
        b = batch if batch is not None else job.global_batch
        iter_s, power_w = self.cache.predict(jv.perf, n, b, clock, limit)
        iters = iters_to_finish(job, b)
        return iters * iter_s * job.iter_time_scale, power_w * job.power_scale

    def remaining_and_power_grid(
        self,
        jv: JobView,
        sizes: Sequence[int],
        clocks: Sequence[int | None],
        batches: Sequence[int],
    ) -> list[tuple[int, int, int, float, float]]:
        """:meth:`remaining_and_power` over every (size, clock, batch), as
        (size index, clock index, batch index, remaining_s, power_w), in one loop: the
        budget price scans every job's whole grid each round."""
        job = jv.job
        predict, perf = self.cache.predict, jv.perf
        samples = job.remaining_iters * job.global_batch
        its, ps = job.iter_time_scale, job.power_scale
        useful = [useful_samples_per_iter(job, b) for b in batches]
        out = []
        for si, n in enumerate(sizes):
            for ci, clock in enumerate(clocks):
                for bi, b in enumerate(batches):
                    iter_s, power_w = predict(perf, n, b, clock, None)
                    iters = samples / useful[bi]
                    out.append((si, ci, bi, iters * iter_s * its, power_w * ps))
        return out

    def idle_power_w(self, gpu_model: str) -> float:
        return self.cache.idle_power_w(gpu_model)

    def budget(self, budget_id: str) -> Budget:
        for b in self.budgets:
            if b.budget_id == budget_id:
                return b
        raise KeyError(budget_id)
