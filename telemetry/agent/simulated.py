"""The simulated GPU backend and simulated jobs: readings follow the performance models.

``python -m telemetry.agent --simulate --gpus 8 --gpu-model A100`` runs an agent without a
driver. A GPU that runs a job draws the power the perf model predicts for the job's
configuration (GPU count, global batch, SM clock or power limit) and the job advances by
``dt / iter_time_s`` iterations per tick; an idle GPU draws the model's idle power. The
energy counter is the exact integral of that piecewise-constant power, like NVML's.

Two jobs sharing a GPU (co-location, EaCO) are time-sliced as the scheduling simulator does it:
each advances at its throughput ratio ``x`` from Gavel's measured pairs
(``scheduling.core.colocation``; ``UNMEASURED_PAIR_RATIO``, plain alternation, for a pair
Gavel did not measure) and the GPU draws ``colocation.shared_power_w`` (idle once plus each
job's dynamic part times its ``x``). The simulator's seeded noise on ``x`` is left out here.
Three or more jobs on one GPU (no policy plans that) each get ``1/n`` of the rate and the GPU
the mean of their powers (``colocation.gpu_ratios`` and ``gpu_power_w``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scheduling.core.colocation import gpu_power_w, gpu_ratios, load_colocation
from scheduling.core.perf_models import catalog_stand_in
from telemetry.agent.backends import GpuInfo, Reading, capped_settings


class PerfModelUnavailable(RuntimeError):
    """No performance model for a (workload, GPU model) pair: the simulation cannot invent one."""


@functools.cache
def _catalog() -> Any:
    # Imported late and cached: loading reads the vendored CSVs under data/ once.
    from scheduling.core.perf_models import load_catalog

    return load_catalog()


def perf_model_for(
    workload: str, gpu_model: str, resembles: str = "", param_count: float | None = None
) -> Any:
    """The perf model of ``workload`` on ``gpu_model`` (the one place the agent looks it up):
    the simulation's ground truth. A workload the catalog does not know on the GPU model runs
    as the catalog model that stands for it there (``perf_models.catalog_stand_in``: the one
    it ``resembles``, else the nearest in ``param_count``, else the first), the model the
    service starts its prediction from: the service accepted the job on that estimate, and
    the demo ran it nowhere ("no perf model for 'my-net' on 'A100'")."""
    model = catalog_stand_in(
        _catalog(), workload, gpu_model, resembles=resembles, param_count=param_count
    )
    if model is None:
        raise PerfModelUnavailable(f"no perf model for {workload!r} on {gpu_model!r}")
    return model


def gpu_spec(gpu_model: str) -> Any:
    """The catalog's spec of a GPU model: idle draw, clock steps, power-limit range."""
    try:
        return _catalog().gpus[gpu_model]
    except KeyError as exc:
        raise PerfModelUnavailable(
            f"the perf catalog does not know GPU model {gpu_model!r}"
        ) from exc


@dataclass
class SimJob:
    """A job the simulated agent "runs": progress advances by the perf model."""

    job_id: int
    workload: str
    gpu_indices: tuple[int, ...]
    global_batch: int
    sm_clock_mhz: int | None
    power_limit_w: float | None
    done_iters: float = 0.0
    total_iters: float | None = None
    resembles: str = ""  # the job's hint: the catalog workload it runs as if its own is unknown
    param_count: float | None = None  # the job's other hint (``perf_model_for``)
    model: Any = field(default=None, repr=False)
    # The job's GPUs on all its nodes and their shape (``gpu_count``, ``gpus_per_node`` of
    # the assignment); None / empty: this node's GPUs alone. A job on several nodes runs
    # at its whole allocation's speed on each: this node's GPUs are a part of it.
    n_gpus: int | None = None
    gpus_per_node: tuple[int, ...] = ()
    # When it reached ``done_iters`` (Unix s), as a real job's client writes it: the last
    # count is reached inside an interval, not at the read that finds it.
    at: float | None = None

    def config(self) -> Any:
        from scheduling.core.types import GpuConfig

        return GpuConfig(
            n_gpus=self.n_gpus or len(self.gpu_indices),
            global_batch=self.global_batch,
            sm_clock_mhz=self.sm_clock_mhz,
            power_limit_w=self.power_limit_w,
            gpus_per_node=self.gpus_per_node,
        )

    @property
    def finished(self) -> bool:
        return self.total_iters is not None and self.done_iters >= self.total_iters


