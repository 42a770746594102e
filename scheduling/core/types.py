"""Frozen value types that the scheduling core and the simulator work on.

Everything a policy sees is here: the cluster (GPUs in nodes under switches), the
jobs with their current allocation, budgets with what remains, the grid's carbon
intensity and the performance models. A policy never sees ORM rows; the service's
adapter (``scheduling/adapters.py``) and the simulator both build these objects.

Time is a float in seconds (``*_s``) and is always passed in: the service uses Unix
time, the simulator seconds since the trace's start (with ``Snapshot.epoch_s`` giving
the wall-clock time of zero so that hourly carbon intensity can be looked up).

Units are in names: ``_s`` seconds, ``_j`` joules, ``_w`` watts, ``_g`` grams CO2e,
``_mhz`` SM clock, ``ci_g_per_kwh`` grid intensity.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from functools import cached_property
from typing import Any, Protocol

J_PER_KWH = 3.6e6
G_PER_KG = 1000.0  # grams per kilogram (CO2e); the one copy, pure so the core may import it


def _decimal(x: float) -> Decimal:
    return Decimal(repr(float(x)))


def decimal_product(*factors: float) -> float:
    """The product of ``factors`` taken as the decimals they read as (their shortest repr:
    what a user typed), rounded to a float once. Multiplied as binary floats, a typed limit
    gained noise: 0.141 kWh * J_PER_KWH is 507599.99999999994 J, and a 7 g limit's 70 % soft
    limit 4.8999999999999995 g (the API gave both). A non-finite factor multiplies as floats."""
    if not all(math.isfinite(x) for x in factors):
        return math.prod(factors)
    product = Decimal(1)
    for x in factors:
        product *= _decimal(x)
    return float(product)


def decimal_quotient(dividend: float, divisor: float) -> float:
    """``dividend / divisor`` as ``decimal_product`` multiplies: 4.9 g / G_PER_KG is 0.0049 kg
    (as floats, 0.004900000000000001)."""
    if not (math.isfinite(dividend) and math.isfinite(divisor)) or divisor == 0:
        return dividend / divisor
    return float(_decimal(dividend) / _decimal(divisor))


# --- performance models -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuConfig:
    """One configuration of a job, as the performance models see it.

    ``gpus_per_node`` is the placement shape (e.g. ``(4, 4)`` = two nodes with four
    GPUs each); the empty tuple means "as consolidated as possible" for ``n_gpus``.
    ``sm_clock_mhz=None`` means the GPU's maximum clock and ``power_limit_w=None``
    its default power limit.
    """

    n_gpus: int
    global_batch: int
    sm_clock_mhz: int | None = None
    power_limit_w: float | None = None
    gpus_per_node: tuple[int, ...] = ()


class PerfModel(Protocol):
    """Predicts speed and power of one workload class on one GPU model."""

    workload: str
    gpu_model: str
    idle_power_w: float  # a powered GPU that runs nothing
    clocks_mhz: tuple[int, ...]  # supported SM clock steps, ascending
    batch_sizes: tuple[int, ...]  # global batch sizes the model is valid for, ascending

    def iter_time_s(self, cfg: GpuConfig) -> float:
        """Seconds per training iteration (one global batch)."""
        ...

    def power_w(self, cfg: GpuConfig) -> float:
        """Average power drawn by each busy GPU of the job, in watts."""
        ...

    def energy_per_iter_j(self, cfg: GpuConfig) -> float:
        """Joules per iteration over all the job's GPUs: n x P x T."""
        ...


class PerfCatalog(Protocol):
    """Looks up the model for a (workload, GPU model) pair."""

    def get(self, workload: str, gpu_model: str) -> PerfModel: ...

    def workloads(self) -> tuple[str, ...]: ...


