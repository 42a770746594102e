"""EaCO's GPU sharing in the live service, against the real PostgreSQL: a pair shares a GPU
through a round, a third job is refused, telemetry's observed slowdown separates a bad pair,
and the shared GPU's energy is split between the two.

ResNet-18 on CIFAR-10 (``resnet50_cifar10``) at 64 per GPU is the pair Gavel measured without
interference, so EaCO co-locates it when no GPU is free. Time is passed in (``T0``).
"""

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from cluster import services as cluster_services
from cluster.choices import JobState
from cluster.models import Gpu, Job, JobAllocation, Node
from scheduling import adapters, services
from scheduling.core.colocation import load_colocation, pair_key
from scheduling.core.perf_models import FittedPerfModel
from scheduling.core.types import GpuConfig
from scheduling.models import (
    JobSchedulingState,
    RoundDecision,
    SchedulerSettings,
    WorkloadProfile,
)
from scheduling.workload_profiles import model_to_params
from telemetry.accounting import account_hour, job_totals
from telemetry.models import GpuSample
from telemetry.services import record_job_events

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)
WORKLOAD = "resnet50_cifar10"


@pytest.fixture
def eaco(scheduler_settings):
    return scheduler_settings("eaco")


@pytest.fixture
def one_gpu_node(make_node):
    node = make_node("node-01", gpus=1)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=T0 + timedelta(hours=1))
    return Gpu.objects.get(node=node)


def _cifar(make_job, member, team, name, submitted):
    return make_job(
        owner=member, team=team, name=name, workload=WORKLOAD, total_iterations=10**6,
        global_batch_size=64, min_batch_size=64, max_batch_size=64, per_gpu_batch_size=64,
        min_gpus=1, max_gpus=1, at=submitted,
    )  # fmt: skip


def _share(make_job, member, team):
    """host runs alone from T0; guest joins it on the same GPU at T0+60; third waits."""
    host = _cifar(make_job, member, team, "host", T0 - timedelta(minutes=5))
    first = services.run_scheduling_round(now=T0)
    assert (first.applied, first.failed) == (1, 0)
    guest = _cifar(make_job, member, team, "guest", T0 - timedelta(minutes=4))
    third = _cifar(make_job, member, team, "third", T0 - timedelta(minutes=3))
    second = services.run_scheduling_round(now=T0 + timedelta(seconds=60))
    for job in (host, guest, third):
        job.refresh_from_db()
    return host, guest, third, second


def test_two_jobs_share_a_gpu_through_an_eaco_round_and_a_third_waits(
    eaco, one_gpu_node, make_job, member, team
):
    # given a 1-GPU node running one job, and two more of a compatible type waiting
    # when the next EaCO round runs
    host, guest, third, result = _share(make_job, member, team)

    # then the second job shares the GPU (the service accepted it), the third waits
    assert (result.applied, result.failed, result.plan.max_jobs_per_gpu) == (1, 0, 2)
    assert (host.state, guest.state, third.state) == (
        JobState.RUNNING,
        JobState.RUNNING,
        JobState.QUEUED,
    )
    for job in (host, guest):
        assert list(job.current_allocation.gpus.values_list("pk", flat=True)) == [one_gpu_node.pk]
    assert third.current_allocation is None
    decision = RoundDecision.objects.get(round_id=result.round_id)
    assert (decision.job_id, decision.action, decision.applied) == (guest.pk, "start", True)


def test_the_service_refuses_a_third_job_on_a_shared_gpu_and_stores_nothing(
    eaco, one_gpu_node, make_job, member, team
):
    # given a GPU that two jobs share
    host, guest, third, _ = _share(make_job, member, team)

    # when a third is started on it at the limit of two
    with pytest.raises(cluster_services.AllocationError) as refused:
        cluster_services.start_job(
            third, gpus=[one_gpu_node], batch_size=64, max_jobs_per_gpu=2,
            at=T0 + timedelta(seconds=90),
        )  # fmt: skip

    # then it is refused naming the holders, and the third job holds nothing
    assert str(refused.value) == (
        f"GPUs are held by job(s) {sorted([host.pk, guest.pk])} (at most 2 job(s) per GPU)"
    )
    third.refresh_from_db()
    assert (third.state, third.current_allocation_id) == (JobState.QUEUED, None)
    assert not JobAllocation.objects.filter(job=third).exists()
    # and an exclusive start (limit 1) is refused as before
    with pytest.raises(cluster_services.AllocationError):
        cluster_services.start_job(
            third, gpus=[one_gpu_node], batch_size=64, at=T0 + timedelta(seconds=90)
        )
    assert JobAllocation.objects.filter(ended_at__isnull=True).count() == 2


