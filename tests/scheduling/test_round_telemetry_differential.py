"""The batched telemetry reads (``adapters.observed_measurements_of``) against the per-job
reads they replaced (commit 16d5dce's parent; the retunes' history walk and the first two
reports as they were at fd24eea), kept here as the reference, on random small clusters:
jobs on one node or several, GPUs shared between jobs, retunes that continue an allocation
(chains of up to five, the batch or GPUs changing on the way), allocations that ended,
states read to random points, a job listed twice. And the round's fold of them
(``services._fold_telemetry_of``: the states written together, the profiles read ahead)
against each job's stored fit written by its own query, as before."""

import random
import uuid
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction
from django.db.models import Avg, Count, F, Q, Window
from django.db.models.functions import RowNumber

from cluster.models import Gpu, Job, JobAllocation, Node
from scheduling import adapters, observations, services
from scheduling import workload_profiles as wp
from scheduling.core.perf_models import FittedPerfModel
from scheduling.models import JobSchedulingState, WorkloadProfile
from telemetry.models import GpuSample, JobEvent

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 22, 4, 0, 0, tzinfo=UTC)


# --- the reference: the per-job reads as they were before the batch ------------------------


def _ref_first_two(job_id, allocation_id):
    firsts = (
        JobEvent.objects.filter(job_id=job_id, allocation_id=allocation_id, kind="progress")
        .annotate(rank=Window(RowNumber(), partition_by=[F("node_id")], order_by=F("ts").asc()))
        .filter(rank__lte=2)
        .values_list("node_id", "rank", "ts")
    )
    ranked: tuple[dict, dict] = ({}, {})
    for node_id, rank, ts in firsts:
        ranked[rank - 1][node_id] = ts
    first, second = ranked
    if not first:
        return None, None
    return max(first.values()), (max(second.values()) if len(second) == len(first) else None)


def _ref_warm_retune(job_id, allocation, *, depth=20):
    gpus = None
    current = allocation
    for _ in range(depth):
        before = (
            JobAllocation.objects.filter(job_id=job_id, ended_at=current.started_at)
            .exclude(pk=current.pk)
            .first()
        )
        if before is None or before.batch_size != allocation.batch_size:
            return False
        if gpus is None:
            gpus = {g.pk for g in allocation.gpus.all()}
        if set(before.gpus.values_list("pk", flat=True)) != gpus:
            return False
        if _ref_first_two(job_id, before.pk)[1] is not None:
            return True
        current = before
    return False


def _ref_training_since(job_id, allocation, read_until):
    first, warm = _ref_first_two(job_id, allocation.pk)
    if first is None:
        return None
    if warm is not None and read_until is not None and read_until >= warm:
        return warm
    return first if _ref_warm_retune(job_id, allocation) else warm


def _ref_shared(job_id, gpu_ids, since, now):
    rows = (
        JobAllocation.objects.filter(gpus__in=list(gpu_ids), started_at__lt=now)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=since))
        .exclude(job_id=job_id)
        .values_list("started_at", "ended_at")
        .distinct()
    )
    return sorted((max(start, since), min(end or now, now)) for start, end in rows)


def _ref_instants(gpus, since, until):
    window = GpuSample.objects.filter(gpu__in=[g.pk for g in gpus], ts__gt=since, ts__lte=until)
    if len({g.node_id for g in gpus}) < 2:
        return [
            (row["ts"], row["p"])
            for row in window.values("ts").annotate(p=Avg("power_w"), n=Count("gpu")).order_by("ts")
            if row["n"] == len(gpus)
        ]
    per_gpu = defaultdict(list)
    for gpu_id, ts, power_w in window.order_by("ts", "gpu_id").values_list(
        "gpu_id", "ts", "power_w"
    ):
        per_gpu[gpu_id].append((ts, power_w))
    if len(per_gpu) < len(gpus) or min(len(v) for v in per_gpu.values()) < 2:
        return []
    return adapters._matched_samplings(list(per_gpu.values()))