# --- the cluster --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gpu:
    gpu_id: str  # stable id: the NVML UUID in the service, "node/index" in the simulator
    node: str
    index: int
    model: str  # GPU model key of the perf catalog, e.g. "A100"


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    switch: str
    gpus: tuple[Gpu, ...]
    schedulable: bool = True  # healthy and not draining


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[Node, ...]

    # Computed once per cluster (it is immutable): the simulator asks every round.
    @cached_property
    def gpus(self) -> tuple[Gpu, ...]:
        return tuple(g for n in self.nodes for g in n.gpus)

    @cached_property
    def schedulable_gpus(self) -> tuple[Gpu, ...]:
        return tuple(g for n in self.nodes if n.schedulable for g in n.gpus)

    # The dicts below are shared by every round that plans on this cluster: read only.
    @cached_property
    def model_of(self) -> dict[str, str]:
        """GPU id -> GPU model, every GPU."""
        return {g.gpu_id: g.model for g in self.gpus}

    @cached_property
    def schedulable_model_of(self) -> dict[str, str]:
        """GPU id -> GPU model, the schedulable GPUs."""
        return {g.gpu_id: g.model for g in self.schedulable_gpus}

    @cached_property
    def schedulable_capacity(self) -> tuple[dict[str, int], dict[str, int]]:
        """Over the schedulable nodes, in node order: the GPUs of each model, and the most
        GPUs of each model on one node."""
        capacity: dict[str, int] = {}
        node_gpus: dict[str, int] = {}
        for node in self.nodes:
            if not node.schedulable:
                continue
            per_model: dict[str, int] = {}
            for g in node.gpus:
                per_model[g.model] = per_model.get(g.model, 0) + 1
            for model, count in per_model.items():
                capacity[model] = capacity.get(model, 0) + count
                node_gpus[model] = max(node_gpus.get(model, 0), count)
        return capacity, node_gpus


# --- jobs -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Allocation:
    """What a job runs on: its GPUs, global batch and clock (or power limit)."""

    gpu_ids: tuple[str, ...]
    global_batch: int
    sm_clock_mhz: int | None = None
    power_limit_w: float | None = None

    @property
    def n_gpus(self) -> int:
        return len(self.gpu_ids)


@dataclass(frozen=True, slots=True)
class Job:
    """A training job as a policy sees it: its request, progress and current state."""

    job_id: str
    workload: str
    team: str
    submit_time_s: float
    total_iters: float
    global_batch: int
    requested_gpus: int = 1
    min_gpus: int = 1
    max_gpus: int = 1
    min_batch: int | None = None
    max_batch: int | None = None
    done_iters: float = 0.0
    priority: int = 0
    gpu_model: str | None = None  # None: any model
    # ONES: per-GPU batch fixed, learning rate scaled linearly up to max_lr.
    per_gpu_batch: int | None = None
    base_lr: float | None = None
    max_lr: float | None = None
    # EaCO: the largest slowdown the job accepts when it shares a GPU.
    slowdown_tolerance: float = 0.10
    # EaCO's early observation: the slowdown measured while the job shares its GPUs
    # (observed iteration time / isolated iteration time - 1), None until measured.
    # The simulator fills it from its ground truth, the service from telemetry.
    observed_slowdown: float | None = None
    # Running state (None while waiting).
    allocation: Allocation | None = None
    started_s: float | None = None
    last_change_s: float | None = None  # last start/resize/move
    attained_gpu_s: float = 0.0  # GPU-seconds of service so far (Tiresias)
    # Online refinement: observed / predicted, 1.0 until telemetry says otherwise.
    iter_time_scale: float = 1.0
    power_scale: float = 1.0
    # Statistical efficiency (``scheduling/core/goodput.py``): the gradient noise scale
    # in samples, from the job's reported gradient statistics (calibrated) or its
    # workload's learned curve; None: unknown, so the job keeps its submitted batch.
    noise_scale: float | None = None

    @property
    def remaining_iters(self) -> float:
        return max(self.total_iters - self.done_iters, 0.0)

    @property
    def is_running(self) -> bool:
        return self.allocation is not None


# --- budgets and the grid --------------------------------------------------------


class HardLimitAction(StrEnum):
    """What a round does with a budget's jobs once the budget is spent (``round.admit``
    is the one place that honours it, live and simulated alike)."""

    PAUSE_JOBS = "pause_jobs"  # running jobs stop, nothing starts
    HOLD_QUEUE = "hold_queue"  # running jobs keep their GPUs and settings, nothing starts
    NOTIFY_ONLY = "notify_only"  # nothing is held back; the budget is only reported


