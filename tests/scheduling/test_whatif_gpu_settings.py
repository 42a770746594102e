"""The budget what-if plans what the live round plans on the cluster's GPUs: only the clocks
and power limits they take (``Snapshot.clock_steps``, ``Snapshot.power_limits``, read as
``adapters.build_snapshot`` reads them). It replayed the queue with every clock and limit of
the catalog's GPU model, so on A100s that take three clocks and a 250 W top its curve was
predicted at settings the GPUs never run at."""

from datetime import UTC, datetime, timedelta

import pytest

from cluster.models import Gpu, Node
from frontend.predictions import whatif_average_jct_s
from scheduling import adapters
from scheduling.core.types import ClockSteps, PowerLimits
from scheduling.simulator import whatif

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)
STEPS = (810, 1200, 1410)


@pytest.fixture
def narrow_node(make_node):
    """A live node of 4 A100s that take three clocks and 150-250 W."""
    node = make_node("node-01", gpus=4)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0)
    Gpu.objects.filter(node=node).update(
        max_sm_clock_mhz=1410,
        supported_sm_clocks_mhz=sorted(STEPS, reverse=True),
        min_power_limit_w=150,
        default_power_limit_w=250,
        max_power_limit_w=250,
    )
    return node


@pytest.mark.parametrize("default_w", [250, 200], ids=["default-at-top", "default-below-top"])
@pytest.mark.parametrize("kind", ["energy", "carbon"])
def test_the_budget_whatif_plans_the_settings_the_gpus_take(
    narrow_node, make_job, member, team, monkeypatch, kind, default_w
):
    # given a queued job on the narrow node (its A100s registered a 250 W default, or a
    # 200 W one, which they run at when told no limit), and the what-if's rounds recorded
    Gpu.objects.filter(node=narrow_node).update(default_power_limit_w=default_w)
    make_job(
        owner=member, team=team, min_gpus=2, max_gpus=2, global_batch_size=256,
        min_batch_size=256, max_batch_size=256, at=T0 - timedelta(minutes=5),
    )  # fmt: skip
    rounds = []
    core_planner = whatif.core_planner

    def recording(policy, **params):
        planner = core_planner(policy, **params)

        def planned(snapshot, now):
            rounds.append((snapshot, planner(snapshot, now)))
            return rounds[-1][1]

        return planned

    monkeypatch.setattr(whatif, "core_planner", recording)

    def replay(limit):
        return whatif_average_jct_s(
            team=team, kind=kind, limit=limit, period_end=T0 + timedelta(days=7), now=T0,
            used=0.0,
        )  # fmt: skip

    # when the what-if replays the queue under a budget it fits in, and one it does not
    # (powerflow and greenflow slow a job down to pace a tight budget)
    roomy = replay(1e6)
    assert roomy.n_finished == 1
    spent = roomy.energy_kwh if kind == "energy" else roomy.co2_kg
    replay(0.5 * spent)

    # then every round it planned had the settings the live round's snapshot has
    live = adapters.build_snapshot(now=T0, round_length_s=60.0).snapshot
    assert live.clock_steps == {"A100": ClockSteps(steps=STEPS, top_mhz=1410)}
    assert live.power_limits == {"A100": PowerLimits(150, 250, default_w=default_w)}
    assert rounds
    for snapshot, _ in rounds:
        assert snapshot.clock_steps == live.clock_steps
        assert snapshot.power_limits == live.power_limits
    # and planned only clocks and limits the GPUs take
    allocations = [a for _, plan in rounds for a in plan.allocations.values()]
    assert allocations
    assert {a.sm_clock_mhz for a in allocations} <= {None, *STEPS}
    assert all(a.power_limit_w is None or 150 <= a.power_limit_w <= 250 for a in allocations)
    # powerflow and greenflow plan no limit: the replay runs and predicts the job at the
    # default the GPUs run at when it is below their top, or at their top where that is
    # below the catalog A100's 400 W (it ran it unthrottled, at 400 W, in both)
    assert {a.power_limit_w for a in allocations} == {default_w}
