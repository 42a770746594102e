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
from scheduling import adapters, services

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


@pytest.mark.parametrize("policy", ["fifo_lowclock", "powerflow", "zeus", "greenflow"])
def test_a_round_plans_only_a_clock_the_gpus_list(
    scheduler_settings, make_node, make_job, member, team, policy
):
    # given A100s that list three lockable clocks, none of them the catalog A100's 975 MHz
    # (fifo_lowclock's 0.7 of 1410 MHz; a seventh probe saw 2,000 MHz planned on a GPU
    # listing [2500, 1500, 1]: NVML locks a range and the GPU ran at a step of its own)
    node = make_node("node-01", gpus=4)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0)
    Gpu.objects.filter(node=node).update(
        max_sm_clock_mhz=1410, supported_sm_clocks_mhz=[1410, 1200, 810]
    )
    scheduler_settings(policy, round_interval_s=1)
    job = _job(make_job, member, team)

    # when rounds start it and plan it again
    services.run_scheduling_round(now=T0)
    services.run_scheduling_round(now=T0 + timedelta(seconds=30))

    # then every allocation it had names a clock its GPUs list (or none)
    clocks = set(JobAllocation.objects.filter(job=job).values_list("sm_clock_mhz", flat=True))
    assert clocks, "the job was never started"
    assert clocks <= {None, 1410, 1200, 810}


@pytest.mark.parametrize(
    ("lists", "planned", "taken"),
    [
        ([[1410, 1200, 810]], 975, 810),  # the highest listed step at or below the plan
        ([[1410, 1200, 810]], 700, 810),  # below every step: the lowest
        ([[2500, 1500, 1]], 2000, 1500),
        ([[1410, 1200, 810], [1410, 810]], 1300, 810),  # a step every GPU lists
        ([[1410, 1200, 810], []], 1300, 1200),  # a GPU that lists none adds no bound
        ([[]], 975, 975),  # nothing listed: the plan's clock (capped by the agent)
    ],
)
def test_the_clock_taken_is_a_step_every_gpu_lists(lists, planned, taken):
    gpus = [
        Gpu(max_sm_clock_mhz=None, supported_sm_clocks_mhz=clocks, min_power_limit_w=100,
            max_power_limit_w=400)
        for clocks in lists
    ]  # fmt: skip
    assert adapters.settings_the_gpus_take(gpus, sm_clock_mhz=planned, power_limit_w=None) == (
        taken,
        None,
    )


@pytest.mark.parametrize(
    ("top", "listed"),
    [(1410, [1410, 1200, 810]), (600, [])],
    ids=["three-steps", "600-MHz-top-none-listed"],
)
@pytest.mark.parametrize("policy", ["fifo_lowclock", "powerflow", "greenflow"])
def test_a_round_plans_and_predicts_at_the_clock_its_allocation_records(
    scheduler_settings, make_node, make_job, member, team, monkeypatch, policy, top, listed
):
    # given A100s that take other clocks than the catalog A100's (three steps, none of
    # them fifo_lowclock's 975 MHz; or a 600 MHz top and no steps listed), and a queued job
    node = make_node("node-01", gpus=4)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0)
    Gpu.objects.filter(node=node).update(max_sm_clock_mhz=top, supported_sm_clocks_mhz=listed)
    scheduler_settings(policy, round_interval_s=1)
    job = _job(make_job, member, team)
    plans = []
    plan_round = services.plan_round

    def planned(snapshot, **kwargs):
        plans.append(plan_round(snapshot, **kwargs))
        return plans[-1]

    monkeypatch.setattr(services, "plan_round", planned)

    # when a round starts it
    services.run_scheduling_round(now=T0)

    # then the plan's clock, at which the core predicted the job's time and energy (and
    # what the round and each budget will spend), is the clock its allocation records:
    # the plan was at the model's clock (975 MHz) while the GPUs took a step of their own
    # (810 MHz), so the budget paid for a run the GPUs never made
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    (plan,) = plans
    assert plan.allocations[str(job.pk)].sm_clock_mhz == job.current_allocation.sm_clock_mhz