# The smallest budget limits that the service stores and the simulator takes: a watt-hour,
# a gram (a denormal 5e-324 kWh made used / limit overflow; 1e-300 kWh printed a share of
# 308 digits).
MIN_ENERGY_LIMIT_KWH = 0.001
MIN_CARBON_LIMIT_KG = 0.001


@dataclass(frozen=True, slots=True)
class Budget:
    """A team's (or, with ``team=None``, the cluster's) budget for one period.

    Until it is spent a budget is paced the same whatever ``hard_limit_action`` says;
    the action decides only what happens to its jobs once it is spent.
    """

    budget_id: str
    team: str | None
    period_start_s: float
    period_end_s: float
    energy_limit_j: float | None = None
    energy_used_j: float = 0.0
    co2_limit_g: float | None = None
    co2_used_g: float = 0.0
    hard_limit_action: HardLimitAction = HardLimitAction.PAUSE_JOBS

    @property
    def exhausted(self) -> bool:
        return self.energy_remaining_j == 0.0 or self.co2_remaining_g == 0.0

    @property
    def energy_remaining_j(self) -> float | None:
        if self.energy_limit_j is None:
            return None
        return max(self.energy_limit_j - self.energy_used_j, 0.0)

    @property
    def co2_remaining_g(self) -> float | None:
        if self.co2_limit_g is None:
            return None
        return max(self.co2_limit_g - self.co2_used_g, 0.0)


@dataclass(frozen=True, slots=True)
class CarbonSignal:
    """Grid carbon intensity now and, where known, ahead (hourly steps)."""

    ci_g_per_kwh: float
    forecast: tuple[tuple[float, float], ...] = ()  # (start_s, ci_g_per_kwh), ascending
    estimated: bool = False


@dataclass(frozen=True, slots=True)
class ClockSteps:
    """The SM clocks a set of GPUs runs at when told a clock, as the live agent applies
    one (``telemetry.agent.backends.capped_settings``; the service's
    ``adapters.settings_the_gpus_take``): no higher than ``top_mhz``, the lowest top clock
    among them, then the highest of ``steps`` (the clocks every GPU that lists any lists)
    at or below it, else the lowest step. No steps: the capped clock as it is."""

    steps: tuple[int, ...] = ()  # ascending
    top_mhz: int | None = None
    # Whether the GPUs' own tops differ (or some are not known): told no clock, each runs
    # up to its own, so there is no one clock a plan without one runs at (``unset_for``).
    tops_differ: bool = False

    def take(self, clock_mhz: int) -> int:
        """The clock the GPUs run at when told ``clock_mhz``."""
        if self.top_mhz is not None and clock_mhz > self.top_mhz:
            clock_mhz = self.top_mhz
        if self.steps:
            i = bisect.bisect_right(self.steps, clock_mhz)
            return self.steps[i - 1] if i else self.steps[0]
        return clock_mhz

    def plannable(self, clocks_mhz: tuple[int, ...]) -> tuple[int, ...]:
        """``clocks_mhz`` (a model's steps, ascending) as the clocks the GPUs take, once
        each: what a round may plan, so that what it predicts at a clock is what runs."""
        return tuple(sorted({self.take(c) for c in clocks_mhz}))

    def unset_for(self, model_top_mhz: int | None) -> int | None:
        """The clock to plan and record for a plan that sets none, on a perf model that
        predicts no clock at ``model_top_mhz`` (its GPU model's top clock,
        ``perf_models.unset_tops``; None: not known): the GPUs' own top, as they take it
        (the highest step at or below ``top_mhz``), where it is below the model's, so that
        the job is predicted at the clock it runs at (told none, the agent unlocks the
        clock and a GPU runs up to its top); None where it is not: the plan's None as it
        is. A plan with a clock of its own is taken by ``take``, as before. None also where
        the GPUs' tops differ (``tops_differ``): the lowest recorded would lock the GPUs
        that top out higher at it, where told none they run free up to their own."""
        if (
            self.tops_differ
            or self.top_mhz is None
            or model_top_mhz is None
            or self.top_mhz >= model_top_mhz
        ):
            return None
        return self.take(self.top_mhz)


