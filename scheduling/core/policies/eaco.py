"""EaCO: energy-aware co-location of training jobs by GPU time-slicing.

Haghshenas and Hashemi, arXiv 2412.08294 (only the abstract is at hand; the rules below
are *reconstructed* from it; ``docs/papers.md``). The queue is FIFO like the exclusive
``fifo`` baseline (running jobs keep their GPUs, strict order), but a job may share the
GPUs of a running job of the same size, at most ``max_jobs_per_gpu`` jobs per GPU:

1. **Prediction.** The slowdown of each co-runner comes from the pair's history (mean of
   what was observed, learned in ``policy_state["history"]``) or else from Gavel's
   measured pairs (``scheduling/core/colocation.py``, which documents the mapping of
   workloads to Gavel's job types). A pair neither measured nor observed is never
   co-located.
2. **Tolerance.** Both jobs' predicted slowdowns must stay within their
   ``Job.slowdown_tolerance`` (default 10%).
3. **Energy.** Dynamic energy per unit of work is the same shared or not (the shared
   power model), so co-location saves the idle draw of the GPUs it leaves unused:
   with throughput ratios ``x = 1 / (1 + s)`` it saves ``n * P_idle * D * (x_h + x_g - 1)``
   joules, ``D`` the time the pair runs together. It co-locates only when that is
   positive *and* the GPUs it saves are worth saving: the job would otherwise wait
   (no free GPUs, or blocked in the queue), or idle nodes are powered off. With free
   GPUs on powered nodes, exclusive placement costs no more energy and is faster.
4. **Early observation.** A running pair whose observed slowdown (``Job.
   observed_slowdown``, filled by the simulator or by telemetry) exceeds a co-runner's
   tolerance is separated: the later-started job moves to free GPUs or waits, and the
   history learns the observation so the pair is not predicted to fit again.

Limits: EaCO forms pairs only. A ``max_jobs_per_gpu`` above 2 is accepted (the core
checks plans against it) but no third job joins a pair; Gavel measured pairs only and
the simulator models pairs only. A guest shares a host of the same GPU count, on all
of the host's GPUs.
"""

from __future__ import annotations

from dataclasses import replace

from scheduling.core.colocation import (
    ColocationModel,
    learn,
    load_colocation,
    recall,
    slowdown_of,
)
from scheduling.core.context import JobView, RoundContext
from scheduling.core.placement import FreeGpus, pick_packed, pick_spread
from scheduling.core.policies.base import (
    behind_in_queue,
    by_priority,
    per_gpu_batch,
    serve_queue,
    submit_order,
)
from scheduling.core.registry import register_policy
from scheduling.core.types import Grant, PolicyDecision, WaitCode, WaitReason