def _solo_s() -> float:
    """The catalog's iteration time of the shared jobs' workload alone on one A100."""
    return (
        adapters.current_catalog()
        .get(WORKLOAD, "A100")
        .iter_time_s(GpuConfig(n_gpus=1, global_batch=64))
    )


def _report_speed(job, *, slowdown, start, until):
    """The agent's reports for ``job``: started at ``start``, then progress every 10 s at
    the perf model's solo iteration time times ``1 + slowdown``."""
    alloc = job.current_allocation
    solo_s = _solo_s()
    events = [{"event_id": uuid.uuid4(), "job_id": job.pk, "allocation_id": alloc.pk,
               "kind": "started", "ts": start}]  # fmt: skip
    t, k = start + timedelta(seconds=10), 0
    while t <= until:
        events.append(
            {"event_id": uuid.uuid4(), "job_id": job.pk, "allocation_id": alloc.pk,
             "kind": "progress", "ts": t, "iterations": k * 10.0 / (solo_s * (1 + slowdown))}
        )  # fmt: skip
        t, k = t + timedelta(seconds=10), k + 1
    # Through the agent API's service, as the agent's reports arrive.
    record_job_events(Node.objects.get(), events, now=until)


def test_a_pair_whose_observed_slowdown_exceeds_tolerance_is_separated_next_round(
    eaco, one_gpu_node, make_job, member, team
):
    # given a shared GPU where telemetry shows the host 30% and the guest 5% slower than alone
    host, guest, _, _ = _share(make_job, member, team)
    _report_speed(
        host, slowdown=0.30, start=T0 + timedelta(seconds=1), until=T0 + timedelta(seconds=170)
    )
    _report_speed(
        guest, slowdown=0.05, start=T0 + timedelta(seconds=61), until=T0 + timedelta(seconds=170)
    )
    now = T0 + timedelta(seconds=180)

    # when the snapshot is built, then each job's observed slowdown is what was measured
    slowdowns = {
        j.job_id: j.observed_slowdown
        for j in adapters.build_snapshot(now=now, round_length_s=60.0).snapshot.jobs
    }
    assert slowdowns[str(host.pk)] == pytest.approx(0.30)
    assert slowdowns[str(guest.pk)] == pytest.approx(0.05)

    # when the next round runs
    result = services.run_scheduling_round(now=now)

    # then the later-started guest is taken off the GPU (no other GPU: it waits), the host
    # keeps it, and the history learned the pair
    host.refresh_from_db()
    guest.refresh_from_db()
    assert result.failed == 0
    assert (host.state, guest.state) == (JobState.RUNNING, JobState.PAUSED)
    assert guest.current_allocation_id is None
    assert list(host.current_allocation.gpus.values_list("pk", flat=True)) == [one_gpu_node.pk]
    model = load_colocation()
    t = model.job_type(WORKLOAD, 64)
    history = SchedulerSettings.load().policy_state["history"][pair_key(t, t)]
    assert history[0] == 1
    assert history[1:] == pytest.approx([0.30, 0.05])


def test_a_pair_within_tolerance_stays_together(eaco, one_gpu_node, make_job, member, team):
    # given a shared GPU where telemetry shows both jobs 2% slower than alone
    host, guest, _, _ = _share(make_job, member, team)
    _report_speed(
        host, slowdown=0.02, start=T0 + timedelta(seconds=1), until=T0 + timedelta(seconds=170)
    )
    _report_speed(
        guest, slowdown=0.02, start=T0 + timedelta(seconds=61), until=T0 + timedelta(seconds=170)
    )
    allocations = (host.current_allocation_id, guest.current_allocation_id)

    # when the next round runs
    result = services.run_scheduling_round(now=T0 + timedelta(seconds=180))

    # then nothing moves: both keep their allocations on the shared GPU
    host.refresh_from_db()
    guest.refresh_from_db()
    assert (result.applied, result.failed) == (0, 0)
    assert (host.current_allocation_id, guest.current_allocation_id) == allocations
    assert (host.state, guest.state) == (JobState.RUNNING, JobState.RUNNING)


def test_a_job_alone_on_its_gpu_has_no_observed_slowdown(
    eaco, one_gpu_node, make_job, member, team
):
    host = _cifar(make_job, member, team, "host", T0 - timedelta(minutes=5))
    services.run_scheduling_round(now=T0)
    host.refresh_from_db()
    _report_speed(
        host, slowdown=0.5, start=T0 + timedelta(seconds=1), until=T0 + timedelta(seconds=170)
    )
    (snap_job,) = adapters.build_snapshot(
        now=T0 + timedelta(seconds=180), round_length_s=60.0
    ).snapshot.jobs
    assert snap_job.observed_slowdown is None


