"""The simulator's settings, per-job records and results (split from ``engine``).

``engine`` re-exports every name here, so ``from scheduling.simulator.engine import
SimConfig`` keeps working.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduling.core.types import Allocation, GpuConfig, Job, PerfCatalog, Plan, Snapshot

Planner = Callable[[Snapshot, float], Plan]
ProgressHook = Callable[[int, float], None]  # (jobs finished so far, simulated time)


class SimulationError(RuntimeError):
    """The planner returned an impossible plan or the inputs cannot be simulated."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    round_length_s: float = 300.0
    restart_cost_s: float = 30.0  # seconds without progress after a resize/move/resume
    power_off_idle_nodes: bool = False  # also handed to the planner in the snapshot
    idle_power_w: float | None = None  # None: from the perf catalog for the GPU model
    replan_on_events: bool = False
    forecast_hours: int = 24
    stall_limit_s: float = 7 * 86400.0
    max_time_s: float | None = None
    # The most rounds (planner calls) a run makes before it stops early: the command line
    # refuses a job longer than its limit at the job's fastest, but a policy that keeps a
    # job at its request (fifo at 1 GPU of 15) ran 15 times the rounds (a 10-year job: a
    # million rounds, hours of wall time, no word). None: no limit.
    max_rounds: int | None = None
    congestion: float = 1.0  # factor on inter-node communication time (1 = as measured)
    colocation_noise: float = 0.0  # sigma of log-normal noise on co-located throughput
    seed: int = 0  # for that noise and the measurement noise
    # What policies know (``knowledge.py``): "oracle", the catalog that advances jobs;
    # "learned", each job's online model fitted from noisy simulated observations.
    knowledge: str = "oracle"
    measurement_noise: float = 0.0  # sigma of log-normal noise on each observation
    hide_workloads: bool = True  # learned: a new workload starts from another's prior
    # learned: share of a job's predicted JCT that just-in-time exploration of power
    # limits may cost, for policies that explore (``core/exploration.py``); None: off.
    exploration_budget: float | None = 0.03
    # learned: exploring jobs that may change their batch run one round at twice it
    # (``core/exploration.py``, ``BATCH_PROBE``).
    exploration_batch_probe: bool = False
    # False: policies treat even oracle knowledge as an estimate, as the service treats its
    # catalog (``Snapshot.exact_perf``); the budget what-if, which predicts the service.
    exact_perf: bool = True

    def __post_init__(self) -> None:
        if not self.round_length_s > 0:
            raise ValueError("round_length_s must be positive")
        if self.restart_cost_s < 0:
            raise ValueError("restart_cost_s must not be negative")
        if self.forecast_hours < 1:
            raise ValueError("forecast_hours must be at least 1")
        if not self.congestion > 0:
            raise ValueError("congestion must be positive")
        if self.colocation_noise < 0:
            raise ValueError("colocation_noise must not be negative")
        if self.knowledge not in ("oracle", "learned"):
            raise ValueError("knowledge must be 'oracle' or 'learned'")
        if not (self.measurement_noise >= 0 and math.isfinite(self.measurement_noise)):
            raise ValueError("measurement_noise must be a finite number, not negative")
        if self.exploration_budget is not None and not 0.0 <= self.exploration_budget < 1.0:
            raise ValueError("exploration_budget must be in [0, 1) or None")


@dataclass(slots=True)
class JobRecord:
    """Mutable per-job state during a run and the per-job result after it."""

    spec: Job
    done_iters: float = 0.0
    allocation: Allocation | None = None
    shape: tuple[int, ...] = ()  # GPUs per node of the allocation, descending
    first_start_s: float | None = None
    started_s: float | None = None
    last_change_s: float | None = None
    restart_until_s: float = 0.0
    finish_s: float | None = None
    attained_gpu_s: float = 0.0
    energy_j: float = 0.0
    co2_g: float = 0.0
    n_starts: int = 0
    n_resizes: int = 0
    n_preemptions: int = 0
    n_retunes: int = 0
    comm_overhead_gpu_s: float = 0.0  # GPU-seconds beyond a consolidated placement's
    shared_s: float = 0.0  # seconds it ran time-slicing a GPU with another job
    observed_slowdown: float | None = None  # while shared, as Job.observed_slowdown
    exploration: Mapping[str, Any] | None = None  # its record (core/exploration.py), if any
    snapshot_job: Job | None = None  # the frozen view, rebuilt only when state changed
    spec_fields: dict[str, Any] | None = None  # the spec's fields, for fast rebuilds

    @property
    def jct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.spec.submit_time_s

    @property
    def queueing_delay_s(self) -> float | None:
        return None if self.first_start_s is None else self.first_start_s - self.spec.submit_time_s


