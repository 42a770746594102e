"""Probes of a larger GPU count on GPUs that would otherwise idle (issue 12, point 4).

A job's learned model (``online_model``) predicts GPU counts it never ran at from its
prior's shape, and a prior can be wrong there: after a vgg16 job hidden from the catalog
has run on one A100 and on four, every other catalog workload it could have started from
says eight GPUs are no faster than four, where vgg16's own measurements say 51 against
67 ms. A policy that grows a job by its predicted speedup then keeps it at four for good,
beside idle GPUs, and nothing ever measures eight: a lone deepspeech2 job learned ran
1.9x longer than with the catalog's truth (docs/benchmarks.md, "A probe of more GPUs").

So, after placement, a running job the policy kept at its GPU count ``n`` runs one round
at its next buddy size when all of this holds:

* the snapshot turns exploration on (``exploration_budget_frac``: the jobs' models are
  learned) and idle nodes stay powered; the policy resizes jobs by their predictions
  each round (``probes_gpus``: a policy that keeps a running job's count would keep the
  probe's) and gives each GPU to one job;
* its model has measured it at ``n`` GPUs and at no configuration of the larger count
  or more (``max_measured_gpus``), it has not probed that count before (its exploration
  record's ``gpu_probes``), and it is not exploring power limits now;
* where a budget pays for it, the probe runs at the highest clock at which the larger
  count is predicted to draw no more energy (so no more carbon) this round than the job's
  plan at ``n``, and is skipped where no clock does: the policy's allowance, which it
  spends to the joule on the jobs' upgrades, is not crossed by a probe;
* the larger block fits on GPUs no other job holds this round, where the policy's
  placer would put it (its picker on the round's real free state, extending the job's
  current GPUs: aligned, whole nodes where it spans nodes; a probe never moves another
  job);
* the probe's cost fits the exploration bound: what the round at the larger count loses
  at the speed the model predicts there, and a checkpoint-restart there and one back
  (the policy's ``restart_s``), with what its earlier exploration cost (``spent_s``),
  is at most ``budget_frac`` of the job's predicted completion time (time run so far and
  what remains at ``n``).

The round after, the policy decides with the measurement in the model. The record lists
the probes (``gpu_probes``: ``from_gpus``, ``n_gpus``, ``measured_gpus`` the most its
model had measured, ``since_s``, ``cost_s`` the cost as predicted, ``sm_clock_mhz`` the
clock a budget-paid probe ran at, None for the plan's; ``plan_energy_j`` and ``energy_j``
the round's predicted draw at ``n`` as planned and at the probe) and adds their cost to
``spent_s``: a job probes each count at most once, and a job the measurement moved up may
probe the next count while the bound allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from scheduling.core.exploration import DONE, EXPLORING, new_record
from scheduling.core.perf_models import unset_tops
from scheduling.core.placement import PICKERS, FreeGpus, job_buddy_sizes
from scheduling.core.types import Allocation


def probe_more_gpus(
    ctx: Any,
    policy: Any,
    allocations: dict[str, Allocation],
    records: Mapping[str, dict],
) -> dict[str, dict]:
    """Grow in ``allocations`` the jobs that probe a larger GPU count this round (module
    docstring) and return every record, the probing jobs' updated."""
    frac = ctx.snapshot.exploration_budget_frac
    out = dict(records)
    picker = PICKERS.get(policy.placement or "")
    if frac is None or not getattr(policy, "probes_gpus", False) or picker is None:
        return out
    if ctx.snapshot.power_off_idle_nodes:
        return out  # the free GPUs are off, not idle: a probe would power them up
    if getattr(policy, "max_jobs_per_gpu", 1) != 1:
        return out
    restart_s = float(getattr(policy, "restart_s", 30.0))
    free: FreeGpus | None = None  # the round's GPUs, every allocated one taken; built once
    for jv in ctx.jobs:
        job = jv.job
        before, after = job.allocation, allocations.get(job.job_id)
        if before is None or after is None or after.n_gpus != before.n_gpus:
            continue
        rec = out.get(job.job_id)
        if rec is not None and rec.get("status") == EXPLORING:
            continue
        probes = rec.get("gpu_probes", []) if rec is not None else []
        spent = rec.get("spent_s", 0.0) if rec is not None else 0.0
        if job.per_gpu_batch is not None:
            continue
        most = getattr(jv.perf, "max_measured_gpus", None)
        n, model = after.n_gpus, jv.gpu_model
        sizes = job_buddy_sizes(job, ctx.node_gpus[model], ctx.capacity[model])
        larger = [s for s in sizes if s > n and after.global_batch / s >= 1]
        if most is None or most < n or not larger or most >= larger[0]:
            continue
        if any(p["n_gpus"] == larger[0] for p in probes):
            continue
        elapsed = ctx.now_s - (job.started_s if job.started_s is not None else ctx.now_s)
        batch = after.global_batch
        now_est = ctx.estimate(jv, n, batch, after.sm_clock_mhz, after.power_limit_w)
        bound = frac * (elapsed + now_est.remaining_s)
        if spent + 2 * restart_s > bound:
            continue  # the restarts alone cost more than the bound allows (cost, below)
        # A probe at a clock sets no limit: its GPUs run at their default, where it is
        # below their top or the model's (``PowerLimits.unset_for``, as ``round.place``
        # records a plan without a limit), and it is predicted and recorded at that.
        taken = ctx.snapshot.power_limits.get(model)
        unset_w = taken.unset_for(unset_tops(jv.perf)[1]) if taken is not None else None
        clock = (
            _clock(ctx, jv, larger[0], batch, now_est.round_energy_j, unset_w)
            if jv.budget_ids
            else None
        )
        if jv.budget_ids and clock is None:
            continue  # no clock at which the larger count draws no more than this round's plan
        probe_limit = unset_w if clock is not None else after.power_limit_w
        probe_est = ctx.estimate(jv, larger[0], batch, clock, probe_limit)
        t_n, t_m = now_est.remaining_s, probe_est.remaining_s
        if not (t_n > 0 and t_m > 0):
            continue
        # What it loses as predicted: a round at the rate the model expects there, and a
        # restart there and one back.
        cost = ctx.round_length_s * max(1.0 - t_n / t_m, 0.0) + 2 * restart_s
        if spent + cost > bound:
            continue
        if free is None:
            free = FreeGpus(ctx.free_cluster)
            free.take(g for a in allocations.values() for g in a.gpu_ids if g in free.where)
        # Its own GPUs are free to extend; the picker judges alignment and whole nodes on
        # the real nodes, with every other job's GPUs used.
        free.give(after.gpu_ids)
        ids = picker(free, model, larger[0], after.gpu_ids)
        free.take(ids if ids is not None else after.gpu_ids)
        if ids is None:
            continue
        retune = {"sm_clock_mhz": clock, "power_limit_w": unset_w} if clock is not None else {}
        allocations[job.job_id] = replace(after, gpu_ids=ids, **retune)
        rec = dict(rec) if rec is not None else _record(model, n, ctx.now_s, frac)
        probe = {
            "from_gpus": n,
            "n_gpus": larger[0],
            "measured_gpus": most,
            "since_s": ctx.now_s,
            "cost_s": cost,
            "sm_clock_mhz": clock,
            # the round's predicted draw at n as planned, and at the probe
            "plan_energy_j": now_est.round_energy_j,
            "energy_j": probe_est.round_energy_j,
        }
        rec["gpu_probes"] = [*probes, probe]
        rec["spent_s"] = spent + cost
        rec["budget_s"] = bound
        out[job.job_id] = rec
    return out


