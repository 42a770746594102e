"""A discrete-event simulator that drives the core's ``plan_round`` over a job trace.

Time advances from event to event: scheduling rounds every ``round_length_s`` (at
multiples of it), job arrivals and job completions. At each round the engine builds a
frozen :class:`~scheduling.core.types.Snapshot` (jobs with their progress and current
allocation, the cluster, the budget with what remains, the grid's intensity now and
ahead), asks the planner for a :class:`~scheduling.core.types.Plan` and applies it. With
``replan_on_events`` it also plans at every arrival and completion in between.

Between events nothing changes, so every quantity is integrated exactly:

* a job's work is ``total_iters`` iterations at its *submitted* global batch, i.e. a
  number of useful samples (the core's convention, ``scheduling/core/context.py``); run
  at batch ``b`` it progresses at ``(b x E(b) / submitted batch) / (iter_time_s(cfg) *
  iter_time_scale)`` submitted-batch iterations per second, ``E`` its statistical
  efficiency from ``Job.noise_scale`` (``scheduling/core/goodput.py``; the same number
  the policies see: the simulator's truth is the workload's learned curve), and
  finishes at the exact instant its remaining work is done;
* each of its GPUs draws ``power_w(cfg) * power_scale`` while it progresses;
* a plan may ask to be revisited before the next round (``Plan.replan_at_s``: a probe of
  a job known only by its prior ends there); the stretch ends at that instant;
* after a start from a checkpoint, a resize or a move the job makes no progress for
  ``restart_cost_s`` and its GPUs draw idle power meanwhile (loading, not computing);
  a fresh first start costs nothing, a preemption (stop) keeps the progress made;
* GPUs that run nothing draw the idle power of their model (the lowest idle power any
  perf model of that GPU reports, as the core assumes), unless ``power_off_idle_nodes``:
  then a node none of whose GPUs is allocated at the start of a stretch is off for that
  stretch and draws nothing (a node in use stays powered until the next plan);
* carbon is power x the hourly intensity, integrated over each piece with the hour
  boundaries inside it (:meth:`HourlyIntensity.co2_g`);
* GPU sharing (EaCO): a plan may give one GPU to up to ``Plan.max_jobs_per_gpu`` jobs
  (pairs only are modelled). Each job of a pair runs at its measured throughput ratio
  ``x`` (Gavel's co-located / isolated rate, ``scheduling/core/colocation.py``; an
  unmeasured pair alternates, ``UNMEASURED_PAIR_RATIO``), times seeded log-normal noise
  of ``colocation_noise``; each adds ``x`` of its dynamic draw to one shared idle draw,
  half of which each is charged (``pair_member_power_w``). What it ran at is reported
  back as ``Job.observed_slowdown``, the early observation EaCO acts on;
* congestion: a job spread over nodes spends ``T - T_c`` per iteration on inter-node
  communication (``T`` its placement's iteration time, ``T_c`` the consolidated one);
  ``congestion`` scales that part, and its GPUs idle while they wait (the draw above
  idle is spread over the longer iteration). The time beyond ``T_c`` is reported as
  communication overhead (GPU-seconds).

Budgets (``BudgetSpec``, any number: cluster-wide and per team) run in successive
periods: the one in force at a planning instant is handed to the core with what it has
spent so far, exactly as the live adapter hands a budget row with its ledger total, and
a stretch never crosses a period's start or end (a planning instant is added there), so
every joule is charged to the period it was drawn in. A stretch also ends where a
``pause_jobs`` budget reaches its limit at what its jobs draw, and that period is handed
to the next round as spent (``_hard_limit_watch``), as the live service runs the pausing
round at the next beat tick. ``SimResult.budget_periods`` says what each period was given
and spent.

The simulation ends when every job has finished, or, with jobs left that nothing runs
(or that make no progress: jobs that only restart) for ``stall_limit_s`` and no arrivals
to come (e.g. a workload without a perf model),
once every budget has begun a new period since anything last ran and a round planned then
ran nothing either (jobs a spent budget holds back wait for the next period's budget, and
the idle GPUs meanwhile draw on the period they wait in; so with budgets in force a job
nothing can run keeps the run going to the latest next period's start; a job a policy held
back to pace its budget, to that renewed period's end), or at
``max_time_s``; unfinished jobs are reported as such, never dropped silently.
Nothing here reads the clock, and the only randomness (co-location noise) is seeded
per pair from ``SimConfig.seed``, so a run is a pure function of its inputs: the same
trace, seed and config give the same result.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from scheduling.core.colocation import (
    PAIR_IDLE_SHARE,
    UNMEASURED_PAIR_RATIO,
    load_colocation,
    pair_member_power_w,
    slowdown_of,
)
from scheduling.core.goodput import useful_samples_per_iter
from scheduling.core.types import (
    Allocation,
    CarbonSignal,
    ClockSteps,
    Cluster,
    HardLimitAction,
    Job,
    PerfCatalog,
    Plan,
    PowerLimits,
    Snapshot,
    WaitCode,
    WaitReason,
)
from scheduling.core.waiting import wait_code_counts
from scheduling.simulator.budgets import BudgetLedger, BudgetSpec
from scheduling.simulator.carbon import ConstantIntensity, HourlyIntensity
from scheduling.simulator.knowledge import LearnedKnowledge
from scheduling.simulator.state import (  # noqa: F401 - re-exported for callers
    JobRecord,
    Planner,
    ProgressHook,
    RoundSample,
    SimConfig,
    SimResult,
    SimulationError,
    _PerfCache,
    run_start_s,
)

# Wait codes of a job a policy holds back to pace a budget that has some left (not this
# round, or not this hour): it may start later in the same period, so the stall test gives
# a renewed period its whole length first (``Simulator._renewed_before``).
PACED_WAITS = frozenset({WaitCode.OVER_ROUND_ALLOWANCE, WaitCode.WAITING_FOR_CLEAN_HOUR})


class Simulator:
    """One run of a trace through a planner on a cluster; call :meth:`run` once."""

    def __init__(
        self,
        jobs: Sequence[Job],
        *,
        cluster: Cluster,
        catalog: PerfCatalog,
        planner: Planner,
        config: SimConfig | None = None,
        intensity: HourlyIntensity | None = None,
        budget: BudgetSpec | None = None,
        progress: ProgressHook | None = None,
        colocation: Any = None,
        budgets: Sequence[BudgetSpec] = (),
        clock_steps: Mapping[str, ClockSteps] | None = None,
        power_limits: Mapping[str, PowerLimits] | None = None,
    ) -> None:
        ids = [j.job_id for j in jobs]
        if len(set(ids)) != len(ids):
            raise SimulationError("job ids in the trace are not unique")
        self.cluster = cluster
        self.catalog = catalog
        self.planner = planner
        self.config = config or SimConfig()
        self.intensity = intensity or ConstantIntensity(0.0)
        specs = tuple(budgets) + ((budget,) if budget is not None else ())
        if len({b.budget_id for b in specs}) != len(specs):
            raise SimulationError("budget ids are not unique")
        self.budgets = BudgetLedger(specs)
        # Teams a budget gives nothing in every period (matched team budgets give a team
        # whose jobs drew nothing under the baseline a budget of nothing): their jobs wait
        # for good, as a job too big for the cluster does.
        self._unfunded_teams = frozenset(
            b.team
            for b in specs
            if b.team is not None
            and b.renews
            and b.hard_limit_action != HardLimitAction.NOTIFY_ONLY
            and any(
                limit is not None and limit <= 0.0 for limit in (b.energy_limit_j, b.co2_limit_g)
            )
        )
        self.progress = progress
        # The clocks and power limits the GPUs of a model take, where not every one of the
        # catalog's (``Snapshot.clock_steps``, ``Snapshot.power_limits``): the budget what-if
        # gives the live GPUs', so that it plans what the live round would. A plan is then
        # at settings the GPUs take, and is applied as it is. None: the catalog's GPUs.
        self._clock_steps = dict(clock_steps or {})
        self._power_limits = dict(power_limits or {})
        self._colocation = colocation  # ColocationModel; loaded when a plan first shares
        self._noise: dict[tuple[str, str], float] = {}
        self._max_share = 1
        self._perf = _PerfCache(catalog)
        self._gpu_node = {g.gpu_id: g.node for g in cluster.gpus}
        self._gpu_model = {g.gpu_id: g.model for g in cluster.gpus}
        self._records = [JobRecord(spec=j) for j in sorted(jobs, key=lambda j: j.submit_time_s)]
        # A job's place in arrival order (the active set's order), and the active jobs
        # that hold GPUs in it: a long queue's waiting jobs are passed over each round
        # without a look (``_apply``, ``_advance``), in the order the active set has.
        self._order = {r.spec.job_id: i for i, r in enumerate(self._records)}
        self._holding: dict[str, JobRecord] = {}
        self._idle_w = idle_power_by_model(
            catalog, {g.model for g in cluster.gpus}, override_w=self.config.idle_power_w
        )
        self._node_idle_w: dict[str, float] = Counter()
        for g in cluster.gpus:
            self._node_idle_w[g.node] += self._idle_w[g.model]
        # Idle power of the whole cluster when nothing runs (all off if nodes power down).
        self._idle_all_w = (
            0.0 if self.config.power_off_idle_nodes else sum(self._node_idle_w.values())
        )
        self._energy_used_j = 0.0
        self._policy_state: Mapping[str, Any] = {}
        self._exploration: Mapping[str, Any] = {}
        self._co2_used_g = 0.0
        self._gpu_models = tuple(sorted({g.model for g in cluster.gpus}))
        self.knowledge: LearnedKnowledge | None = None
        if self.config.knowledge == "learned":
            self.knowledge = LearnedKnowledge(
                catalog,
                measurement_noise=self.config.measurement_noise,
                seed=self.config.seed,
                hide_workloads=self.config.hide_workloads,
            )

    # --- the run --------------------------------------------------------------------

    def run(self) -> SimResult:
        cfg = self.config
        L = cfg.round_length_s
        records = self._records
        n_total = len(records)
        next_arrival = 0  # index into records of the next job not yet arrived
        active: dict[str, JobRecord] = {}
        timeline: list[RoundSample] = []
        wait_codes: Counter[str] = Counter()
        idle_energy_j = 0.0
        busy_gpu_s = 0.0
        n_finished = 0
        # The clock begins in the round of the first arrival: the idle cluster before
        # it is no part of the run (``state.run_start_s``).
        t = run_start_s((r.spec.submit_time_s for r in records), L)
        start_s = self.budgets.run_start_s = t
        next_tick = t
        last_activity_s = t
        # Whether a round since then held a job back to pace its budget (see PACED_WAITS).
        paced_since_activity = False
        stopped_early = False
        stopped_why = ""
        never_runnable: dict[str, str] = {}
        only_never_runnable_left = False
        all_gpus = self.cluster.gpus
        idle_all_w = self._idle_all_w
        n_rounds = 0

        while n_finished < n_total:
            if cfg.max_time_s is not None and t >= cfg.max_time_s:
                stopped_early = True
                stopped_why = f"it reached its time limit ({cfg.max_time_s:g} s)"
                break
            if cfg.max_rounds is not None and n_rounds >= cfg.max_rounds:
                stopped_early = True
                stopped_why = (
                    f"it planned {n_rounds:,} rounds, the most a run may, by "
                    f"{t / 86400:.3g} simulated days (a longer --round-length-s, or less work)"
                )
                break
            # Arrivals up to now join the active set.
            while next_arrival < n_total and records[next_arrival].spec.submit_time_s <= t:
                rec = records[next_arrival]
                active[rec.spec.job_id] = rec
                next_arrival += 1
                # A stall is counted from the last arrival at the earliest: a job that came
                # after weeks in which nothing ran (a job before it stuck, or none there) is
                # given its own stall limit, not stopped at its first round.
                last_activity_s = max(last_activity_s, rec.spec.submit_time_s)
            if not active:
                # Nothing to schedule: jump to the first planning instant after the next
                # arrival, integrating the idle cluster's power over the gap exactly.
                arrival_s = records[next_arrival].spec.submit_time_s
                t_next = arrival_s if cfg.replan_on_events else math.ceil(arrival_s / L) * L
                t_next = min(t_next, self.budgets.next_boundary(t))
                energy = idle_all_w * (t_next - t)
                co2 = self.intensity.co2_g(idle_all_w, t, t_next)
                idle_energy_j += energy
                self._account(energy, co2)
                self.budgets.charge(t, energy, co2, {})
                if t_next > t:
                    timeline.append(RoundSample(t, t_next, energy, co2, 0, 0, 0, 0.0, None, None))
                t = t_next
                continue

            plan = self.planner(self._snapshot(active, t), t)
            n_rounds += 1
            # Timers and learned state a policy keeps between rounds ride in the plan.
            self._policy_state = plan.policy_state
            if plan.exploration:
                self._exploration = plan.exploration
                for job_id, record in plan.exploration.items():
                    active[job_id].exploration = record
            # Counted by code once a round (in the order codes first appear, as one by one;
            # a long queue's tail counted without its sentences being made).
            codes = wait_code_counts(plan.waiting)
            for code, k in codes.items():
                wait_codes[str(code)] += k
                if code in PACED_WAITS:
                    paced_since_activity = True
            self._apply(plan, active, t)
            stuck: dict[str, str] = {}
            if next_arrival >= n_total and (
                WaitCode.NO_MATCHING_GPU in codes
                or (WaitCode.BUDGET_EXHAUSTED in codes and self._unfunded_teams)
            ):
                stuck = _never_runnable(plan, active, self._unfunded_teams)
                if stuck and len(stuck) == len(active):
                    # The simulated cluster never changes: a job too big for it under this
                    # policy waits for good. Stop here, not after a stall limit of idle
                    # draw charged to the run, and name the jobs.
                    never_runnable = stuck
                    only_never_runnable_left = True
                    stopped_early = True
                    stopped_why = "only jobs that can never run on this cluster were left"
                    break
            if t >= next_tick:
                next_tick = math.floor(t / L) * L + L

            horizon = next_tick
            if cfg.replan_on_events and next_arrival < n_total:
                horizon = min(horizon, max(records[next_arrival].spec.submit_time_s, t))
            if cfg.max_time_s is not None:
                horizon = min(horizon, cfg.max_time_s)
            horizon = min(horizon, self.budgets.next_boundary(t))
            if plan.replan_at_s is not None and plan.replan_at_s > t:
                horizon = min(horizon, plan.replan_at_s)  # a probe ends there
            holding = self._holding
            running = len(holding)
            # Distinct GPUs: co-located jobs share theirs.
            busy_gpus = len({g for r in holding.values() for g in r.allocation.gpu_ids})
            # After the last arrival, a stretch in which every active job finishes ends
            # at the last completion: no idle tail is charged past the makespan.
            last = next_arrival >= n_total
            t_end, finished, energy, co2, idle_e, busy_s, by_team, progressed = self._advance(
                active, t, horizon, last, n_stuck=len(stuck)
            )
            idle_energy_j += idle_e
            busy_gpu_s += busy_s
            timeline.append(
                RoundSample(
                    t0_s=t,
                    t1_s=t_end,
                    energy_j=energy,
                    co2_g=co2,
                    busy_gpus=busy_gpus,
                    running_jobs=running,
                    waiting_jobs=len(active) - running,
                    predicted_energy_j=plan.predicted_energy_j,
                    energy_allowance_j=plan.energy_allowance_j,
                    co2_allowance_g=plan.co2_allowance_g,
                    budget_price=_budget_price(plan.policy_state),
                )
            )
            self._account(energy, co2)
            self.budgets.charge(t, energy, co2, by_team)
            for rec in finished:
                del active[rec.spec.job_id]
            n_finished += len(finished)
            if progressed:
                # Progress, not a held allocation: jobs that only restart (their budget
                # spent on loading checkpoints each period, the hard-limit watch stopping
                # them) would otherwise keep a run going for ever.
                last_activity_s = t_end
                paced_since_activity = False
            t = t_end
            if self.progress is not None:
                self.progress(n_finished, t)
            if (
                active
                and next_arrival >= n_total
                and t - last_activity_s >= cfg.stall_limit_s
                and self._renewed_before(last_activity_s, t, paced=paced_since_activity)
            ):
                stopped_early = True
                stopped_why = (
                    f"no job progressed for {(t - last_activity_s) / 86400:.3g} days (the "
                    "stall limit): those left only restarted or could not run"
                )
                # Among those left, the jobs the cluster can never run (too big for it, a
                # team funded with nothing) are named as when only they are left: a stall
                # said nothing of them, though nothing the run did could have helped them.
                never_runnable = stuck
                # The jobs the stall left, by name and with what they did: the line said
                # only "those left only restarted or could not run", and a team whose
                # period budget is less than one checkpoint restart of its job (a team
                # budget split by need, periods much shorter than the run) left that
                # job unnamed, started once a period and stopped mid-restart for ever.
                left = [r for j, r in active.items() if j not in stuck]
                if left:
                    stopped_why += f"; {self._left_named(left, plan.waiting)}"
                if stuck:
                    stopped_why += f"; {_named(stuck)}"
                break

        end_s = max((r.finish_s for r in records if r.finish_s is not None), default=t)
        if stopped_early and not only_never_runnable_left:
            end_s = t
        return SimResult(
            jobs=records,
            timeline=timeline,
            n_gpus=len(all_gpus),
            energy_j=self._energy_used_j,
            co2_g=self._co2_used_g,
            idle_energy_j=idle_energy_j,
            busy_gpu_s=busy_gpu_s,
            end_s=end_s,
            stopped_early=stopped_early,
            stopped_why=stopped_why,
            wait_codes=wait_codes,
            never_runnable=never_runnable,
            budget_periods=self.budgets.periods(),
            start_s=start_s,
        )

    def _left_named(
        self,
        left: Sequence[JobRecord],
        waiting: Mapping[str, WaitReason] | None = None,
        shown: int = 5,
    ) -> str:
        """The clause naming the unfinished jobs a stall left, the first ``shown`` by id:
        how far each got, how often it was started, and, where it is so, that a budget
        of its team gives less a period than one checkpoint restart of it draws, and
        why the last round's plan (``waiting``) left it waiting."""
        ordered = sorted(left, key=lambda r: r.spec.job_id)
        waiting = waiting or {}
        parts = []
        for rec in ordered[:shown]:
            spec = rec.spec
            done = rec.done_iters / spec.total_iters if spec.total_iters > 0 else 0.0
            text = f"{spec.job_id}: {100.0 * done:.1f}% done, started {rec.n_starts} time(s)"
            why = self._restart_unaffordable(rec)
            if why:
                text += f", {why}"
            # A job the policy never started had no reason at all (the fourth sweep:
            # PowerFlow under team budgets of one-hour periods left three jobs "0.0%
            # done, started 0 time(s)"); the policy's own reason of the last round says
            # what held it.
            reason = waiting.get(spec.job_id) if rec.allocation is None else None
            if reason is not None:
                said = reason.message.removeprefix("Waiting: ").rstrip(". ")
                text += f", waiting in the last round ({reason.code}: {said})"
            parts.append(text)
        more = f" and {len(ordered) - shown} more" if len(ordered) > shown else ""
        return f"{len(ordered)} job(s) left unfinished ({'; '.join(parts)}{more})"

    def _restart_unaffordable(self, rec: JobRecord) -> str:
        """Why ``rec`` could never progress again, where its team's ``pause_jobs`` energy
        budget gives less a period than a checkpoint restart on its fewest GPUs draws (a
        resumed job draws idle power for ``restart_cost_s`` before it progresses, and the
        hard-limit watch stops it at the limit first); "" otherwise."""
        restart = self.config.restart_cost_s
        if restart <= 0.0 or rec.done_iters <= 0.0:
            return ""
        n = max(rec.spec.min_gpus, 1)
        need_j = min(self._idle_w[m] for m in self._gpu_models) * n * restart
        for b in self.budgets.specs:
            if (
                b.team is not None
                and b.team == rec.spec.team
                and b.hard_limit_action == HardLimitAction.PAUSE_JOBS
                and b.energy_limit_j is not None
                and b.energy_limit_j < need_j
            ):
                return (
                    f"its team {b.team}'s budget gives {b.energy_limit_j:.4g} J a period, "
                    f"less than one checkpoint restart on {n} GPU(s) draws ({need_j:.4g} J: "
                    f"{restart:g} s at idle)"
                )
        return ""

    def _account(self, energy_j: float, co2_g: float) -> None:
        self._energy_used_j += energy_j
        self._co2_used_g += co2_g

    # --- snapshot ---------------------------------------------------------------------

    def _snapshot_job(self, rec: JobRecord) -> Job:
        """The frozen view of ``rec`` (kept on it until its state changes)."""
        # Job(**fields) is ~1.5x cheaper than dataclasses.replace, which
        # dominated the engine's own time on long traces.
        fields = rec.spec_fields
        if fields is None:
            fields = rec.spec_fields = {
                f.name: getattr(rec.spec, f.name) for f in dataclasses.fields(Job)
            }
            if self.knowledge is not None:
                # What makes this job differ from its workload is for its
                # learned model to find out, not given (knowledge.py).
                fields["iter_time_scale"] = 1.0
                fields["power_scale"] = 1.0
        fields = dict(fields)
        fields["done_iters"] = rec.done_iters
        fields["allocation"] = rec.allocation
        fields["started_s"] = rec.started_s
        fields["last_change_s"] = rec.last_change_s
        fields["attained_gpu_s"] = rec.attained_gpu_s
        fields["observed_slowdown"] = rec.observed_slowdown
        rec.snapshot_job = Job(**fields)
        return rec.snapshot_job

    def _snapshot(self, active: dict[str, JobRecord], t: float) -> Snapshot:
        # (a waiting job's view is kept from round to round: one look each)
        jobs = [rec.snapshot_job or self._snapshot_job(rec) for rec in active.values()]
        budgets = self.budgets.at(t)
        carbon = CarbonSignal(
            ci_g_per_kwh=self.intensity.ci_at(t),
            forecast=self.intensity.forecast(t, self.config.forecast_hours),
            estimated=self.intensity.estimated_at(t),
        )
        job_perf = {}
        if self.knowledge is not None:
            job_perf = self.knowledge.job_perf(jobs, self._gpu_models)
        return Snapshot(
            cluster=self.cluster,
            jobs=tuple(jobs),
            perf=self.catalog,
            job_perf=job_perf,
            round_length_s=self.config.round_length_s,
            budgets=budgets,
            # The idle draw the simulation charges (the catalog's, or ``idle_power_w``'s).
            idle_power_w=dict(self._idle_w),
            clock_steps=self._clock_steps,
            power_limits=self._power_limits,
            carbon=carbon,
            epoch_s=self.intensity.epoch_s,
            power_off_idle_nodes=self.config.power_off_idle_nodes,
            policy_state=self._policy_state,
            # Exploration only where policies see learned models (oracle needs none).
            exploration_budget_frac=(
                self.config.exploration_budget if self.knowledge is not None else None
            ),
            exploration=self._exploration,
            exploration_batch_probe=self.config.exploration_batch_probe,
            # Oracle knowledge: the catalog the policies see is what advances the jobs.
            exact_perf=self.knowledge is None and self.config.exact_perf,
        )

    # --- applying a plan ----------------------------------------------------------------

    def _apply(self, plan: Plan, active: dict[str, JobRecord], t: float) -> None:
        used: Counter[str] = Counter()
        limit = getattr(plan, "max_jobs_per_gpu", 1)
        self._max_share = limit
        for job_id, alloc in plan.allocations.items():
            if job_id not in active:
                raise SimulationError(
                    f"plan allocates GPUs to {job_id!r}, which is not an active job"
                )
            if not alloc.gpu_ids:
                raise SimulationError(f"plan gives job {job_id!r} an allocation without GPUs")
            for gpu_id in alloc.gpu_ids:
                if gpu_id not in self._gpu_node:
                    raise SimulationError(f"plan uses unknown GPU {gpu_id!r} for job {job_id!r}")
                used[gpu_id] += 1
                cap = min(limit, 2)  # pairs are the most sharing modelled
                if used[gpu_id] > cap:
                    who = "one job" if cap == 1 else f"{cap} jobs"
                    raise SimulationError(f"plan gives GPU {gpu_id!r} to more than {who}")
        restart = self.config.restart_cost_s
        holding = self._holding
        # Only the jobs that hold GPUs or are given some can change: the others wait on.
        touched = list(holding.values())
        touched += [active[j] for j in plan.allocations if j not in holding]
        for rec in touched:
            job_id = rec.spec.job_id
            new = plan.allocations.get(job_id)
            old = rec.allocation
            if new == old:
                continue
            rec.snapshot_job = None
            if new is None:
                del holding[job_id]
                rec.allocation = None
                rec.shape = ()
                rec.started_s = None
                rec.last_change_s = t
                rec.n_preemptions += 1
                continue
            rec.allocation = new
            if old is None:
                holding[job_id] = rec
                rec.n_starts += 1
                rec.started_s = t
                rec.last_change_s = t
                if rec.first_start_s is None:
                    rec.first_start_s = t
                # Resuming from a checkpoint costs a restart; a fresh start does not.
                rec.restart_until_s = t + restart if rec.done_iters > 0 else t
                rec.shape = self._shape(new)
            elif set(new.gpu_ids) != set(old.gpu_ids):
                rec.n_resizes += 1
                rec.last_change_s = t
                rec.restart_until_s = t + restart
                rec.shape = self._shape(new)
            else:
                rec.n_retunes += 1

    # --- sharing ------------------------------------------------------------------------

    def _mates(self, held: Sequence[JobRecord]) -> dict[str, JobRecord]:
        """For each job that time-slices its GPUs, the job it shares them with (``held``:
        the jobs that hold GPUs)."""
        if self._max_share < 2:
            return {}
        holders: dict[str, list[JobRecord]] = {}
        for rec in held:
            for g in rec.allocation.gpu_ids:
                holders.setdefault(g, []).append(rec)
        mates: dict[str, JobRecord] = {}
        for recs in holders.values():
            if len(recs) == 2:
                a, b = recs
                for x, y in ((a, b), (b, a)):
                    known = mates.setdefault(x.spec.job_id, y)
                    if known is not y:
                        raise SimulationError(
                            f"job {x.spec.job_id!r} shares GPUs with more than one job"
                        )
        return mates

    def _shared_ratio(self, rec: JobRecord, mate: JobRecord) -> float:
        """Throughput ratio (shared / alone) of ``rec`` next to ``mate``: measured
        where Gavel has the pair, ``UNMEASURED_PAIR_RATIO`` otherwise, times the pair's
        seeded noise."""
        if self._colocation is None:
            self._colocation = load_colocation()
        a, b = rec.allocation, mate.allocation
        x = UNMEASURED_PAIR_RATIO
        if a is not None and b is not None:
            x, _ = self._colocation.shared_ratios(
                rec.spec.workload,
                a.global_batch / a.n_gpus,
                mate.spec.workload,
                b.global_batch / b.n_gpus,
                a.n_gpus,
            )
        sigma = self.config.colocation_noise
        if sigma > 0.0:
            key = (rec.spec.job_id, mate.spec.job_id)
            noise = self._noise.get(key)
            if noise is None:
                rng = random.Random(f"{self.config.seed}:{key[0]}:{key[1]}")
                noise = self._noise[key] = math.exp(rng.gauss(0.0, sigma))
            x = min(x * noise, 1.0)
        return x

    def _observed(self, rec: JobRecord, mate: JobRecord) -> float:
        return slowdown_of(self._shared_ratio(rec, mate))

    def _shape(self, alloc: Allocation) -> tuple[int, ...]:
        per_node = Counter(self._gpu_node[g] for g in alloc.gpu_ids)
        return tuple(sorted(per_node.values(), reverse=True))

    # --- progress between planning instants ------------------------------------------------

    def _renewed_before(self, last_activity_s: float, t: float, *, paced: bool = False) -> bool:
        """True if a round planned after every budget began a new period since anything
        last ran (at ``last_activity_s``; 0: nothing ran yet) ended at ``t`` having run
        nothing either, or if no budget has a period ahead: jobs a spent budget holds back
        start when the next period's budget applies, so only then is a stall a stall. A
        period that begins as the last stretch that ran ends began after it ran.

        ``paced``: a round since then held a job back to pace a budget (``PACED_WAITS``).
        Such a policy may start it late in the renewed period, once the unspent allowance
        has grown (PowerFlow with ``pricing=false`` held one 10.6 days into a period of
        13.5, and the run stopped at the 7-day stall limit), so the renewed periods must
        then have run their whole length, the longest budget's, first."""
        renewed_s = self.budgets.all_renewed_s(last_activity_s, at_t=last_activity_s > 0.0)
        if renewed_s == math.inf:
            return True
        if paced:
            renewed_s += max(b.period_s for b in self.budgets.specs)
        return t > renewed_s

    def _advance(
        self, active: dict[str, JobRecord], t0: float, t1: float, last: bool, n_stuck: int = 0
    ):
        """Run every allocated job from t0 to t1 (with ``replan_on_events``, only to the
        first completion; after the last arrival, to the last completion if all finish but
        the ``n_stuck`` that can never run).
        Returns (end, finished records, energy, co2, idle energy, held GPU-seconds, per
        team the [energy, co2] its jobs drew, and whether any job progressed)."""
        cfg = self.config
        co2_of = self.intensity.co2_g
        # The jobs that hold GPUs, in the active set's (arrival) order: the sums below
        # add them in that order.
        order = self._order
        held = sorted(self._holding.values(), key=lambda r: order[r.spec.job_id])
        mate_of = self._mates(held)
        # First pass: rates and finish instants.
        plans = []
        for rec in held:
            alloc = rec.allocation
            spec = rec.spec
            gpu_model = self._gpu_model[alloc.gpu_ids[0]]
            iter_s, power_w = self._perf.iter_time_and_power(
                spec.workload, gpu_model, alloc, rec.shape
            )
            idle_w = self._idle_w[gpu_model]
            comm_frac = 0.0
            if len(rec.shape) > 1:
                # Congestion scales the inter-node part; the GPUs idle while they wait.
                cons_s, _ = self._perf.iter_time_and_power(spec.workload, gpu_model, alloc, ())
                if iter_s > cons_s:
                    slow_s = cons_s + cfg.congestion * (iter_s - cons_s)
                    power_w = idle_w + (power_w - idle_w) * iter_s / slow_s
                    iter_s = slow_s
                    comm_frac = 1.0 - cons_s / slow_s
            share = 1.0
            mate = mate_of.get(spec.job_id)
            if mate is not None:
                x = self._shared_ratio(rec, mate)
                iter_s /= x
                power_w = pair_member_power_w(idle_w, power_w, x)
                share = PAIR_IDLE_SHARE
            # Seconds per submitted-batch iteration: work is useful samples (module doc).
            useful = useful_samples_per_iter(spec, alloc.global_batch)
            work_s = iter_s * spec.iter_time_scale * spec.global_batch / useful
            power_w *= spec.power_scale
            start = max(t0, rec.restart_until_s)
            finish = start + max(spec.total_iters - rec.done_iters, 0.0) * work_s
            plans.append(
                (rec, gpu_model, work_s, power_w, start, finish, share, comm_frac, mate, iter_s)
            )
        t_end = t1
        ends_run = last and len(plans) == len(active) - n_stuck and all(p[5] <= t1 for p in plans)
        if cfg.replan_on_events:
            t_end = min([t1] + [p[5] for p in plans if p[5] < t1])
        elif ends_run:
            t_end = max([t0] + [p[5] for p in plans])
        # A job whose finish the watch's stop falls within FINISH_TIE_S of finishes: its
        # budget was spent on its very end (see FINISH_TIE_S). ``cut``: the jobs whose team
        # budget is spent on their very end while the stretch goes on, and the instant
        # their draw is charged to (see ``_hard_limit_watch``).
        tie_s = 0.0
        cut: dict[str, float] = {}
        if self.budgets and plans:
            uncut = t_end
            t_end, cut = self._hard_limit_watch(plans, t0, t_end, ends_run=ends_run)
            tie_s = FINISH_TIE_S if t_end < uncut else 0.0
        idle_w_of = self._idle_w
        energy = co2 = idle_e = 0.0
        # Seconds each GPU is held from t0 on: co-located jobs share a GPU, which is busy
        # while either holds it (every stretch starts at t0, so the union is the longest).
        held_until: dict[str, float] = {}
        by_team: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        allocated_idle_w = 0.0
        used_nodes: set[str] = set()
        finished = []
        progressed = False
        knowledge = self.knowledge
        for rec, gpu_model, work_s, power_w, start, finish, share, comm_frac, mate, it_s in plans:
            alloc = rec.allocation
            n = alloc.n_gpus
            idle_w = idle_w_of[gpu_model] * n * share
            # What the job draws is charged to the stretch's end, or to the instant the
            # watch found its team budget spent, a hair before its finish (``cut``).
            drawn_to = min(t_end, cut.get(rec.spec.job_id, t_end))
            run_end = min(finish, t_end)
            # Checkpoint-restart: allocated, idle power, no progress.
            restart_end = min(start, drawn_to)
            e_job = idle_w * (restart_end - t0)
            c_job = co2_of(idle_w, t0, restart_end)
            if run_end > start:
                progressed = True
                busy_end = min(run_end, drawn_to)
                if busy_end > start:
                    e_job += power_w * n * (busy_end - start)
                    c_job += co2_of(power_w * n, start, busy_end)
                rec.done_iters += (run_end - start) / work_s
                rec.comm_overhead_gpu_s += comm_frac * n * (run_end - start)
                if mate is not None:
                    rec.shared_s += run_end - start
                elif knowledge is not None:
                    # What the job's progress reports and NVML would show (knowledge.py).
                    knowledge.observe(
                        rec.spec,
                        gpu_model,
                        alloc,
                        rec.shape,
                        it_s * rec.spec.iter_time_scale,
                        power_w,
                    )
            rec.observed_slowdown = None if mate is None else self._observed(rec, mate)
            rec.energy_j += e_job
            rec.co2_g += c_job
            team_use = by_team[rec.spec.team]
            team_use[0] += e_job
            team_use[1] += c_job
            energy += e_job
            co2 += c_job
            held_s = min(finish, t_end) - t0
            rec.attained_gpu_s += n * held_s
            for g in alloc.gpu_ids:
                if held_s > held_until.get(g, 0.0):
                    held_until[g] = held_s
            rec.snapshot_job = None
            # Its GPUs idle, on a powered node, from the end of what is charged to the job
            # to the next planning instant (a job that finished; one whose draw the watch
            # cut, ``cut``, the GPUs it holds until then).
            idle_from = min(finish, drawn_to)
            if t_end > idle_from:
                e_idle = idle_w * (t_end - idle_from)
                energy += e_idle
                idle_e += e_idle
                co2 += co2_of(idle_w, idle_from, t_end)
            if finish <= t_end + tie_s:
                rec.done_iters = rec.spec.total_iters
                rec.finish_s = finish
                rec.allocation = None
                del self._holding[rec.spec.job_id]
                finished.append(rec)
                if knowledge is not None:
                    knowledge.finish(rec.spec)
            allocated_idle_w += idle_w
            if cfg.power_off_idle_nodes:
                used_nodes.update(self._gpu_node[g] for g in alloc.gpu_ids)
        # GPUs no job held during the stretch; max() guards float round-off.
        if cfg.power_off_idle_nodes:
            powered_w = sum(self._node_idle_w[node] for node in used_nodes)
        else:
            powered_w = self._idle_all_w
        free_w = max(powered_w - allocated_idle_w, 0.0)
        e_free = free_w * (t_end - t0)
        energy += e_free
        idle_e += e_free
        co2 += co2_of(free_w, t0, t_end)
        held_gpu_s = sum(held_until.values())
        return t_end, finished, energy, co2, idle_e, held_gpu_s, by_team, progressed

    def _hard_limit_watch(
        self, plans: list[tuple], t0: float, t_end: float, *, ends_run: bool = False
    ) -> tuple[float, dict[str, float]]:
        """Where a ``pause_jobs`` budget would reach its limit before ``t_end`` at what its
        jobs draw in this stretch (``_advance``'s plans), the stretch ends there and the
        period is marked spent (``BudgetLedger.stop``): the round planned then pauses its
        jobs (``round.admit``). The live service does the same with its ledger: a round is
        due as soon as accounting finds such a budget spent with jobs still running
        (``scheduling.services``). The policies pace by their predictions, which for a job
        learned online can be wrong by far (a model taught on one GPU count, run on
        another); the watch holds the contract by what is drawn, not by what was
        predicted. A cluster budget's idle GPUs draw on after its jobs stop: a period
        whose idle floor alone exceeds it is not kept (the CLI says so).

        ``ends_run``: every job finishes in this stretch and none is to come, so the run,
        and its charging, ends at the last completion and no idle floor is set aside;
        unless some budget stops the stretch first: then the run goes on, and the
        stretch is watched as any other, with the cluster budgets' floors set aside.

        A team budget reached within ``FINISH_TIE_S`` of the end of every job of it still
        drawing (a budget of exactly what its jobs draw, a policy matched to its own spend
        per team) does not end the stretch: those jobs finish where they do and their draw
        is charged to a microsecond before the crossing (returned, by job id), their GPUs
        idle after it; the period is marked spent once they have all finished (one that
        finishes just after the stretch's end holds its GPUs in the next round, as it
        would unbudgeted, and finishes in the next stretch). Ending the stretch there took the
        next plan off the round grid: jobs waiting were started earlier than the baseline
        started them, in other carbon hours, and teams matched to their own carbon went
        over by a hair and waited a whole period (the fourth sweep: `fifo` at `fifo`'s
        carbon per team, 0.298x against itself).

        Returns the stretch's end and those jobs' charge ends."""
        crossings = self._crossings(plans, t0, t_end, ends_run=ends_run)
        if ends_run and any(tied is None for *_, tied in crossings):
            crossings = self._crossings(plans, t0, t_end, ends_run=False)
        if not crossings:
            return t_end, {}
        real = [t for t, _, _, tied in crossings if tied is None]
        first = min(real) if real else math.inf
        # A microsecond early: the float sums that charge the stretch must not put the
        # period a hair over the limit the watch stopped it at.
        end = max(t0, first - 1e-6) if real else t_end
        finish_of = {p[0].spec.job_id: p[5] for p in plans}
        tie_s = FINISH_TIE_S if real else 0.0  # as ``_advance`` finishes jobs
        cut: dict[str, float] = {}
        for t_x, i, k, tied in crossings:
            if tied is not None and t_x <= first:
                # spent on its jobs' very end, before the stretch ends: the stretch goes on
                at = max(t0, t_x - 1e-6)
                for job_id in tied:
                    cut[job_id] = min(cut.get(job_id, at), at)
                if all(finish_of[j] <= end + tie_s for j in tied):
                    self.budgets.stop(i, k)
            elif t_x <= first + 1e-6:  # spent at the stretch's end (others are not, yet)
                self.budgets.stop(i, k)
        return end, cut

    def _crossings(
        self, plans: list[tuple], t0: float, t_end: float, *, ends_run: bool
    ) -> list[tuple[float, int, int, tuple[str, ...] | None]]:
        """(instant, budget index, period, tied) of every ``pause_jobs`` period in force
        that the stretch's draw would take to its limit before ``t_end`` (see
        ``_hard_limit_watch``); ``tied``: for a team budget reached within
        ``FINISH_TIE_S`` of the finish of every job of it still drawing, those jobs' ids
        (None otherwise)."""
        ledger = self.budgets
        idle_w_of, power_off = self._idle_w, self.config.power_off_idle_nodes
        # by team, each allocated job's (start, finish, busy draw, idle draw of its GPUs):
        # it draws idle while restarting (until start), busy until it finishes
        parts: dict[str | None, list[tuple]] = defaultdict(list)
        ids: dict[str | None, list[str]] = defaultdict(list)
        for rec, gpu_model, _w, power_w, start, finish, share, *_ in plans:
            n = rec.allocation.n_gpus
            parts[rec.spec.team].append(
                (start, finish, power_w * n, idle_w_of[gpu_model] * n * share)
            )
            ids[rec.spec.team].append(rec.spec.job_id)
        powered_w = self._idle_all_w
        if power_off:
            nodes = {self._gpu_node[g] for p in plans for g in p[0].allocation.gpu_ids}
            powered_w = sum(self._node_idle_w[node] for node in nodes)
        crossings: list[tuple[float, int, int, tuple[str, ...] | None]] = []
        for i, b in enumerate(ledger.specs):
            if b.hard_limit_action != HardLimitAction.PAUSE_JOBS:
                continue
            k = b.period_at(t0)
            if k is None or (i, k) in ledger.stopped:
                continue
            mine = [p for ps in parts.values() for p in ps] if b.team is None else parts.get(b.team)
            if not mine:
                continue
            left_e, left_c = ledger.left(i, k)
            # Reaching within LIMIT_MARGIN of the limit is reaching it (see LIMIT_MARGIN).
            if left_e is not None:
                left_e -= LIMIT_MARGIN * b.energy_limit_j
            if left_c is not None:
                left_c -= LIMIT_MARGIN * b.co2_limit_g
            # A cluster budget pays the powered idle GPUs to its period's end whether or not
            # jobs run: that floor is set aside, and the watch stops the jobs where what is
            # left reaches it (the draw above it is what they add). A period whose floor
            # alone exceeds its limit cannot be kept by stopping anything (the CLI says
            # so); there the watch stops at the limit itself. In the run's last stretch
            # (every job finishes in it, none is to come) nothing is set aside: the run,
            # and its charging, ends at the last completion (unless a budget stops the
            # stretch first: ``_hard_limit_watch`` then looks again with the floors).
            floor_w = 0.0
            if b.team is None and not ends_run:
                floor_w = self._reserved_floor_w(b, k)
            if floor_w > 0.0:
                end = b.bounds(k)[1]
                if left_e is not None:
                    left_e -= floor_w * (end - t0)
                if left_c is not None:
                    left_c -= self.intensity.co2_g(floor_w, t0, end)
                if (left_e is not None and left_e <= 0.0) or (left_c is not None and left_c <= 0):
                    crossings.append((t0, i, k, None))
                    continue
            # the most it can draw in the stretch: most stretches end far from any limit
            most_w = powered_w - floor_w if b.team is None else 0.0
            for _start, _finish, busy_w, idle_w in mine:
                most_w += max(busy_w - idle_w, 0.0) if b.team is None else max(busy_w, idle_w)
            if (left_e is None or most_w * (t_end - t0) < left_e) and (
                left_c is None or self.intensity.co2_g(most_w, t0, t_end) < left_c
            ):
                continue
            steps = _draw_steps(mine, b.team is None, powered_w - floor_w, t0, t_end)
            t_x = _crossing(steps, t_end, left_e, None)
            if left_c is not None:
                t_x = min(t_x, _crossing(steps, t_end, left_c, self.intensity.co2_g))
            if t_x < t_end:
                crossings.append((t_x, i, k, _tied(mine, ids[b.team], t0, t_x) if b.team else None))
        return crossings

    def _reserved_floor_w(self, b, k: int) -> float:
        """The idle draw a cluster budget's period ``k`` keeps for its rest: every GPU's idle
        power (nodes powered off when idle keep none), unless that floor over the whole
        period already exceeds a limit (then no stop can keep it; 0)."""
        floor_w = self._idle_all_w
        if floor_w <= 0.0:
            return 0.0
        start, end = b.bounds(k)
        start = max(start, self.budgets.run_start_s)  # nothing is drawn before the run
        if b.energy_limit_j is not None and floor_w * (end - start) > b.energy_limit_j:
            return 0.0
        if b.co2_limit_g is not None and self.intensity.co2_g(floor_w, start, end) > b.co2_limit_g:
            return 0.0
        return floor_w