@dataclass(frozen=True, slots=True)
class RoundSample:
    """One stretch between planning instants: what was planned and what it cost."""

    t0_s: float
    t1_s: float
    energy_j: float
    co2_g: float
    busy_gpus: int  # GPUs allocated at t0 (including those in checkpoint-restart)
    running_jobs: int
    waiting_jobs: int
    predicted_energy_j: float
    energy_allowance_j: float | None
    co2_allowance_g: float | None
    # The highest finite budget price a priced policy (PowerFlow, GreenFlow) set this round,
    # in seconds per joule or per gram (``budget_price``); None if unpriced or if every
    # priced budget's price was infinite (its free remainder did not cover its work's
    # minimum: such a budget is left out). A priced budget none of whose jobs is present
    # counts as 0.
    budget_price: float | None = None


def run_start_s(submit_times, round_length_s: float) -> float:
    """Where a run of jobs submitted at ``submit_times`` begins: the start of the round
    (on the grid of ``round_length_s`` from time 0) in which the first of them arrives.
    Nothing before it is the run's: a trace whose first job comes on day 10 was charged
    ten days of the idle cluster (its energy, its bound's floor, a matched budget's
    limit), and a matched period of horizon x its end from time 0 ended before its jobs
    came (the third sweep: a trace shifted by ten days went from 1.456x to 0.427x)."""
    first = min(submit_times, default=0.0)
    if not first > 0.0 or not math.isfinite(first):
        return 0.0
    return math.floor(first / round_length_s) * round_length_s


@dataclass
class SimResult:
    jobs: list[JobRecord]
    timeline: list[RoundSample]
    n_gpus: int
    energy_j: float
    co2_g: float
    idle_energy_j: float
    busy_gpu_s: float
    end_s: float
    stopped_early: bool
    wait_codes: Counter[str] = field(default_factory=Counter)
    # Why the run stopped with jobs unfinished, as the end of a sentence ("" if it did not).
    stopped_why: str = ""
    # Jobs the run stopped without, because they can never run on this cluster under this
    # policy (job id -> the policy's reason); the run stops as soon as only they are left,
    # and a run that stalls with others left names them too.
    never_runnable: dict[str, str] = field(default_factory=dict)
    budget_periods: list[Any] = field(default_factory=list)  # budgets.BudgetPeriod, by start
    # Where the run's clock began: the round in which the first job arrives (``run_start_s``).
    start_s: float = 0.0

    @property
    def stopped_with_runnable_jobs(self) -> bool:
        """Stopped early (a stall, the time limit) with a job left that is not named
        ``never_runnable``: its results are incomplete. A run that stopped once only
        never-runnable jobs were left is complete."""
        unfinished = {r.spec.job_id for r in self.jobs if r.finish_s is None}
        return self.stopped_early and not unfinished <= set(self.never_runnable)


class _PerfCache:
    """Memoises (iter_time_s, power_w) per configuration: perf models are pure."""

    def __init__(self, catalog: PerfCatalog) -> None:
        self.catalog = catalog
        self._models: dict[tuple[str, str], object] = {}
        self._values: dict[tuple, tuple[float, float]] = {}

    def model(self, workload: str, gpu_model: str):
        key = (workload, gpu_model)
        if key not in self._models:
            self._models[key] = self.catalog.get(workload, gpu_model)
        return self._models[key]

    def iter_time_and_power(
        self, workload: str, gpu_model: str, alloc: Allocation, shape: tuple[int, ...]
    ) -> tuple[float, float]:
        key = (
            workload,
            gpu_model,
            alloc.n_gpus,
            alloc.global_batch,
            alloc.sm_clock_mhz,
            alloc.power_limit_w,
            shape,
        )
        value = self._values.get(key)
        if value is None:
            model = self.model(workload, gpu_model)
            cfg = GpuConfig(
                n_gpus=alloc.n_gpus,
                global_batch=alloc.global_batch,
                sm_clock_mhz=alloc.sm_clock_mhz,
                power_limit_w=alloc.power_limit_w,
                gpus_per_node=shape,
            )
            value = (model.iter_time_s(cfg), model.power_w(cfg))
            if not (
                value[0] > 0
                and math.isfinite(value[0])
                and value[1] >= 0
                and math.isfinite(value[1])
            ):
                raise SimulationError(
                    f"perf model for {workload} on {gpu_model} gave {value} for {cfg}"
                )
            self._values[key] = value
        return value
