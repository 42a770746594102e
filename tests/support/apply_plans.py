"""Running jobs on a live node and plans that move them, for the tests of how a round's
changes are applied (``scheduling.services._apply``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from cluster import services as cluster_services
from cluster.models import Gpu, Node
from scheduling.core import types as core


def live_gpus(make_node, gpus: int, *, now: datetime) -> list[Gpu]:
    """The GPUs, by index, of a new node ``node-01`` of ``gpus`` GPUs heard from at ``now``."""
    node = make_node("node-01", gpus=gpus)
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=now)
    return list(Gpu.objects.filter(node=node).order_by("index"))


def running_jobs(node_gpus, make_job, member, team, on, *, now: datetime):
    """Jobs of one GPU each, job k started on GPU ``on[k]`` a minute before ``now``."""
    jobs = []
    for k in on:
        job = make_job(
            owner=member, team=team, min_gpus=1, max_gpus=1, global_batch_size=256,
            min_batch_size=256, max_batch_size=256, at=now - timedelta(minutes=5),
        )  # fmt: skip
        cluster_services.start_job(
            job, gpus=[node_gpus[k]], batch_size=256, at=now - timedelta(minutes=1)
        )
        jobs.append(job)
    return jobs


def on(gpus, *ks: int) -> core.Allocation:
    """An allocation of GPUs ``ks`` (indexes into ``gpus``) at a batch of 256."""
    return core.Allocation(gpu_ids=tuple(gpus[k].uuid for k in ks), global_batch=256)


def moves(jobs, gpus, targets) -> core.Plan:
    """A fifo plan that moves job k from its GPU to GPU ``targets[k]``, in job order."""
    held = [job.current_allocation.gpus.get() for job in jobs]
    before = [gpus.index(g) for g in held]
    return core.Plan(
        allocations={str(j.pk): on(gpus, t) for j, t in zip(jobs, targets, strict=True)},
        waiting={},
        changes=tuple(
            core.Change(str(j.pk), core.ChangeKind.RESIZE, before=on(gpus, b), after=on(gpus, t))
            for j, b, t in zip(jobs, before, targets, strict=True)
        ),
        policy="fifo",
    )