class SimulatedBackend:
    """``n_gpus`` simulated GPUs of ``gpu_model`` on a node called ``node_name``."""

    def __init__(self, *, node_name: str, n_gpus: int, gpu_model: str) -> None:
        self.gpu_model = gpu_model
        spec = gpu_spec(gpu_model)
        self._idle_w = float(spec.idle_power_w)
        self._default_w = float(spec.power_limit_max_w)
        self._info = [
            GpuInfo(
                uuid=f"GPU-sim-{node_name}-{i}",
                index=i,
                model=gpu_model,
                memory_total_mib=None,  # unknown: the perf catalog has no memory figures
                default_power_limit_w=self._default_w,
                min_power_limit_w=float(spec.power_limit_min_w),
                max_power_limit_w=self._default_w,
                max_sm_clock_mhz=max(spec.clocks_mhz) if spec.clocks_mhz else None,
                supported_sm_clocks_mhz=tuple(sorted(spec.clocks_mhz, reverse=True)),
            )
            for i in range(n_gpus)
        ]
        self._energy_j = [0.0] * n_gpus
        self._power_w = [self._idle_w] * n_gpus
        self._last: datetime | None = None
        self.jobs: dict[int, SimJob] = {}
        # Settings applied to each GPU (index -> (SM clock, power limit)), as a driver keeps
        # them: what a GPU without a simulated job reports (under Slurm, the job is not ours).
        self.settings: dict[int, tuple[int | None, float | None]] = {}

    # --- jobs -------------------------------------------------------------------------
    def start_job(self, job: SimJob) -> None:
        job.model = perf_model_for(job.workload, self.gpu_model, job.resembles, job.param_count)
        self.jobs[job.job_id] = job
        self._refresh_power()

    def retune_job(
        self, job_id: int, *, sm_clock_mhz: int | None, power_limit_w: float | None
    ) -> None:
        """New clock or power limit of a running job: its progress and its GPUs' power follow
        from the next interval on."""
        job = self.jobs[job_id]
        job.sm_clock_mhz = sm_clock_mhz
        job.power_limit_w = power_limit_w
        self._refresh_power()

    def stop_job(self, job_id: int) -> SimJob | None:
        job = self.jobs.pop(job_id, None)
        self._refresh_power()
        return job

    def _sharers(self) -> dict[int, list[SimJob]]:
        on_gpu: dict[int, list[SimJob]] = {}
        for job in self.jobs.values():
            for index in job.gpu_indices:
                on_gpu.setdefault(index, []).append(job)
        return on_gpu

    @staticmethod
    def _ratios(jobs: list[SimJob]) -> list[float]:
        """Throughput ratio (shared / alone) of each of the jobs on one GPU."""
        return gpu_ratios(
            load_colocation(),
            [(j.workload, j.global_batch / j.config().n_gpus, j.config().n_gpus) for j in jobs],
        )

    def _refresh_power(self) -> None:
        on_gpu = self._sharers()
        for index in range(len(self._info)):
            jobs = on_gpu.get(index, [])
            powers = [j.model.power_w(j.config()) for j in jobs]
            ratios = self._ratios(jobs) if len(jobs) == 2 else []
            self._power_w[index] = gpu_power_w(self._idle_w, powers, ratios)

    def _advance(self, dt_s: float, end: datetime) -> None:
        """Integrate energy and progress over the ``dt_s`` before ``end`` at the power of
        the last interval."""
        for index, power in enumerate(self._power_w):
            self._energy_j[index] += power * dt_s
        # A job spread over GPUs with different co-runners goes at its slowest GPU's pace.
        ratio: dict[int, float] = {}
        for jobs in self._sharers().values():
            for job, x in zip(jobs, self._ratios(jobs), strict=True):
                ratio[job.job_id] = min(ratio.get(job.job_id, 1.0), x)
        end_s = end.timestamp()
        for job in self.jobs.values():
            if job.finished:
                continue
            rate = ratio[job.job_id] / job.model.iter_time_s(job.config())
            job.done_iters += dt_s * rate
            job.at = end_s
            if job.total_iters is not None and job.done_iters >= job.total_iters:
                job.at = end_s - (job.done_iters - job.total_iters) / rate
                job.done_iters = job.total_iters

    # --- GpuBackend -------------------------------------------------------------------------
    def gpus(self) -> list[GpuInfo]:
        return list(self._info)

    def read(self, now: datetime) -> list[Reading]:
        if self._last is not None and now > self._last:
            self._advance((now - self._last).total_seconds(), now)
        self._last = now
        on_gpu = self._sharers()
        readings = []
        for info in self._info:
            jobs = on_gpu.get(info.index, [])
            applied_clock, applied_limit = self.settings.get(info.index, (None, None))
            clock = next((j.sm_clock_mhz for j in jobs if j.sm_clock_mhz), applied_clock)
            limit = next((j.power_limit_w for j in jobs if j.power_limit_w), applied_limit)
            readings.append(
                Reading(
                    gpu_uuid=info.uuid,
                    ts=now,
                    power_w=self._power_w[info.index],
                    energy_j=self._energy_j[info.index],
                    util_pct=100.0 if jobs else 0.0,
                    mem_used_mib=None,
                    temp_c=None,
                    sm_clock_mhz=clock,
                    power_limit_w=limit or self._default_w,
                )
            )
        return readings

    def apply_settings(
        self, index: int, *, sm_clock_mhz: int | None, power_limit_w: float | None
    ) -> None:
        # A simulated job's own settings travel with its SimJob (they change its perf-model
        # config); the GPU keeps what was applied, held to its range as NVML's would be. A
        # None setting is the GPU's own, as on NVML: a clock no longer asked for is unlocked.
        clock, limit = capped_settings(
            self._info[index], sm_clock_mhz=sm_clock_mhz, power_limit_w=power_limit_w
        )
        self.settings[index] = (clock, limit)

    def restore_defaults(self, index: int) -> None:
        self.settings.pop(index, None)

    def close(self) -> None:
        return None
