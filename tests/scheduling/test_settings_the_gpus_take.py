"""An allocation records the SM clock and power limit its GPUs can take
(``adapters.allocation_changes``), as the agent applies them (``backends.capped_settings``:
a clock no higher than the GPU's maximum, a limit within its range).

Found by probing the live service: a node whose agent registered its A100s with a
600 MHz top clock (and another with 500-600 W limits) was planned at 975 and 1410 MHz
(fifo_lowclock, powerflow) and 225 W (zeus), the catalog's A100 settings. The agent held
each GPU to what it can do, and the allocation kept the planned values: the job's time
and draw were learned as the job's at 1410 MHz, or 225 W, where it ran at 600 MHz or
500 W, and folded into its workload's profile that way."""

from datetime import UTC, datetime, timedelta

import pytest

from cluster.choices import JobState
from cluster.models import Gpu, Job, JobAllocation, Node
from scheduling import services

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)


@pytest.fixture
def narrow_node(make_node):
    """A live node of 4 A100s that reported a 600 MHz top clock and 500-600 W limits."""
    node = make_node("node-01", gpus=4)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0)
    Gpu.objects.filter(node=node).update(
        max_sm_clock_mhz=600,
        supported_sm_clocks_mhz=[600, 500],
        min_power_limit_w=500,
        default_power_limit_w=600,
        max_power_limit_w=600,
    )
    return node


def _job(make_job, member, team):
    return make_job(
        owner=member, team=team, min_gpus=2, max_gpus=2, global_batch_size=256,
        min_batch_size=256, max_batch_size=256, at=T0 - timedelta(minutes=5),
    )  # fmt: skip


@pytest.mark.parametrize("policy", ["fifo_lowclock", "powerflow", "zeus"])
def test_a_round_records_the_settings_the_gpus_can_take(
    scheduler_settings, narrow_node, make_job, member, team, policy
):
    # given the narrow node, a policy that sets clocks or power limits, and a queued job
    scheduler_settings(policy, round_interval_s=1)
    job = _job(make_job, member, team)

    # when a round starts it, and the next round plans it again
    services.run_scheduling_round(now=T0)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    alloc = job.current_allocation
    services.run_scheduling_round(now=T0 + timedelta(seconds=30))

    # then its allocation says what the GPUs run at: no clock above 600 MHz, no limit
    # outside 500-600 W
    assert alloc.sm_clock_mhz is None or alloc.sm_clock_mhz <= 600
    assert alloc.power_limit_w is None or 500 <= alloc.power_limit_w <= 600
    # and a plan the GPUs cannot follow is not a retune every round
    assert Job.objects.get(pk=job.pk).current_allocation_id == alloc.pk
    assert JobAllocation.objects.filter(job=job).count() == 1