@register_policy("eaco")
class Eaco:
    name = "eaco"
    placement = None  # every grant names its GPUs (packed, else spread)

    def __init__(
        self,
        *,
        max_jobs_per_gpu: int = 2,
        colocation: ColocationModel | None = None,
        backfill: bool = False,
    ) -> None:
        if max_jobs_per_gpu < 1:
            raise ValueError("max_jobs_per_gpu must be at least 1")
        self.max_jobs_per_gpu = max_jobs_per_gpu
        self.colocation = colocation or load_colocation()
        self.backfill = backfill

    # --- prediction ----------------------------------------------------------------

    def type_of(self, jv: JobView) -> str:
        """Gavel job type of a job, or ``workload@per-GPU batch`` for history only."""
        b = per_gpu_batch(jv.job)
        return self.colocation.job_type(jv.job.workload, b) or f"{jv.job.workload}@{b:g}"

    def predict(
        self, history: dict[str, list[float]], a: JobView, b: JobView, n: int
    ) -> tuple[float, float] | None:
        """Predicted (s_a, s_b) slowdowns if ``a`` and ``b`` share ``n`` GPUs each."""
        ta, tb = self.type_of(a), self.type_of(b)
        seen = recall(history, ta, tb)
        if seen is not None:
            return seen
        x = self.colocation.ratio(ta, tb, n)
        if x is None:
            return None
        return slowdown_of(x[0]), slowdown_of(x[1])

    def saving_j(self, ctx: RoundContext, host: JobView, guest: JobView, n: int, s) -> float:
        """Idle energy co-location saves (see the module docstring, rule 3)."""
        x_h, x_g = 1.0 / (1.0 + s[0]), 1.0 / (1.0 + s[1])
        t_h = ctx.estimate(host, n).remaining_s
        t_g = ctx.estimate(guest, n).remaining_s
        together_s = min(t_h / x_h, t_g / x_g)
        return n * ctx.idle_power_w(host.gpu_model) * together_s * (x_h + x_g - 1.0)

    # --- the round ---------------------------------------------------------------------

    def allocate(self, ctx: RoundContext) -> PolicyDecision:
        """Keep running jobs, separate pairs observed over tolerance, then serve the
        queue in submit order (a higher ``Job.priority`` first), exclusively or by
        co-locating (module docstring)."""
        history: dict[str, list[float]] = {
            k: list(v) for k, v in ctx.policy_state.get("history", {}).items()
        }
        free = FreeGpus(ctx.free_cluster)
        views = {jv.job.job_id: jv for jv in ctx.jobs}
        queue = submit_order(ctx.jobs)
        running = [jv for jv in queue if jv.job.is_running]
        waiting_jobs = by_priority(jv for jv in queue if not jv.job.is_running)

        ids: dict[str, tuple[str, ...]] = {}  # job -> GPUs, in grant order
        slow: dict[str, float] = {}
        partner: dict[str, str] = {}
        holders: dict[tuple[str, ...], list[str]] = {}
        for jv in running:
            holders.setdefault(tuple(sorted(jv.job.allocation.gpu_ids)), []).append(jv.job.job_id)
        separated: dict[str, str] = {}
        for group in holders.values():
            if len(group) < 2:
                continue
            members = sorted(
                (views[j] for j in group),
                key=lambda jv: (jv.job.started_s or 0.0, jv.job.job_id),
            )
            host, guest = members[0], members[1]
            obs = (host.job.observed_slowdown, guest.job.observed_slowdown)
            if obs[0] is not None and obs[1] is not None:
                history = learn(history, self.type_of(host), obs[0], self.type_of(guest), obs[1])
                if obs[0] > host.job.slowdown_tolerance or obs[1] > guest.job.slowdown_tolerance:
                    for extra in members[1:]:
                        separated[extra.job.job_id] = (
                            f"observed slowdowns {obs[0]:.0%} / {obs[1]:.0%} exceed the tolerance"
                        )

        # Running jobs keep their GPUs (a pair that is not separated stays paired).
        for jv in running:
            job = jv.job
            cur = job.allocation.gpu_ids
            if job.job_id in separated:
                continue
            mates = [
                j for j in holders[tuple(sorted(cur))] if j != job.job_id and j not in separated
            ]
            if mates and mates[0] in ids:
                ids[job.job_id] = ids[mates[0]]
                partner[job.job_id] = mates[0]
                partner[mates[0]] = job.job_id
                continue
            if free.valid(cur, jv.gpu_model):
                ids[job.job_id] = free.take(cur)
            else:  # its node was drained: it needs GPUs like a waiting job
                waiting_jobs.insert(0, jv)
        for jid in separated:
            waiting_jobs.insert(0, views[jid])

        blocked = False
        index = _HostIndex(self, ids, partner, views)

        def start(pos: int, jv: JobView, n: int) -> WaitReason | None:
            nonlocal blocked
            job = jv.job
            fits = free.count(jv.gpu_model) >= n and (not blocked or self.backfill)
            worth = not fits or ctx.snapshot.power_off_idle_nodes
            host = (
                self._best_host(ctx, history, jv, n, ids, partner, views, index) if worth else None
            )
            if host is not None:
                hid, s = host
                ids[job.job_id] = ids[hid]
                partner[job.job_id], partner[hid] = hid, job.job_id
                slow[hid], slow[job.job_id] = s
                index.remove(hid, n)
                return None
            if fits:
                picks = pick_packed(free, jv.gpu_model, n) or pick_spread(free, jv.gpu_model, n)
                ids[job.job_id] = free.take(picks)
                index.add(job.job_id, n)
                return None
            blocked = True
            if job.job_id in separated:
                return WaitReason(
                    WaitCode.PREEMPTED,
                    "Waiting: separated from the job it shared GPUs with "
                    f"({separated[job.job_id]}); no {n} free {jv.gpu_model} GPU(s) to run alone.",
                )
            return behind_in_queue(pos, n, jv.gpu_model, free.count(jv.gpu_model))

        waiting = serve_queue(ctx, waiting_jobs, start)
        grants = tuple(
            Grant(
                jid,
                len(gpus),
                views[jid].job.global_batch,
                views[jid].gpu_model,
                gpu_ids=gpus,
                slowdown=slow.get(jid, 0.0),
            )
            for jid, gpus in ids.items()
        )
        # Running pairs keep their predicted slowdowns in the energy forecast.
        grants = tuple(self._with_pair_slowdown(g, partner, views, history) for g in grants)
        return PolicyDecision(grants=grants, waiting=waiting, policy_state={"history": history})

    def _best_host(self, ctx, history, jv, n, ids, partner, views, index=None):
        """The running or granted job of the same size and GPU model whose pairing
        with ``jv`` keeps both within tolerance and saves the most energy (the first
        in grant order among equals).

        ``index`` (a :class:`_HostIndex` over ``ids``) finds the candidates without
        scanning every grant and predicts once per pair of job types: a long queue
        asks this for every job that does not fit."""
        if self.max_jobs_per_gpu < 2:
            return None
        if index is None:
            index = _HostIndex(self, ids, partner, views)
        best = None
        guest_type = self.type_of(jv)
        for host_type, hosts in index.hosts(jv.gpu_model, n).items():
            s = index.predict(history, host_type, guest_type, views[next(iter(hosts))], jv, n)
            if s is None or s[1] > jv.job.slowdown_tolerance:
                continue
            for hid, pos in hosts.items():
                host = views[hid]
                if s[0] > host.job.slowdown_tolerance:
                    continue
                saving = self.saving_j(ctx, host, jv, n, s)
                if saving > 0.0 and (best is None or (saving, -pos) > (best[0], -best[1])):
                    best = (saving, pos, hid, s)
        return None if best is None else (best[2], best[3])

    def _with_pair_slowdown(self, g: Grant, partner, views, history) -> Grant:
        if g.slowdown or g.job_id not in partner:
            return g
        s = self.predict(history, views[g.job_id], views[partner[g.job_id]], g.n_gpus)
        if s is None:
            return g
        return replace(g, slowdown=s[0])