@dataclass(frozen=True, slots=True)
class PowerLimits:
    """The power limits a set of GPUs runs at when told a limit, as the live agent applies
    one (``telemetry.agent.backends.capped_settings``; the service's
    ``adapters.settings_the_gpus_take``): within ``low_w``-``high_w``, the highest bottom
    limit and the lowest top limit among them (``low_w <= high_w``). ``default_w``: the
    default limit every one of them registered, which they run at when told none (the
    agent leaves such a GPU at its own limit); None where they registered different ones,
    or where it is not known."""

    low_w: float
    high_w: float
    default_w: float | None = None

    def __post_init__(self) -> None:
        if not self.low_w <= self.high_w:
            raise ValueError("a power-limit range needs low_w <= high_w")
        if self.default_w is not None and not self.low_w <= self.default_w <= self.high_w:
            raise ValueError("a default power limit needs low_w <= default_w <= high_w")

    @property
    def unset_w(self) -> float | None:
        """``unset_for`` a model whose top limit is not known (the GPUs' own top)."""
        return self.unset_for(None)

    def unset_for(self, model_top_w: float | None) -> float | None:
        """The limit to plan and record for a plan that sets none, on a perf model that
        predicts no limit as unthrottled at ``model_top_w`` (its GPU model's top limit,
        ``perf_models.unset_tops``; None: not known): the default the GPUs run at, where it
        is below their top or below the model's, so that the job is predicted at it; None
        where it is both (or their defaults differ): the plan's None as it is, predicted
        at the top that runs. A PCIe A100 registered 150-250 W with its 250 W default runs
        a plan without a limit at 250 W, which the catalog A100 (100-400 W) predicted as
        unthrottled at 400 W while a plan of 250 W was predicted throttled."""
        if self.default_w is None:
            return None
        if self.default_w < self.high_w or (
            model_top_w is not None and self.default_w < model_top_w
        ):
            return self.default_w
        return None

    def take(self, limit_w: float) -> float:
        """The limit the GPUs run at when told ``limit_w``."""
        return min(max(limit_w, self.low_w), self.high_w)

    def plannable(self, limits_w: tuple[float, float]) -> tuple[float, float]:
        """A model's (min, max) power limit as the limits the GPUs take: the range a round
        may plan in, so that what it predicts at a limit is what runs."""
        low, high = limits_w
        return (self.take(low), self.take(high))