def test_the_shared_gpus_energy_is_split_equally_between_the_pair(
    eaco, one_gpu_node, make_job, member, team
):
    # given the pair sharing the GPU from T0+60, and 60 s of samples at 200 W from then on
    host, guest, _, _ = _share(make_job, member, team)
    GpuSample.objects.bulk_create(
        GpuSample(gpu=one_gpu_node, ts=T0 + timedelta(seconds=60 + s), power_w=200.0)
        for s in range(0, 61, 5)
    )

    # when the hour is accounted
    account_hour(one_gpu_node.pk, T0)

    # then each job is charged half of the 12,000 J
    assert job_totals(host).energy_j == pytest.approx(6000.0)
    assert job_totals(guest).energy_j == pytest.approx(6000.0)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(2))
def test_two_jobs_racing_for_the_last_slot_on_a_shared_gpu_have_one_winner(
    race, make_node, make_job, member, team, attempt
):
    # given a GPU one job holds, sharing limit two, and two jobs starting on it at once
    gpu = Gpu.objects.get(node=make_node("node-01", gpus=1))
    host, first, second = (
        _cifar(make_job, member, team, name, T0) for name in ("host", "first", "second")
    )
    cluster_services.start_job(host, gpus=[gpu], batch_size=64, at=T0)

    results = race(
        *(
            lambda job=job: cluster_services.start_job(
                job, gpus=[gpu], batch_size=64, max_jobs_per_gpu=2, at=T0
            )
            for job in (first, second)
        )
    )

    # then exactly one joined the host; the other is still queued and holds nothing
    assert sorted(type(r).__name__ for r in results) == ["AllocationError", "JobAllocation"]
    assert JobAllocation.objects.filter(ended_at__isnull=True, gpus=gpu).count() == 2
    states = sorted(
        Job.objects.filter(pk__in=[first.pk, second.pk]).values_list("state", flat=True)
    )
    assert states == [JobState.QUEUED, JobState.RUNNING]


def test_speed_measured_while_sharing_feeds_the_slowdown_not_the_online_model(
    eaco, one_gpu_node, make_job, member, team
):
    # given a host that ran exactly at its model's speed alone, then 50% slower once the guest
    # joined at T0+60, and a guest 50% slower from its start
    host, guest, _, _ = _share(make_job, member, team)
    solo_s = _solo_s()
    events = [
        {"event_id": uuid.uuid4(), "job_id": job.pk, "allocation_id": job.current_allocation_id,
         "kind": "started", "ts": T0 + timedelta(seconds=s)}
        for job, s in ((host, 1), (guest, 61))
    ]  # fmt: skip
    done = 0.0
    for s in range(11, 172, 10):  # host: 11..51 alone, 71..171 shared
        if s == 61:
            continue
        step_s = 10.0 if s != 71 else 20.0
        done += step_s / (solo_s * (1.0 if s <= 51 else 1.5))
        events.append(
            {"event_id": uuid.uuid4(), "job_id": host.pk,
             "allocation_id": host.current_allocation_id, "kind": "progress",
             "ts": T0 + timedelta(seconds=s), "iterations": done}
        )  # fmt: skip
    for k, s in enumerate(range(71, 172, 10)):
        events.append(
            {"event_id": uuid.uuid4(), "job_id": guest.pk,
             "allocation_id": guest.current_allocation_id, "kind": "progress",
             "ts": T0 + timedelta(seconds=s), "iterations": k * 10.0 / (solo_s * 1.5)}
        )  # fmt: skip
    record_job_events(Node.objects.get(), events, now=T0 + timedelta(seconds=175))
    now = T0 + timedelta(seconds=180)

    # when the round folds telemetry into the online models and builds its snapshot
    services.run_scheduling_round(now=now)

    # then the host's model saw only its solo stretch (the model's speed), the guest's nothing;
    # the 50% went to both jobs' observed slowdowns (which EaCO learned when it separated them)
    states = {s.job_id: s for s in JobSchedulingState.objects.filter(job__in=[host, guest])}
    (host_obs,) = [o for o in states[host.pk].observations["A100"] if o["iter_time_s"]]
    assert host_obs["iter_time_s"] == pytest.approx(solo_s, rel=1e-9)
    # 21-31, 31-41, 41-51: the solo intervals after its first, the warm-up
    assert host_obs["weight"] == 3.0
    assert states[host.pk].observed_until == T0 + timedelta(seconds=171)
    assert states[guest.pk].observations == {}
    t = load_colocation().job_type(WORKLOAD, 64)
    history = SchedulerSettings.load().policy_state["history"][pair_key(t, t)]
    assert history[1:] == pytest.approx([0.5, 0.5])