def _clock(
    ctx, jv, n_gpus: int, batch: int, energy_j: float, limit_w: float | None = None
) -> int | None:
    """The highest clock at which ``n_gpus`` are predicted to draw no more energy this
    round than ``energy_j`` (what the job's plan draws): a probe a budget pays for costs
    the budget nothing. None where the lowest clock draws more: that is asked first, since
    it is the answer for nine in ten candidates (a larger count rarely draws less). A
    higher clock can draw less than the lowest only where the job would finish within the
    round (sooner at a faster clock) or by a quirk of its model; such a probe is not taken
    (7 of 12,081 candidates on philly_week; docs/benchmarks.md, "The simulator on
    philly_week, learned"). ``limit_w``: the power limit the GPUs run at (their default
    where it is below their top, ``PowerLimits.unset_w``)."""
    clocks = sorted(getattr(jv.perf, "clocks_mhz", None) or (), reverse=True)

    def fits(clock: int) -> bool:
        remaining_s, power_w = ctx.remaining_and_power(jv, n_gpus, batch, clock, limit_w)
        return n_gpus * power_w * min(ctx.round_length_s, remaining_s) <= energy_j

    if not clocks or not fits(clocks[-1]):
        return None
    return next(clock for clock in clocks if fits(clock))


def _record(gpu_model: str, n_gpus: int, now_s: float, frac: float) -> dict:
    rec = new_record(gpu_model=gpu_model, n_gpus=n_gpus, now_s=now_s, budget_frac=frac)
    rec.update(status=DONE, reason="power limits not explored by this policy")
    return rec