@pytest.mark.parametrize(("low", "high"), [(150, 250), (500, 600)], ids=["250-W-top", "500-600-W"])
@pytest.mark.parametrize("policy", ["zeus", "powerflow", "greenflow"])
def test_a_round_plans_and_predicts_at_the_power_limit_its_allocation_records(
    scheduler_settings, make_node, make_job, member, team, monkeypatch, policy, low, high
):
    # given A100s that registered another power-limit range than the catalog A100's
    # 100-400 W (a 250 W top, as a PCIe A100's; or 500-600 W), and a queued job
    node = make_node("node-01", gpus=4)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0)
    Gpu.objects.filter(node=node).update(
        min_power_limit_w=low, default_power_limit_w=high, max_power_limit_w=high
    )
    scheduler_settings(policy, round_interval_s=1)
    job = _job(make_job, member, team)
    plans = []
    plan_round = services.plan_round

    def planned(snapshot, **kwargs):
        plans.append(plan_round(snapshot, **kwargs))
        return plans[-1]

    monkeypatch.setattr(services, "plan_round", planned)

    # when a round starts it
    services.run_scheduling_round(now=T0)

    # then the plan's limit, at which the core predicted the job's time and energy (and
    # what the round and each budget will spend), is the limit its allocation records:
    # zeus planned 400 W (the catalog's range) on GPUs that took 250 W or 500 W
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    (plan,) = plans
    limit = plan.allocations[str(job.pk)].power_limit_w
    assert limit == job.current_allocation.power_limit_w
    assert limit is None or low <= limit <= high


@pytest.mark.parametrize(
    "default_w", [200, 250], ids=["default-below-their-top", "their-top-below-the-catalogs"]
)
@pytest.mark.parametrize("policy", ["fifo", "powerflow", "greenflow"])
def test_a_plan_without_a_limit_records_the_default_limit_the_gpus_run_at(
    scheduler_settings, make_node, make_job, member, team, monkeypatch, policy, default_w
):
    # given A100s that registered a 200 W default below their 250 W top (the agent leaves
    # a GPU told no limit at its own, the default), or their 250 W top as the default (a
    # PCIe A100's, below the catalog A100's 400 W), a policy that plans no limit, and a
    # queued job
    node = make_node("node-01", gpus=4)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0)
    Gpu.objects.filter(node=node).update(
        min_power_limit_w=150, default_power_limit_w=default_w, max_power_limit_w=250
    )
    scheduler_settings(policy, round_interval_s=1)
    job = _job(make_job, member, team)
    plans = []
    plan_round = services.plan_round

    def planned(snapshot, **kwargs):
        plans.append(plan_round(snapshot, **kwargs))
        return plans[-1]

    monkeypatch.setattr(services, "plan_round", planned)

    # when a round starts it, and the next plans it again
    services.run_scheduling_round(now=T0)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    alloc = job.current_allocation
    services.run_scheduling_round(now=T0 + timedelta(seconds=30))

    # then the plan, which predicted the job's time and energy (and the round's and its
    # budgets' spend) at its limit, and the allocation say the limit the GPUs run at: the
    # plan said none, predicted at the catalog's unthrottled 400 W, while they ran at
    # 200 W (or 250 W)
    assert plans[0].allocations[str(job.pk)].power_limit_w == default_w
    assert alloc.power_limit_w == default_w
    # and the next round keeps it (no retune)
    assert Job.objects.get(pk=job.pk).current_allocation_id == alloc.pk


@pytest.mark.parametrize(
    ("defaults", "default_w"),
    [([200, 200], 200.0), ([250, 250], 250.0), ([200, 250], None)],
    ids=["below-top", "at-top", "differ"],
)
def test_the_default_limit_of_a_gpu_model_is_the_one_all_its_gpus_registered(defaults, default_w):
    gpus = [
        Gpu(model="A100", min_power_limit_w=150, default_power_limit_w=d, max_power_limit_w=250)
        for d in defaults
    ]
    (limits,) = adapters.power_limits_by_model(gpus).values()
    assert (limits.low_w, limits.high_w, limits.default_w) == (150, 250, default_w)


# A site's own cap (``nvidia-smi -pl``), which the agent reads at its start and registers
# (``Gpu.site_power_limit_w``), is the GPUs' top for planning and prediction, and the limit
# they run at when told none. Before, the server did not know it: a job told the registered
# default (or a limit above the cap) had the cap replaced while it ran, and was predicted
# at a limit the site did not allow.


@pytest.mark.parametrize(
    ("caps", "expected"),
    [
        ([300, 300], (100, 300, 300.0)),  # a cap below the 400 W default and top
        ([400, 400], (100, 400, 400.0)),  # no cap: the enforced limit is the top
        ([None, None], (100, 400, 350.0)),  # older agents: as registered
        ([300, None], (100, 300, None)),  # one capped: each runs at its own when told none
    ],
    ids=["capped", "at-top", "not-reported", "one-capped"],
)
def test_a_sites_cap_is_the_gpus_top_and_the_limit_they_run_at_unset(caps, expected):
    gpus = [
        Gpu(
            model="A100",
            min_power_limit_w=100,
            default_power_limit_w=350,
            max_power_limit_w=400,
            site_power_limit_w=cap,
        )  # fmt: skip
        for cap in caps
    ]
    (limits,) = adapters.power_limits_by_model(gpus).values()
    assert (limits.low_w, limits.high_w, limits.default_w) == expected
    # and no limit above the cap is recorded
    taken = adapters.settings_the_gpus_take(gpus, sm_clock_mhz=None, power_limit_w=390)[1]
    assert taken == min(390, expected[1])


