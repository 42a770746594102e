"""What a configuration costs in PowerFlow's greedy and price depends on who pays: a
cluster budget pays the powered idle GPUs anyway, so a job adds only its draw above idle;
a team budget is charged its jobs' GPUs' whole draw (as the live ledgers charge a team),
so for a team's job the idle draw is part of the cost. Counting only the draw above idle
for a team made many GPUs at a low clock look nearly free to the team's price: on the
first 300 Philly jobs with a budget per workload, one vgg16 job ran on 64 GPUs and spent
its team's period budget at three times its straight line, and PowerFlow averaged 0.35x
fifo's JCT at fifo's energy (docs/benchmarks.md, "Team budgets pay the idle draw")."""

from __future__ import annotations

import pytest

from scheduling.core.policies.budget_greedy import _Round
from scheduling.core.round import plan_round
from scheduling.core.types import Budget
from tests.core.corekit import AnalyticModel, Catalog, RoundSpy, job, make_cluster, snapshot

MODEL = AnalyticModel("w", idle_power_w=50.0, busy_power_w=300.0, scaling=0.7)


def _costs(budget: Budget) -> tuple[_Round, list]:
    spy = RoundSpy()
    snap = snapshot(
        make_cluster(1, 1, 8),
        [job("a", iters=1000.0, min_gpus=1, max_gpus=8)],
        Catalog(MODEL),
        budgets=(budget,),
    )
    plan_round(snap, policy=spy, now=0.0)
    return spy.rnd, spy.rnd.points(0)


@pytest.mark.parametrize(
    ("team", "idle_counted_w"), [("t", 50.0), (None, 0.0)], ids=["team budget", "cluster budget"]
)
def test_a_configuration_costs_what_the_budget_that_pays_for_it_is_charged(team, idle_counted_w):
    rnd, points = _costs(Budget("b", team, 0.0, 86_400.0, energy_limit_j=1e9))
    sizes, clocks, batches, _ = rnd.opts[0]
    for cost_j, _, (si, ci, bi) in points:
        est = rnd.ctx.estimate(rnd.jobs[0], sizes[si], batches[bi], clocks[ci])
        # the whole draw for a team, the draw above idle for the cluster
        expected = sizes[si] * (est.power_w - 50.0 + idle_counted_w) * est.remaining_s
        assert cost_j == pytest.approx(expected, rel=1e-9)


def test_for_a_team_a_low_clock_saves_what_the_whole_draw_saves_not_more():
    # One GPU at the lowest clock (1,000 of 2,000 MHz) draws 50 + 250 / 4 = 112.5 W for
    # 1.5x the time, against 300 W at the top. Above idle that is 62.5 W against 250 W:
    # the low clock seems to cost 0.375x the top's energy; a team pays the whole draw,
    # 0.5625x. The gap is what made many GPUs at the lowest clock look cheap to a team.
    _, team = _costs(Budget("b", "t", 0.0, 86_400.0, energy_limit_j=1e9))
    _, cluster = _costs(Budget("b", None, 0.0, 86_400.0, energy_limit_j=1e9))

    def cost(points, ci):
        return next(c for c, _, key in points if key[:2] == (0, ci))

    low, top = 0, 2
    assert cost(cluster, low) / cost(cluster, top) == pytest.approx(0.375)
    assert cost(team, low) / cost(team, top) == pytest.approx(0.5625)
