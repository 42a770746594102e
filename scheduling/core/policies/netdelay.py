"""Network-sensitive delay scheduling (``netdelay``).

Sharma et al., "GPU Cluster Scheduling for Network-Sensitive Deep Learning", arXiv
2401.16492. Only the abstract is at hand; the rules are *reconstructed* from it and
``docs/papers.md``, with every constant a parameter.

- **Sensitivity.** ``sigma = T_spread / T_consolidated - 1`` from the perf model: the
  iteration time of the job's GPUs split over two nodes against all on as few nodes
  as possible, with the inter-node part scaled by the ``congestion`` the scheduler
  assumes (as the simulator does). Jobs that fit no single node have ``sigma = 0``:
  they cross nodes either way.
- **Delay scheduling.** Jobs are served in submit order (a higher ``Job.priority``
  first), running jobs keep their GPUs.
  A job whose consolidated placement is free takes it. Otherwise it waits (reason
  ``DELAYED_FOR_LOCALITY``) until its timer, ``min(max_delay_s,
  delay_per_sensitivity_s * sigma)`` seconds after it started waiting, has run out,
  and then accepts a spread placement. Later jobs may go first meanwhile.
- **Network-sensitive preemption.** Once its timer has run out, instead of accepting
  a spread placement (or waiting on), a job with ``sigma >= preempt_min_sensitivity``
  (and that was never preempted itself: no cascades; ``policy_state["victims"]``)
  may free a node by stopping less sensitive single-node jobs there that have run at
  least ``min_victim_run_s`` since their last change (so that no job is bounced every
  round), when its gain (GPU-seconds saved by running consolidated, ``n * (T_spread -
  T_cons)`` over its remaining work) exceeds ``preempt_gain_factor`` times the
  victims' cost (``sum n_v * (restart_s + wait_v)``: a checkpoint-restart and the
  wait until enough GPUs free up for the victim again, at least a round, predicted
  from the remaining times of the jobs that keep running).
- **Auto-tuning.** With ``tune_every_s`` set, the policy remembers the recent arrivals
  in ``policy_state`` and, at most that often, replays the present (active jobs with
  their remaining work) followed by those arrivals in the simulator for each candidate
  ``delay_per_sensitivity_s`` (``scheduling/core/netdelay_tuner.py``) and keeps the one
  with the lowest average JCT. The replay is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from scheduling.core.context import JobView, RoundContext
from scheduling.core.netdelay_tuner import replay_jobs, tune_delay
from scheduling.core.placement import FreeGpus, pick_packed, pick_spread
from scheduling.core.policies.base import (
    behind_in_queue,
    by_priority,
    expected_free_at,
    serve_queue,
    submit_order,
    waiting_since_s,
)
from scheduling.core.registry import register_policy
from scheduling.core.types import GpuConfig, Grant, PolicyDecision, WaitCode, WaitReason


def spread_shape(n: int) -> tuple[int, ...]:
    """The spread alternative: ``n`` GPUs split over two nodes."""
    return (n - n // 2, n // 2) if n > 1 else (1,)


@register_policy("netdelay")
class NetDelay:
    name = "netdelay"
    placement = None  # every grant names its GPUs (packed, else spread)

    def __init__(
        self,
        *,
        delay_per_sensitivity_s: float = 6000.0,
        max_delay_s: float = 4 * 3600.0,
        congestion: float = 1.0,
        preempt: bool = True,
        preempt_min_sensitivity: float = 0.2,
        restart_s: float = 30.0,
        min_victim_run_s: float = 3600.0,
        preempt_gain_factor: float = 2.0,
        tune_every_s: float | None = None,
        tune_candidates_s: Sequence[float] = (0.0, 1500.0, 3000.0, 6000.0, 12_000.0, 24_000.0),
        tune_window_jobs: int = 40,
    ) -> None:
        if delay_per_sensitivity_s < 0 or max_delay_s < 0:
            raise ValueError("delays must not be negative")
        self.delay_per_sensitivity_s = delay_per_sensitivity_s
        self.max_delay_s = max_delay_s
        self.congestion = congestion
        self.preempt = preempt
        self.preempt_min_sensitivity = preempt_min_sensitivity
        self.restart_s = restart_s
        self.min_victim_run_s = min_victim_run_s
        self.preempt_gain_factor = preempt_gain_factor
        self.tune_every_s = tune_every_s
        self.tune_candidates_s = tuple(tune_candidates_s)
        self.tune_window_jobs = tune_window_jobs

    # --- sensitivity and timers -------------------------------------------------------

    def sensitivity(self, ctx: RoundContext, jv: JobView, n: int) -> float:
        node_size = ctx.node_gpus[jv.gpu_model]
        if n <= 1 or n > node_size:
            return 0.0
        b = jv.job.global_batch
        cons_s = jv.perf.iter_time_s(GpuConfig(n, b))
        spread_s = jv.perf.iter_time_s(GpuConfig(n, b, gpus_per_node=spread_shape(n)))
        if spread_s <= cons_s:
            return 0.0
        return self.congestion * (spread_s - cons_s) / cons_s

    def timer_s(self, sigma: float, per_sensitivity_s: float) -> float:
        return min(self.max_delay_s, per_sensitivity_s * sigma)

    # --- the round ---------------------------------------------------------------------

    def allocate(self, ctx: RoundContext) -> PolicyDecision:
        """Keep running jobs; serve the queue with delay timers and preemption."""
        state = dict(ctx.policy_state)
        per_sigma_s = float(state.get("delay_per_sensitivity_s", self.delay_per_sensitivity_s))
        arrivals = self._remember(ctx, state.get("arrivals", []))
        tuned_at = state.get("tuned_at_s")
        if self.tune_every_s is not None and (
            tuned_at is None or ctx.now_s - float(tuned_at) >= self.tune_every_s
        ):
            active = [replace(jv.job, gpu_model=jv.gpu_model) for jv in ctx.jobs]
            jobs = replay_jobs(active, arrivals, round_length_s=ctx.round_length_s)
            if len(jobs) >= 2:
                per_sigma_s = tune_delay(
                    jobs,
                    cluster=ctx.snapshot.cluster,
                    catalog=ctx.snapshot.perf,
                    candidates_s=self.tune_candidates_s,
                    congestion=self.congestion,
                    round_length_s=ctx.round_length_s,
                    policy_params=self._params(),
                ).best_s
                tuned_at = ctx.now_s

        free = FreeGpus(ctx.free_cluster)
        queue = submit_order(ctx.jobs)
        kept: dict[str, tuple[str, ...]] = {}
        pending = []
        for jv in queue:
            cur = jv.job.allocation.gpu_ids if jv.job.allocation else ()
            if cur and free.valid(cur, jv.gpu_model):
                kept[jv.job.job_id] = free.take(cur)
            else:
                pending.append(jv)
        views = {jv.job.job_id: jv for jv in queue}
        preempted: dict[str, str] = {}
        # Jobs netdelay preempted never preempt others in turn: that cascades.
        victims_before = {j for j in state.get("victims", []) if j in views}

        def start(pos: int, jv: JobView, n: int) -> WaitReason | None:
            job = jv.job
            picks = pick_packed(free, jv.gpu_model, n)
            if picks is not None:
                kept[job.job_id] = free.take(picks)
                return None
            sigma = self.sensitivity(ctx, jv, n)
            timer = self.timer_s(sigma, per_sigma_s)
            due_s = waiting_since_s(job) + timer
            may_preempt = job.job_id not in victims_before and ctx.now_s >= due_s
            if self.preempt and may_preempt and sigma >= self.preempt_min_sensitivity:
                victims = self._victims(ctx, jv, n, sigma, free, kept, views)
                if victims is not None:
                    for v in victims:
                        free.give(kept.pop(v))
                        preempted[v] = job.job_id
                    kept[job.job_id] = free.take(pick_packed(free, jv.gpu_model, n))
                    return None
            spread = pick_spread(free, jv.gpu_model, n)
            if spread is not None and ctx.now_s >= due_s:
                kept[job.job_id] = free.take(spread)
                return None
            if spread is not None:
                return WaitReason(
                    WaitCode.DELAYED_FOR_LOCALITY,
                    f"Waiting: {n} GPUs are free but not on one node; its network "
                    f"sensitivity is {sigma:.0%}, so it waits up to {timer:.0f} s for a "
                    "consolidated placement before it accepts a spread one.",
                    until_s=due_s,
                )
            return behind_in_queue(pos, n, jv.gpu_model, free.count(jv.gpu_model))

        waiting = serve_queue(ctx, by_priority(pending), start)
        for v in preempted:
            waiting[v] = WaitReason(
                WaitCode.PREEMPTED,
                "Waiting: preempted so that a more network-sensitive job can run on one "
                "node; it resumes when GPUs free up.",
            )
        grants = tuple(
            Grant(jid, len(ids), views[jid].job.global_batch, views[jid].gpu_model, gpu_ids=ids)
            for jid, ids in kept.items()
        )
        new_state = {
            "delay_per_sensitivity_s": per_sigma_s,
            "arrivals": arrivals,
            "victims": sorted(victims_before | set(preempted)),
        }
        if tuned_at is not None:
            new_state["tuned_at_s"] = tuned_at
        return PolicyDecision(grants=grants, waiting=waiting, policy_state=new_state)

    def _victims(self, ctx, jv, n, sigma, free, kept, views) -> list[str] | None:
        """Less sensitive single-node jobs whose GPUs, with the free ones, make a node
        for ``jv``; the cheapest node whose cost the gain outweighs, or None."""
        # Kept jobs with their remaining time: when the victims could run again.
        others = [
            (views[j], len(ids), ctx.estimate(views[j], len(ids)).remaining_s)
            for j, ids in kept.items()
        ]
        b = jv.job.global_batch
        remaining = jv.job.remaining_iters
        cons_s = jv.perf.iter_time_s(GpuConfig(n, b)) * remaining
        spread_s = cons_s * (1.0 + sigma)
        gain = n * (spread_s - cons_s)
        by_node: dict[str, list[str]] = {}
        for jid, ids in kept.items():
            nodes = {free.node_of(g) for g in ids}
            # Only jobs already running are preempted, not ones granted this round.
            v = views[jid].job
            settled = v.last_change_s is None or ctx.now_s - v.last_change_s >= (
                self.min_victim_run_s
            )
            same_model = views[jid].gpu_model == jv.gpu_model
            if v.is_running and settled and len(nodes) == 1 and same_model:
                by_node.setdefault(nodes.pop(), []).append(jid)
        best = None
        # Nodes by name (a node is a virtual node of ``FreeGpus``: one GPU model).
        for node, jids in sorted(by_node.items(), key=lambda t: (free.name[t[0]], t[0])):
            room = free.free_count[node]
            if len(free.gpu_ids[node]) < n:
                continue
            chosen, cost = [], 0.0
            for v in sorted(jids, key=lambda v: (len(kept[v]), v)):
                if room >= n:
                    break
                vv = views[v]
                if self.sensitivity(ctx, vv, len(kept[v])) >= sigma:
                    continue
                # It waits until GPUs free up again (at least a round) and restarts.
                back = expected_free_at(ctx, others, vv, len(kept[v]))
                wait_s = max(ctx.round_length_s, (back or math.inf) - ctx.now_s)
                cost += len(kept[v]) * (self.restart_s + wait_s)
                chosen.append(v)
                room += len(kept[v])
            worth = gain > self.preempt_gain_factor * cost
            if room >= n and chosen and worth and (best is None or cost < best[0]):
                best = (cost, chosen)
        return None if best is None else best[1]

    def _remember(self, ctx: RoundContext, arrivals: list) -> list:
        """The last ``tune_window_jobs`` arrivals as JSON rows, for the auto-tuner."""
        if self.tune_every_s is None:
            return list(arrivals)
        seen = {row[0] for row in arrivals}
        rows = list(arrivals)
        for jv in ctx.jobs:
            j = jv.job
            if j.job_id not in seen:
                rows.append(
                    [j.job_id, j.workload, j.submit_time_s, j.total_iters, j.global_batch,
                     j.requested_gpus, jv.gpu_model]
                )  # fmt: skip
        rows.sort(key=lambda r: (r[2], r[0]))
        return rows[-self.tune_window_jobs :]

    def _params(self) -> dict:
        return {
            "max_delay_s": self.max_delay_s if math.isfinite(self.max_delay_s) else 1e12,
            "congestion": self.congestion,
            "preempt": self.preempt,
            "preempt_min_sensitivity": self.preempt_min_sensitivity,
            "restart_s": self.restart_s,
            "min_victim_run_s": self.min_victim_run_s,
            "preempt_gain_factor": self.preempt_gain_factor,
        }