# --- the snapshot and the plan -----------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """Everything one scheduling round may look at, frozen."""

    cluster: Cluster
    jobs: tuple[Job, ...]  # active jobs: waiting, running or paused
    perf: PerfCatalog
    round_length_s: float
    budgets: tuple[Budget, ...] = ()
    carbon: CarbonSignal = CarbonSignal(ci_g_per_kwh=0.0)
    epoch_s: float = 0.0  # wall-clock Unix time of now=0 (simulator); 0 in the service
    # False: every schedulable GPU is powered and draws idle power when unused.
    # True: nodes without any busy GPU are powered down, so packing saves energy.
    power_off_idle_nodes: bool = False
    # Per-job learned perf models (online_model.OnlinePerfModel), keyed by (job id, GPU
    # model): where present they replace the catalog's model for that job, and the job's
    # iter_time_scale / power_scale are 1 (the learned model already holds what they said).
    job_perf: Mapping[tuple[str, str], PerfModel] = field(default_factory=dict)
    # Idle draw of one GPU of a model, W, where it replaces the catalog's: the service gives
    # it for GPU models the catalog has no model on (measured, else estimated from NVML),
    # which the catalog would price at 0 W; the simulator the idle draw it charges.
    idle_power_w: Mapping[str, float] = field(default_factory=dict)
    # The clocks the GPUs of a model take (``ClockSteps``), where they are not every clock
    # of its perf models: the service gives each GPU model's, from what its GPUs registered.
    # A round plans only clocks they take (``ClockSteps.plannable``): planned at a model's
    # clock the GPUs do not take, a job's time and energy, and what its budget pays, were
    # predicted for a clock its GPUs never ran at. The simulator's GPUs take every clock.
    clock_steps: Mapping[str, ClockSteps] = field(default_factory=dict)
    # The power limits the GPUs of a model take (``PowerLimits``), likewise: a round plans
    # only limits in them (``PowerLimits.plannable``). Planned from the model's range (the
    # catalog A100's 100-400 W) on GPUs that registered less (a 250 W top), a job was
    # predicted at 400 W and ran at 250 W. The simulator's GPUs take the model's range.
    power_limits: Mapping[str, PowerLimits] = field(default_factory=dict)
    # Opaque, JSON-serialisable state a policy returned in its last Plan (timers,
    # learned co-location history, ...); the service stores it between rounds.
    policy_state: Mapping[str, Any] = field(default_factory=dict)
    # Just-in-time exploration (``scheduling/core/exploration.py``): None turns it off
    # (oracle knowledge, or the service's setting); else the share of a job's predicted
    # completion time its exploration may cost. ``exploration``: each job's record, as
    # the last Plan returned it.
    exploration_budget_frac: float | None = None
    exploration: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Whether exploring jobs that may change their batch run one round at twice it
    # (``exploration.BATCH_PROBE``); None: that module's default.
    exploration_batch_probe: bool | None = None
    # True: the perf models are what the jobs will do (an oracle simulation, where the
    # catalog advances the jobs). False: every prediction is an estimate, the catalog's
    # included (the service: a user's job of a catalog workload is not the catalog's run),
    # and budget policies keep a margin on predicted energy (``prediction_margin``).
    exact_perf: bool = True


class WaitCode(StrEnum):
    """Machine-readable reasons a job is left waiting."""

    BUDGET_EXHAUSTED = "budget_exhausted"
    WAITING_FOR_CLEAN_HOUR = "waiting_for_clean_hour"
    NO_FREE_BLOCK = "no_free_block"
    BEHIND_IN_QUEUE = "behind_in_queue"
    DELAYED_FOR_LOCALITY = "delayed_for_locality"
    PREEMPTED = "preempted"
    NO_PERF_MODEL = "no_perf_model"
    NO_MATCHING_GPU = "no_matching_gpu"
    OVER_ROUND_ALLOWANCE = "over_round_allowance"  # budget left, but not this round


@dataclass(frozen=True, slots=True)
class WaitReason:
    code: WaitCode
    message: str  # a sentence for a person
    until_s: float | None = None  # cleaner hour or estimated start, when known


class ChangeKind(StrEnum):
    START = "start"
    STOP = "stop"  # preempted or paused
    RESIZE = "resize"  # GPU count or placement changed: checkpoint-restart
    RETUNE = "retune"  # only batch, clock or power limit changed


@dataclass(frozen=True, slots=True)
class Change:
    job_id: str
    kind: ChangeKind
    before: Allocation | None
    after: Allocation | None