def test_the_observed_slowdown_is_measured_against_the_learned_profile_not_the_catalog(
    eaco, one_gpu_node, make_job, member, team
):
    # given a shared GPU where both jobs run 30% slower than the catalog's solo time, and a
    # workload profile that learned this workload runs 30% slower alone on an A100
    host, guest, _, _ = _share(make_job, member, team)
    _report_speed(
        host, slowdown=0.30, start=T0 + timedelta(seconds=1), until=T0 + timedelta(seconds=170)
    )
    _report_speed(
        guest, slowdown=0.30, start=T0 + timedelta(seconds=61), until=T0 + timedelta(seconds=170)
    )
    base = adapters.current_catalog().get(WORKLOAD, "A100")
    tp = base.throughput
    slow = replace(
        tp,
        alpha_c_s=1.3 * tp.alpha_c_s, beta_c_s=1.3 * tp.beta_c_s, alpha_r_s=1.3 * tp.alpha_r_s,
        beta_r_s=1.3 * tp.beta_r_s, alpha_n_s=1.3 * tp.alpha_n_s, beta_n_s=1.3 * tp.beta_n_s,
    )  # fmt: skip
    learned = FittedPerfModel(
        workload=WORKLOAD, gpu=base.gpu, batch_sizes=base.batch_sizes, throughput=slow,
        power=base.power,
    )  # fmt: skip
    cfg = GpuConfig(n_gpus=1, global_batch=64)
    assert learned.iter_time_s(cfg) == pytest.approx(1.3 * base.iter_time_s(cfg), rel=1e-9)
    WorkloadProfile.objects.create(
        workload=WORKLOAD, gpu_model="A100", version=1, prior=f"catalog {WORKLOAD}@A100",
        params=model_to_params(learned), n_observations=20, jobs=2, created_at=T0,
    )  # fmt: skip

    # when the snapshot is built
    now = T0 + timedelta(seconds=180)
    jobs = adapters.build_snapshot(now=now, round_length_s=60.0).snapshot.jobs

    # then neither job is slowed by sharing: they run as fast as the profile says they run alone
    slowdowns = {j.job_id: j.observed_slowdown for j in jobs}
    assert slowdowns[str(host.pk)] == pytest.approx(0.0, abs=1e-9)
    assert slowdowns[str(guest.pk)] == pytest.approx(0.0, abs=1e-9)


def test_the_observed_slowdown_leaves_out_the_jobs_warm_up_interval(
    eaco, one_gpu_node, make_job, member, team
):
    from scheduling.observations import observed_slowdowns

    # given a shared GPU where the host runs 20% slower than alone and the guest, after a
    # warm-up interval three times slower than that, too
    host, guest, _, _ = _share(make_job, member, team)
    solo_s = _solo_s()
    _report_speed(
        host, slowdown=0.20, start=T0 + timedelta(seconds=1), until=T0 + timedelta(seconds=120)
    )
    step = 10.0 / (solo_s * 1.2)  # iterations in 10 s at 20% slower
    events = [{"event_id": uuid.uuid4(), "job_id": guest.pk,
               "allocation_id": guest.current_allocation_id, "kind": "started",
               "ts": T0 + timedelta(seconds=61)}]  # fmt: skip
    for s, done in ((71, 0.0), (81, step / 3), (91, step / 3 + step)):
        events.append(
            {"event_id": uuid.uuid4(), "job_id": guest.pk,
             "allocation_id": guest.current_allocation_id, "kind": "progress",
             "ts": T0 + timedelta(seconds=s), "iterations": done}
        )  # fmt: skip
    record_job_events(Node.objects.get(), events, now=T0 + timedelta(seconds=120))

    # when the round reads the pair's slowdowns
    rows = list(
        Job.objects.filter(pk__in=[host.pk, guest.pk])
        .select_related("current_allocation")
        .prefetch_related("current_allocation__gpus")
    )
    slowdowns = observed_slowdowns(
        rows, catalog=adapters.current_catalog(), now=T0 + timedelta(seconds=120)
    )

    # then both read 20%: the guest's warm-up (a median of it and its one steady interval
    # would read 140%) is not a slowdown
    assert slowdowns[host.pk] == pytest.approx(0.20, rel=1e-6)
    assert slowdowns[guest.pk] == pytest.approx(0.20, rel=1e-6)