@pytest.mark.parametrize("policy", ["fifo", "zeus", "powerflow"])
def test_a_round_plans_and_predicts_under_a_sites_cap(
    scheduler_settings, make_node, make_job, member, team, monkeypatch, policy
):
    # given A100s (100-400 W, 400 W default) a site capped at 250 W, as their agent
    # registered, and a queued job
    node = make_node("node-01", gpus=4)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0)
    Gpu.objects.filter(node=node).update(site_power_limit_w=250)
    scheduler_settings(policy, round_interval_s=1)
    job = _job(make_job, member, team)
    plans = []
    plan_round = services.plan_round

    def planned(snapshot, **kwargs):
        plans.append(plan_round(snapshot, **kwargs))
        return plans[-1]

    monkeypatch.setattr(services, "plan_round", planned)

    # when a round starts it
    services.run_scheduling_round(now=T0)

    # then the job is planned, recorded and predicted at no more than the cap: fifo and
    # powerflow (no limit of their own) at the 250 W the GPUs run at, not unthrottled at
    # 400 W; zeus within 100-250 W (it planned up to 400 W, which the agent now refuses)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    limit = plans[0].allocations[str(job.pk)].power_limit_w
    assert limit == job.current_allocation.power_limit_w
    assert limit is not None and 100 <= limit <= 250
    if policy != "zeus":
        assert limit == 250


# GPUs of one model whose own top clocks differ (a node whose A100s registered a 1200 MHz
# top beside A100s at the catalog's 1410 MHz): told no clock, each runs up to its own top,
# so there is no one top a plan without a clock runs at. Recording the lowest one locked
# every GPU of the model at it: a job on the 1410 MHz GPUs, which ran free before, was
# locked at 1200 MHz (15% below what they do) because another node tops out there.


def _a100(top_mhz):
    return Gpu(model="A100", max_sm_clock_mhz=top_mhz, supported_sm_clocks_mhz=[1410, 1200, 810])


@pytest.mark.parametrize(
    ("tops", "unset"),
    [
        ([1200, 1200], 1200),  # all at one top below the catalog's: recorded at it
        ([1200, 1410], None),  # tops that differ: each its own, as the agent leaves them
        ([1410, 1410], None),  # at the catalog's top: none, as before
    ],
    ids=["one-low-top", "tops-differ", "catalog-top"],
)
def test_a_plan_without_a_clock_records_one_only_where_the_gpus_share_their_top(tops, unset):
    gpus = [_a100(t) for t in tops]
    (steps,) = adapters.clock_steps_by_model(gpus).values()
    assert steps.unset_for(1410) == unset
    # and what the GPUs at the catalog's top are told for it is no lock at all
    if 1410 in tops:
        fast = [g for g in gpus if g.max_sm_clock_mhz == 1410]
        assert adapters.settings_the_gpus_take(fast, sm_clock_mhz=unset, power_limit_w=None) == (
            None,
            None,
        )


def test_a_round_leaves_the_clock_free_where_the_models_gpus_top_out_apart(
    scheduler_settings, make_node, make_job, member, team
):
    # given A100s at the catalog's 1410 MHz top, and another node of A100s topping at
    # 1200 MHz, and fifo (no clock of its own) with a queued 2-GPU job
    fast, slow = make_node("node-01", gpus=4), make_node("node-02", gpus=4)
    Node.objects.filter(pk__in=[fast.pk, slow.pk]).update(last_heartbeat_at=T0)
    Gpu.objects.filter(node=fast).update(max_sm_clock_mhz=1410)
    Gpu.objects.filter(node=slow).update(max_sm_clock_mhz=1200)
    scheduler_settings("fifo", round_interval_s=1)
    job = _job(make_job, member, team)

    # when a round starts it
    services.run_scheduling_round(now=T0)

    # then a job placed on the 1410 MHz GPUs is not locked at the other node's 1200 MHz
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    alloc = job.current_allocation
    tops = {g.max_sm_clock_mhz for g in alloc.gpus.all()}
    assert alloc.sm_clock_mhz is None or alloc.sm_clock_mhz >= min(tops)