@dataclass(frozen=True)
class Plan:
    """A round's decision: an allocation for every job that runs, a reason for every
    other active job, what the round is predicted to cost, and the diff against the
    running state."""

    allocations: Mapping[str, Allocation]
    waiting: Mapping[str, WaitReason]
    changes: tuple[Change, ...] = ()
    # Running jobs a spent ``hold_queue`` budget keeps as they run (they are in
    # ``allocations`` too): why each would wait were it not running.
    held: Mapping[str, WaitReason] = field(default_factory=dict)
    predicted_energy_j: float = 0.0  # over the round, busy and idle GPUs
    predicted_co2_g: float = 0.0
    energy_allowance_j: float | None = None
    co2_allowance_g: float | None = None
    policy_state: Mapping[str, Any] = field(default_factory=dict)
    # Per budget_id: what this round may spend and what the plan is predicted to spend
    # (busy energy of the budget's jobs; a cluster-wide budget also pays idle GPUs).
    energy_allowance_by_budget_j: Mapping[str, float] = field(default_factory=dict)
    co2_allowance_by_budget_g: Mapping[str, float] = field(default_factory=dict)
    predicted_energy_by_budget_j: Mapping[str, float] = field(default_factory=dict)
    predicted_co2_by_budget_g: Mapping[str, float] = field(default_factory=dict)
    policy: str = ""
    # How many jobs may time-slice one GPU in this plan (1 = exclusive; EaCO: 2).
    max_jobs_per_gpu: int = 1
    # Each active job's exploration record (``exploration.new_record``), for the next
    # Snapshot and for the job's page.
    exploration: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # When the plan should be revisited before the next regular round (a probe of a job
    # known only by its prior ends there, ``budget_greedy``); None: the regular round.
    # The simulator plans again at that instant; the service stores it on the round
    # (``SchedulingRound.replan_at``) and beat's first tick after it runs a round.
    replan_at_s: float | None = None


# --- the policy interface ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Grant:
    """A policy's decision for one job: a configuration, not yet GPUs.

    ``n_gpus`` GPUs of ``gpu_model``; placement turns it into GPU ids. Grants come in
    priority order: when placement cannot honour them all, the later ones wait.
    """

    job_id: str
    n_gpus: int
    global_batch: int
    gpu_model: str
    sm_clock_mhz: int | None = None
    power_limit_w: float | None = None
    # Optional placement chosen by the policy itself (ONES' contiguous layout,
    # netdelay's consolidated-or-spread choice, EaCO's shared GPUs): exactly
    # ``n_gpus`` ids of ``gpu_model``. Empty: the policy's placer chooses.
    gpu_ids: tuple[str, ...] = ()
    # Predicted fractional slowdown of the job in this placement (EaCO: time-slicing
    # with a co-runner), so that the round's energy prediction accounts for it.
    slowdown: float = 0.0


@dataclass(frozen=True)
class PolicyDecision:
    """What ``Policy.allocate`` returns: grants, reasons, allowances, new state."""

    grants: tuple[Grant, ...]
    waiting: Mapping[str, WaitReason]
    energy_allowance_by_budget_j: Mapping[str, float] = field(default_factory=dict)
    co2_allowance_by_budget_g: Mapping[str, float] = field(default_factory=dict)
    policy_state: Mapping[str, Any] = field(default_factory=dict)
    replan_at_s: float | None = None  # see ``Plan.replan_at_s``


class Policy(Protocol):
    """A scheduling policy: one entry point, a registry name, a placement kind.

    Contract of ``allocate(ctx)`` (``ctx`` is a ``scheduling.core.context.RoundContext``):

    - it sees only ``ctx``: the admitted jobs (perf model and GPU model resolved, team
      budget not exhausted), free capacity per GPU model, the budgets, the carbon
      signal, cached perf predictions, ``ctx.now_s`` and the state it returned last
      round (``ctx.policy_state``); it never reads a clock or module globals;
    - it returns a ``Grant`` for each job it wants to run, in priority order, whose
      ``n_gpus`` summed per GPU model never exceed ``ctx.capacity``, and a
      ``WaitReason`` for every other admitted job;
    - it is deterministic: the same context gives the same decision;
    - any state it needs next round goes in ``PolicyDecision.policy_state`` and must be
      JSON-serialisable, because the service runs each round in a fresh process.

    ``placement`` names the round's placer (``scheduling.core.placement.PLACERS``):
    ``"buddy"`` (aligned power-of-two blocks, network packing) or ``"first_fit"``. A
    grant with explicit ``gpu_ids`` bypasses the placer; a policy that names the GPUs
    of every grant itself declares ``placement = None`` (no placer runs for it, and a
    grant without ``gpu_ids`` is a contract error). A policy
    with ``max_jobs_per_gpu > 1`` (optional attribute, default 1) may give one GPU to
    that many grants; GPU capacity is then counted in distinct GPUs.
    """

    name: str
    placement: str | None

    def allocate(self, ctx: Any) -> PolicyDecision: ...