# A job the hard-limit watch stops at most this long before its finish is finished there:
# a budget that is exactly what its jobs draw (a policy matched to its own spend per team)
# is reached at the last job's end, and float sums put the crossing a hair before it; the
# watch stops a microsecond early, and the job, unfinished by that microsecond, waited for
# the next period and a restart (the fourth sweep: fifo at fifo's own energy per team,
# 0.153x against itself, each team's last job finishing after the 30-day period). The
# few microseconds of work are not charged, so the period stays within its limit.
FINISH_TIE_S = 1e-5

# The share of a limit the watch keeps unspent: a period whose draw would end within it of
# the limit is stopped there. A budget of exactly what its jobs draw (matched per team to
# the same policy) ends on its limit, where the ledger's sum, stretch by stretch, and the
# limit's, job by job, differ in the last bits: 1.0000000000000002 of it, shown as over.
# Float sums over a run's thousands of stretches stay far below it.
LIMIT_MARGIN = 1e-12


def _tied(
    parts: Sequence[tuple], job_ids: Sequence[str], t0: float, t_x: float
) -> tuple[str, ...] | None:
    """The ids of a team's jobs (``parts`` as in ``_draw_steps``, ``job_ids`` beside them)
    still drawing a microsecond before ``t_x``, where its budget is reached, if every one
    of them finishes within ``FINISH_TIE_S`` of that instant: the budget is spent on their
    very end, after which the team draws nothing in the stretch; None otherwise."""
    at = max(t0, t_x - 1e-6)
    tied = []
    for (_start, finish, _busy_w, _idle_w), job_id in zip(parts, job_ids, strict=True):
        if finish <= at:
            continue
        if finish > at + FINISH_TIE_S:
            return None
        tied.append(job_id)
    return tuple(tied) or None


