"""Auto-tuner for netdelay's timers: replay recent arrivals, keep the best timer.

The replay (``replay_jobs``) starts from the cluster's present: every active job
(running or queued) with the work it has left, in submit order at time zero, followed
by the recent arrivals' pattern as a forecast of what comes next (their submit times
rebased to start one round later, with their whole work). For each candidate
``delay_per_sensitivity_s`` that replay runs on the current cluster with the
``netdelay`` policy at that setting (tuning off, so it does not recurse), under the
congestion the scheduler assumes. The candidate with the lowest average JCT wins
(ties: shorter makespan, then the shorter timer). Both the simulator and the policy
are deterministic, so the choice is a pure function of its inputs.

What runs a replay is a :class:`Replay` callable passed in (``tune_delay(replay=...)``).
The core does not import the simulator, which builds on it: the simulator's replay
(``scheduling/simulator/netdelay_replay.py``) installs itself as the default with
:func:`install_replay` when the simulator is imported (the simulator package does so,
and so does the Django app for the live service).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from scheduling.core.types import Cluster, Job, PerfCatalog


class Replay(Protocol):
    """Runs ``jobs`` on ``cluster`` with the ``netdelay`` policy built from
    ``policy_params`` and returns (average JCT in seconds or None if no job finished,
    makespan in seconds)."""

    def __call__(
        self,
        jobs: Sequence[Job],
        *,
        cluster: Cluster,
        catalog: PerfCatalog,
        policy_params: Mapping[str, Any],
        congestion: float,
        round_length_s: float,
        restart_cost_s: float,
    ) -> tuple[float | None, float]: ...


_installed: list[Replay] = []


def install_replay(replay: Replay) -> None:
    """Make ``replay`` the one ``tune_delay`` uses when none is passed."""
    _installed[:] = [replay]


def installed_replay() -> Replay | None:
    return _installed[0] if _installed else None


@dataclass(frozen=True)
class TuneResult:
    best_s: float
    scores: Mapping[float, tuple[float, float]] = field(default_factory=dict)  # avg JCT, makespan


def arrivals_to_jobs(rows: Iterable[Sequence[Any]]) -> list[Job]:
    """Jobs from the JSON rows netdelay keeps: [id, workload, submit_s, total_iters,
    global_batch, requested_gpus, gpu_model]; submit times rebased to the first."""
    rows = list(rows)
    if not rows:
        return []
    t0 = min(float(r[2]) for r in rows)
    return [
        Job(
            job_id=str(r[0]),
            workload=str(r[1]),
            team="replay",
            submit_time_s=float(r[2]) - t0,
            total_iters=float(r[3]),
            global_batch=int(r[4]),
            requested_gpus=int(r[5]),
            min_gpus=int(r[5]),
            max_gpus=int(r[5]),
            gpu_model=str(r[6]),
        )
        for r in rows
    ]


def replay_jobs(
    active: Sequence[Job], rows: Iterable[Sequence[Any]], *, round_length_s: float
) -> list[Job]:
    """The replay's jobs: ``active`` jobs with their remaining work first (a millisecond
    apart, in submit order), then the recent ``rows`` as future arrivals (ids prefixed
    ``next:``) from one round on. Replayed jobs start fresh: no allocation, no progress."""
    now_jobs = [
        Job(
            job_id=j.job_id,
            workload=j.workload,
            team="replay",
            submit_time_s=1e-3 * i,
            total_iters=max(j.remaining_iters, 1.0),
            global_batch=j.global_batch,
            requested_gpus=j.requested_gpus,
            min_gpus=j.min_gpus,
            max_gpus=j.max_gpus,
            gpu_model=j.gpu_model,
            per_gpu_batch=j.per_gpu_batch,
        )
        for i, j in enumerate(sorted(active, key=lambda j: (j.submit_time_s, j.job_id)))
    ]
    future = [
        replace(j, job_id=f"next:{j.job_id}", submit_time_s=j.submit_time_s + round_length_s)
        for j in arrivals_to_jobs(rows)
    ]
    return now_jobs + future


def tune_delay(
    jobs: Sequence[Job],
    *,
    cluster: Cluster,
    catalog: PerfCatalog,
    candidates_s: Sequence[float],
    congestion: float = 1.0,
    round_length_s: float = 300.0,
    restart_cost_s: float = 30.0,
    policy_params: Mapping[str, Any] | None = None,
    replay: Replay | None = None,
) -> TuneResult:
    """Pick ``delay_per_sensitivity_s`` among ``candidates_s`` by replaying ``jobs`` with
    ``replay`` (by default the installed one, see the module docstring)."""
    if not candidates_s:
        raise ValueError("no candidate timers to tune over")
    run = replay or installed_replay()
    if run is None:
        raise RuntimeError(
            "netdelay's auto-tuner has no replay: pass replay= or import "
            "scheduling.simulator, which installs the simulator's"
        )
    scores: dict[float, tuple[float, float]] = {}
    for k in sorted(set(float(c) for c in candidates_s)):
        params = dict(policy_params or {})
        params.update(delay_per_sensitivity_s=k, tune_every_s=None, congestion=congestion)
        avg, makespan = run(
            jobs,
            cluster=cluster,
            catalog=catalog,
            policy_params=params,
            congestion=congestion,
            round_length_s=round_length_s,
            restart_cost_s=restart_cost_s,
        )
        scores[k] = (float("inf") if avg is None else avg, makespan)
    best = min(scores, key=lambda k: (scores[k][0], scores[k][1], k))
    return TuneResult(best_s=best, scores=scores)