def _reference(job, state, alloc, now):
    if alloc is None:
        return None
    gpus = list(alloc.gpus.all())
    if not gpus:
        return None
    training = _ref_training_since(job.pk, alloc, state.observed_until)
    if training is None:
        return None
    since = max(training, state.observed_until) if state.observed_until else training
    newest = (
        JobEvent.objects.filter(job_id=job.pk, allocation_id=alloc.pk, kind="progress", ts__lte=now)
        .order_by("-ts")
        .values_list("ts", flat=True)
        .first()
    )
    if newest is None or newest <= since:
        return None
    shared = _ref_shared(job.pk, [g.pk for g in gpus], since, now)
    instants = _ref_instants(gpus, since, now)
    if instants and (newest - instants[-1][0]).total_seconds() <= adapters.SAMPLE_LAG_S:
        horizon = instants[-1][0]
    elif not instants and (newest - since).total_seconds() <= adapters.SAMPLE_LAG_S:
        return None
    else:
        horizon = newest
    progress = list(
        JobEvent.objects.filter(
            job_id=job.pk, allocation_id=alloc.pk, kind="progress", ts__gte=since, ts__lte=horizon
        )
        .order_by("ts", "node_id")
        .values_list("node_id", "ts", "iterations", "clamped")
    )
    return adapters._measurements(job, alloc, gpus, shared, instants, progress)


# --- random scenarios ---------------------------------------------------------------------


def _scenario(rng: random.Random, make_job, member, team, tag: str):
    nodes = []
    for n in range(3):
        node = Node.objects.create(
            name=f"{tag}-n{n}", switch_label="s", rack_label="r", gpu_model="A100"
        )
        Gpu.objects.bulk_create(
            Gpu(node=node, index=k, uuid=f"GPU-{tag}-{n}-{k}", model="A100", memory_mb=40960,
                default_power_limit_w=400, min_power_limit_w=100, max_power_limit_w=400,
                supported_sm_clocks_mhz=[1410, 1200, 1005])
            for k in range(2)
        )  # fmt: skip
        nodes.append(node)
    all_gpus = list(Gpu.objects.filter(node__in=nodes).order_by("pk"))
    by_node = defaultdict(list)
    for g in all_gpus:
        by_node[g.node_id].append(g)
    items = []
    sampled: set[int] = set()
    for _ in range(rng.randint(2, 5)):
        shape = rng.choice(["one", "two-same", "two-nodes"])
        if shape == "one":
            gpus = [rng.choice(all_gpus)]
        elif shape == "two-same":
            gpus = list(by_node[rng.choice(list(by_node))])
        else:
            a, b = rng.sample(list(by_node), 2)
            gpus = [rng.choice(by_node[a]), rng.choice(by_node[b])]
        workload, resembles = rng.choice(
            [("resnet50", ""), ("bert", ""), ("bert", ""), ("mystery", "resnet50")]
        )
        job = make_job(owner=member, team=team, min_gpus=1, max_gpus=4,
                       global_batch_size=256, min_batch_size=128, max_batch_size=512,
                       total_iterations=10_000_000, workload=workload,
                       resembles=resembles)  # fmt: skip
        # one to five allocations back to back (or with a gap), the last maybe running
        allocs = []
        start = T0 + timedelta(seconds=rng.randint(0, 60))
        for _ in range(rng.randint(1, 5)):
            span = timedelta(seconds=rng.randint(20, 300))
            alloc = JobAllocation.objects.create(
                job=job, batch_size=rng.choice([256, 256, 512]), started_at=start,
                ended_at=start + span,
            )  # fmt: skip
            alloc.gpus.set(gpus if rng.random() < 0.8 else [rng.choice(all_gpus)])
            allocs.append(alloc)
            start = alloc.ended_at + (timedelta(0) if rng.random() < 0.6 else timedelta(seconds=30))
        if rng.random() < 0.7:
            allocs[-1].ended_at = None
            allocs[-1].save(update_fields=["ended_at"])
            Job.objects.filter(pk=job.pk).update(current_allocation=allocs[-1])
        for alloc in allocs:
            a_gpus = list(alloc.gpus.all())
            end = alloc.ended_at or T0 + timedelta(minutes=12)
            pace = rng.uniform(0.02, 0.2)
            for node_id in {g.node_id for g in a_gpus}:
                t = alloc.started_at + timedelta(seconds=rng.uniform(0.5, 8))
                if rng.random() < 0.3:
                    # a report stamped before the start (an agent clock behind), clamped
                    # onto it by the server (``JobEvent.clamped``), maybe the first two
                    JobEvent.objects.create(
                        event_id=uuid.uuid4(), node_id=node_id, job=job, allocation_id=alloc.pk,
                        kind="progress", ts=alloc.started_at, received_at=t, clamped=True,
                        iterations=rng.choice([0.0, 3.0]),
                    )  # fmt: skip
                while t < end and rng.random() > 0.03:
                    JobEvent.objects.create(
                        event_id=uuid.uuid4(), node_id=node_id, job=job, allocation_id=alloc.pk,
                        kind="progress", ts=t, received_at=t,
                        iterations=(t - alloc.started_at).total_seconds() / pace,
                        clamped=rng.random() < 0.05,
                    )  # fmt: skip
                    t += timedelta(seconds=rng.choice([2, 3, 5, 5, 7]))
            for g in a_gpus:
                if g.pk in sampled:
                    continue  # (one sampling per GPU: the agents sample the GPU, not the job)
                sampled.add(g.pk)
                gap = rng.choice([1.0, 1.0, 2.0])
                shift = rng.uniform(0, 0.9)
                t = T0 + timedelta(seconds=shift)
                stop = T0 + timedelta(minutes=rng.randint(6, 13))
                rows = []
                while t < stop:
                    if rng.random() > 0.05:
                        rows.append(GpuSample(gpu=g, ts=t, power_w=float(rng.randint(150, 350))))
                    t += timedelta(seconds=gap)
                GpuSample.objects.bulk_create(rows)
        state = JobSchedulingState.objects.create(
            job=job,
            observed_until=rng.choice([None, None, T0 + timedelta(seconds=rng.randint(0, 500))]),
        )
        job = Job.objects.select_related("current_allocation").get(pk=job.pk)
        for alloc in JobAllocation.objects.filter(job=job).prefetch_related("gpus"):
            items.append((job, state, alloc))
    # the newest of two profiles of bert on the A100, or none
    if rng.random() < 0.5:
        base = adapters.current_catalog().get("bert", "A100")
        for version in (1, 2):
            tp = replace(base.throughput, alpha_c_s=base.throughput.alpha_c_s * (1 + version))
            WorkloadProfile.objects.create(
                workload="bert", gpu_model="A100", version=version, prior="catalog bert@A100",
                params=wp.model_to_params(
                    FittedPerfModel(workload="bert", gpu=base.gpu, batch_sizes=base.batch_sizes,
                                    throughput=tp, power=base.power)
                ),
                n_observations=9, jobs=1, created_at=T0,
            )  # fmt: skip
    rng.shuffle(items)
    if items:
        items.append(items[0])  # a job listed twice
    return items