def _draw_steps(
    parts: Sequence[tuple], cluster: bool, powered_w: float, t0: float, t1: float
) -> list[tuple[float, float, float]]:
    """A budget's draw over [t0, t1) as constant pieces (from, to, watts) from its jobs'
    ``parts`` (start, finish, busy and idle watts): a team's, what its jobs' GPUs draw
    (idle while restarting, busy while running, nothing once finished); the cluster's
    (``cluster``), every powered GPU (idle) plus what running jobs draw above idle
    (``_advance`` charges the same)."""
    rate = powered_w if cluster else 0.0
    changes: list[tuple[float, float]] = []
    for start, finish, busy_w, idle_w in parts:
        before, during = (0.0, busy_w - idle_w) if cluster else (idle_w, busy_w)
        if t0 < start:
            rate += before
            if start < t1:
                changes.append((start, during - before))
        elif t0 < finish:
            rate += during
        else:
            continue
        if max(start, t0) < finish < t1:
            changes.append((finish, -during))
    changes.sort()
    steps = []
    a = t0
    for t, d in changes:
        if t > a:
            steps.append((a, t, rate))
            a = t
        rate += d
    if t1 > a:
        steps.append((a, t1, rate))
    return steps


def _crossing(
    steps: list[tuple[float, float, float]], t1: float, left: float | None, co2_of
) -> float:
    """The instant the draw of ``steps`` has used ``left`` (joules; grams with ``co2_of``,
    the intensity's integral of a constant draw), or ``t1`` if it never does."""
    if left is None:
        return t1
    used = 0.0
    for a, c, w in steps:
        if w <= 0.0:
            continue
        piece = w * (c - a) if co2_of is None else co2_of(w, a, c)
        if used + piece < left:
            used += piece
            continue
        need = left - used
        if co2_of is None:
            return a + need / w
        lo, hi = a, c  # grams grow with time: bisect
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if co2_of(w, a, mid) < need:
                lo = mid
            else:
                hi = mid
        return lo
    return t1