class _HostIndex:
    """The unpaired grants of one round by (GPU model, GPU count) and job type, each with
    its position in grant order, and the pair predictions made so far (history does
    not change while the queue is served)."""

    def __init__(self, policy: Eaco, ids, partner, views) -> None:
        self._policy = policy
        self._by: dict[tuple[str, int], dict[str, dict[str, int]]] = {}
        self._pos: dict[str, int] = {}
        self._pred: dict[tuple[str, str, int], tuple[float, float] | None] = {}
        self._views = views
        for hid, gpus in ids.items():
            if hid not in partner:
                self.add(hid, len(gpus))

    def add(self, hid: str, n: int) -> None:
        jv = self._views[hid]
        pos = self._pos.setdefault(hid, len(self._pos))
        cell = self._by.setdefault((jv.gpu_model, n), {})
        cell.setdefault(self._policy.type_of(jv), {})[hid] = pos

    def remove(self, hid: str, n: int) -> None:
        jv = self._views[hid]
        cell = self._by.get((jv.gpu_model, n), {})
        hosts = cell.get(self._policy.type_of(jv), {})
        hosts.pop(hid, None)
        if not hosts:
            cell.pop(self._policy.type_of(jv), None)

    def hosts(self, model: str, n: int) -> dict[str, dict[str, int]]:
        return self._by.get((model, n), {})

    def predict(self, history, host_type, guest_type, host, guest, n):
        key = (host_type, guest_type, n)
        if key not in self._pred:
            self._pred[key] = self._policy.predict(history, host, guest, n)
        return self._pred[key]