def _key(found):
    if found is None:
        return None
    return (found.gpu_model, found.until, found.observations)


# (most seeds measure several of their allocations, up to 7 of 9; about one in four none)
@pytest.mark.parametrize("seed", range(40))
def test_the_batch_reads_find_what_each_jobs_own_reads_did(
    make_job, member, team, seed, monkeypatch
):
    # given a random small cluster's jobs, allocations and telemetry
    rng = random.Random(seed)
    items = _scenario(rng, make_job, member, team, f"d{seed}")
    now = T0 + timedelta(seconds=rng.randint(120, 800))
    # when all are read at once
    batch = list(adapters.observed_measurements_of(items, now=now))
    # then each finds what the per-job reads found
    expected = [_reference(job, state, alloc, now) for job, state, alloc in items]
    assert [_key(f) for f in batch] == [_key(f) for f in expected]
    # and so does each read in runs of a few jobs (``adapters.READ_SPAN_GPU_S``)
    monkeypatch.setattr(adapters, "READ_SPAN_GPU_S", 600.0)
    runs = list(adapters.observed_measurements_of(items, now=now))
    assert [_key(f) for f in runs] == [_key(f) for f in expected]


def _stored(items):
    states = JobSchedulingState.objects.in_bulk([job.pk for job, _, _ in items])
    return {
        pk: (s.observed_until, s.observations, s.online_params) for pk, s in sorted(states.items())
    }


def _fresh(items):
    """``items`` with each job's state as stored (a fold moves the states it is given)."""
    states = JobSchedulingState.objects.in_bulk([job.pk for job, _, _ in items])
    return [(job, states[job.pk], alloc) for job, _, alloc in items]


