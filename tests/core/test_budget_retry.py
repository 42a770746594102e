"""A step an allowance refused gets another try once a later step lowers that budget's
spending (``_Round.upgrade``).

A job's cost need not rise along the greedy's path to its target: a job whose draw per
GPU falls on more GPUs can cost less on more of them, and a team budget pays a restart's
idle draw on every GPU count but the running one. Measured on Philly: a vgg16 job rebuilt
from one GPU towards its 64 cost 445 kJ a round above idle on 32 GPUs, against 441 kJ at
its target (its draw per GPU above idle on 64 is half that on 32), so another job's last
step back to its own running count was refused by 4.5 kJ, and that job was resized back
and forth from round to round.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from scheduling.core.registry import get_policy
from scheduling.core.round import plan_round
from scheduling.core.types import Budget, GpuConfig
from tests.core.corekit import AnalyticModel, Catalog, job, make_cluster, running, snapshot


@dataclass(frozen=True)
class TableModel(AnalyticModel):
    """Iteration time and draw per GPU count from tables (max clock only)."""

    time_s: dict[int, float] = field(default_factory=dict)
    draw_w: dict[int, float] = field(default_factory=dict)
    clocks_mhz: tuple[int, ...] = (2000,)

    def iter_time_s(self, cfg: GpuConfig) -> float:
        return self.time_s[cfg.n_gpus] * cfg.global_batch / self.ref_batch

    def power_w(self, cfg: GpuConfig) -> float:
        return self.draw_w[cfg.n_gpus]


# "a": running on 4 GPUs, whose draw falls on 4 (200 W above idle on 1 or 2 GPUs, 45 W on
# 4): above idle it costs 1 x 200 W x 300 s = 60 kJ a round on 1 GPU, 120 kJ on 2 and
# 54 kJ on 4. It barely speeds up beyond 2 GPUs, so its last step ranks low.
SLOW = TableModel(
    "a",
    time_s={1: 1.0, 2: 0.5, 4: 0.499},
    draw_w={1: 250.0, 2: 250.0, 4: 95.0},
)
# "b": waiting, scaling as the square root of its GPUs, 200 W above idle on each: 60 kJ a
# round on 1 GPU, 120 kJ on 2, 240 kJ on 4.
ROOT = TableModel(
    "b",
    time_s={1: 1.0, 2: 1.0 / 2**0.5, 4: 0.5},
    draw_w={1: 250.0, 2: 250.0, 4: 250.0},
)


def _plan(team: str | None, rank: str = "per_gpu"):
    cluster = make_cluster(1, 1, 8)
    ids = tuple(g.gpu_id for g in cluster.gpus)
    jobs = [
        running(job("a", workload="a", n=1, max_gpus=4, iters=1e6), ids[:4]),
        job("b", workload="b", n=1, max_gpus=4, iters=1e5),
    ]
    budget = Budget("b0", team, 0.0, 1e6, energy_limit_j=1e12)
    snap = snapshot(cluster, jobs, catalog=Catalog(SLOW, ROOT), budgets=(budget,))
    policy = get_policy("powerflow", fixed_price=0.0, rank=rank)
    return plan_round(snap, policy=policy, now=0.0)


@pytest.mark.parametrize("team", [None, "t"])
def test_a_step_refused_by_an_allowance_is_tried_again_once_spending_falls(team):
    # Given both jobs' targets (price 0: the fastest points, "a" on 4 GPUs and "b" on 4).
    # A cluster budget's round allows 420 kJ: the 8 GPUs' idle floor (120 kJ) and, per
    # job, the more of its minimum and its target (60 and 240 kJ). On the way there "a"
    # passes 2 GPUs at 120 kJ: the round has then spent 360 kJ with "b" on 2 GPUs, and
    # "b"'s step to 4 (120 kJ more) does not fit. "a"'s last step lowers the spending to
    # 294 kJ, and "b"'s step then fits (414 kJ). A team budget pays the whole draw and,
    # while "a" is off its running count, its GPUs' idle draw for the 30 s restart:
    # "a" costs 76.5 kJ on 1 GPU, 153 kJ on 2 and 114 kJ on 4, "b" 75, 150 and 300 kJ;
    # the round allows 414 kJ, and the same refusal and retry follow.
    plan = _plan(team)
    assert plan.allocations["a"].n_gpus == 4
    assert plan.allocations["b"].n_gpus == 4


@pytest.mark.parametrize("team", [None, "t"])
@pytest.mark.parametrize("rank", ["per_gpu", "hesrpt"])
def test_the_retry_never_spends_past_the_allowance(rank, team):
    plan = _plan(team, rank)
    allowed = plan.energy_allowance_by_budget_j["b0"]
    assert plan.predicted_energy_by_budget_j["b0"] <= allowed * (1 + 1e-9)