def _never_runnable(
    plan: Plan, active: Mapping[str, JobRecord], unfunded_teams: frozenset[str] = frozenset()
) -> dict[str, str]:
    """Job id -> the plan's reason, for the active jobs that wait for GPUs the cluster
    does not have (``no_matching_gpu``): the simulated cluster never changes, so they
    never run; and for those that wait on a used-up budget of a team that every period
    gives nothing (``unfunded_teams``)."""
    stuck = {}
    for job_id, rec in active.items():
        reason = plan.waiting.get(job_id)
        if rec.allocation is None and reason is not None:
            if reason.code == WaitCode.NO_MATCHING_GPU:
                stuck[job_id] = reason.message
            elif reason.code == WaitCode.BUDGET_EXHAUSTED and rec.spec.team in unfunded_teams:
                stuck[job_id] = (
                    f"Waiting: team {rec.spec.team}'s budget is nothing in every period "
                    "(matched, its jobs drew nothing under the baseline)."
                )
    return stuck


def _named(stuck: Mapping[str, str], shown: int = 5) -> str:
    """The clause naming ``stuck``, the first ``shown`` of them by id, with their reasons."""
    ids = sorted(stuck)
    named = ", ".join(f"{i}: {stuck[i]}" for i in ids[:shown])
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return f"{len(ids)} job(s) can never run on this cluster ({named}{more})"


def _budget_price(state: Mapping[str, Any]) -> float | None:
    """The highest of the budget prices a priced policy keeps in its state (by budget id;
    ``budget_price.price_round``), or None."""
    prices = state.get("price")
    if not isinstance(prices, Mapping) or not prices:
        return None
    return max(float(p) for p in prices.values())


def idle_power_by_model(
    catalog: PerfCatalog, gpu_models: set[str], *, override_w: float | None = None
) -> dict[str, float]:
    """What an idle GPU of each model draws: ``override_w``, or the lowest idle power any
    perf model of that GPU reports (the core's rule, ``PerfCache.idle_power_w``, so that
    plans predict what runs)."""
    if override_w is not None:
        return dict.fromkeys(gpu_models, override_w)
    idle = {}
    for gpu_model in gpu_models:
        values = []
        for workload in catalog.workloads():
            try:
                values.append(float(catalog.get(workload, gpu_model).idle_power_w))
            except (KeyError, LookupError, ValueError):
                continue
        if not values:
            raise SimulationError(f"no perf model for GPU {gpu_model!r} gives an idle power")
        idle[gpu_model] = min(values)
    return idle