def _ref_fold(items, *, catalog, now):
    """The fold as it was: each job's fit stored by its own query, its profile looked up
    on its own."""
    refitted = 0
    found_of = adapters.observed_measurements_of(items, now=now)
    for (job, state, alloc), found in zip(items, found_of, strict=True):
        if found is None:
            continue
        nvml = wp.nvml_gpus(alloc.gpus.all()).get(found.gpu_model)
        prior = wp._prior_and_mark(
            job.workload, found.gpu_model, catalog=catalog, nvml=nvml, hints=wp.JobHints.of(job)
        )
        if prior is None:
            JobSchedulingState.objects.filter(pk=state.pk).update(observed_until=found.until)
            continue
        model = wp.refit_observations(
            job, state, gpu_model=found.gpu_model, observations=found.observations,
            until=found.until, catalog=catalog, nvml=nvml, writes=wp.StateWrites(),
        )  # fmt: skip
        JobSchedulingState.objects.filter(pk=state.pk).update(
            observations=state.observations,
            online_params=state.online_params,
            observed_until=state.observed_until,
        )
        refitted += model is not None
    return refitted


@pytest.mark.parametrize("seed", range(0, 40, 3))
def test_the_round_stores_what_each_jobs_own_write_stored(make_job, member, team, seed):
    # given a random small cluster's jobs (each once, at one of its allocations)
    rng = random.Random(seed)
    items = _scenario(rng, make_job, member, team, f"f{seed}")
    once = list({job.pk: (job, state, alloc) for job, state, alloc in items}.values())
    now = T0 + timedelta(seconds=rng.randint(120, 800))
    catalog = adapters.current_catalog()
    # when each job's fit is stored by its own query (rolled back), then by the round's fold
    with transaction.atomic():
        expected_refitted = _ref_fold(_fresh(once), catalog=catalog, now=now)
        expected = _stored(once)
        transaction.set_rollback(True)
    refitted = services._fold_telemetry_of(_fresh(once), catalog=catalog, now=now)
    # then the same states are stored
    assert refitted == expected_refitted
    assert _stored(once) == expected


@pytest.mark.parametrize("foreign", ["first", "between", "last", "only"])
def test_reports_from_a_node_that_holds_none_of_the_gpus_are_ranked_as_before(
    make_job, member, team, foreign
):
    # given allocations on GPUs of two nodes, one of them also reported by a third node
    # (which the agents' API refuses, but a row written another way is still read)
    nodes = [
        Node.objects.create(name=f"{foreign}-n{k}", switch_label="s", rack_label="r")
        for k in range(3)
    ]
    other = nodes.pop({"first": 0, "between": 1}.get(foreign, 2))  # (first, between or last)
    a, b = nodes
    gpus = []
    for node in (a, b):
        gpus.append(Gpu.objects.create(node=node, index=0, uuid=f"GPU-{foreign}-{node.pk}",
                                       model="A100", memory_mb=40960, default_power_limit_w=400,
                                       min_power_limit_w=100, max_power_limit_w=400))  # fmt: skip
    job = make_job(owner=member, team=team, min_gpus=1, max_gpus=4)
    alloc = JobAllocation.objects.create(job=job, batch_size=256, started_at=T0)
    alloc.gpus.set(gpus)
    twin = JobAllocation.objects.create(job=job, batch_size=256, started_at=T0, ended_at=T0)
    twin.gpus.set(gpus)
    reporters = {"only": [other]}.get(foreign, [a, b, other])
    for k, node in enumerate(reporters):
        for s in range(3 if node == other else 2):
            at = T0 + timedelta(seconds=10 * s + k)
            JobEvent.objects.create(event_id=uuid.uuid4(), node=node, job=job,
                                    allocation_id=alloc.pk, kind="progress", ts=at,
                                    received_at=at, iterations=float(s))  # fmt: skip
    JobEvent.objects.create(event_id=uuid.uuid4(), node=a, job=job, allocation_id=twin.pk,
                            kind="progress", ts=T0, received_at=T0, iterations=0.0)  # fmt: skip
    # when the first two reports of each node are read
    keys = [(job.pk, alloc.pk), (job.pk, twin.pk)]
    found = observations.first_two_reports_of(keys)
    given = observations.first_two_reports_of(keys, gpu_nodes=dict.fromkeys(keys, {a.pk, b.pk}))
    # then they are what the window over every report found, the GPUs' nodes given or not
    assert given == found
    assert found == {
        (job.pk, alloc.pk): _ref_first_two(job.pk, alloc.pk),
        (job.pk, twin.pk): _ref_first_two(job.pk, twin.pk),
    }
    assert found[job.pk, alloc.pk][0] == T0 + timedelta(seconds=len(reporters) - 1)
