"""What policies know in simulation: the catalog itself, or what jobs have learned.

``oracle``: the snapshot hands policies the very catalog that advances jobs, so every
prediction is exact (up to the per-job ``iter_time_scale``/``power_scale`` the trace sets,
which policies also see). That is perfect knowledge, no live cluster has it.

``learned`` (:class:`LearnedKnowledge`): the catalog stays the ground truth that advances
jobs, but policies see, per job, only the online model (``scheduling/core/online_model``)
fitted from what the job was *observed* doing, as the live service does from progress
reports and NVML samples (``scheduling/workload_profiles.py``):

* after each stretch a job ran alone on its GPUs (not while restarting or time-slicing a
  GPU), one observation: its iteration time and per-GPU draw in that configuration (GPUs,
  nodes, per-GPU batch, clock, power limit), each the truth times seeded log-normal noise
  ``exp(N(0, measurement_noise))``;
* a job starts from a prior: its workload's profile if an earlier job of the workload has
  finished in this run, else (``hide_workloads``, the default) the nearest *other* catalog
  workload on the GPU model: before any observation the one whose batch sizes are nearest
  the job's submitted per-GPU batch (all that is known at submission), from the first
  observation the one whose prediction there is nearest the observed iteration time (a
  model of similar size). With ``hide_workloads=False`` a catalog workload starts from its
  own catalog model, taken as measured (what the live service does for a catalog key).
  Unlike the live service (``workload_profiles.fit_prior``), an estimate from another
  workload keeps that workload's fixed / per-sample split: it is not reshaped from the
  job's draw (``online_model.draw_shaped_prior``), deliberately. The catalog's draws are borrowed
  from Zeus and its times from ElasticFlow and Pollux, so a simulated job's draw says
  nothing about how its simulated time bends with batch (A100 resnet50_cifar10: its draw
  reads 58% busy, its time is 26% per-sample), and a run here could not judge it;
  ``benchmarks/bench_online_model.py`` does, on Zeus' own draws and times;
* the snapshot's ``job_perf`` carries each job's model, and its ``iter_time_scale`` and
  ``power_scale`` are 1: whatever makes this job slower or hungrier than its workload is
  for the model to learn, not given;
* a finished job's measurements join its workload's profile, each job's share bounded,
  and the profile is one fit over them all, refitted where a fold would matter
  (``profiles.fold``; the first job's prior is its base), as
  ``workload_profiles.fold_into_profile`` does live.

Refits stay cheap: a job is refitted when it is observed in a configuration its last fit
did not include (the live service refits every round; a job runs in a handful of
configurations, and each new one is what can change the fitted shape) or when its
observations have grown ``REFIT_GROWTH``-fold since its last fit, warm-started from its
last parameters and capped at ``SIM_FIT.max_steps`` steps; in between its model is rebuilt
from the stored parameters with the new observations' per-configuration corrections
(``online_model.learned_model``), which costs no fit, so a configuration it ran in is
predicted as measured from its first observation on. (Refitting only when the
configurations had grown fourfold kept a lone vgg16 job on four A100s for its whole run:
its one-GPU fit, shaped by another workload, said eight GPUs were slower; docs/benchmarks.md,
"A job seen in a new configuration is refitted".)
Nothing here reads the clock, and the noise is seeded per job from the run's seed, so a
run is a pure function of its inputs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduling.core import online_fit, profiles
from scheduling.core import online_model as om
from scheduling.core.perf_models import FittedPerfModel, load_param_counts, nearest_by_params
from scheduling.core.types import Allocation, Job, PerfCatalog, PerfModel

KNOWLEDGE = ("oracle", "learned")
# The live fit's settings with fewer steps: warm-started refits converge in a few.
SIM_FIT = om.FitSettings(max_steps=10)
# Refit when a job's observations have grown by this factor since its last fit (and
# whenever it shows a configuration the fit lacks; between fits its measured
# configurations are corrected without a fit).
REFIT_GROWTH = 4
# A job names its workload's published parameter count (data/perf/param_counts.csv) and
# starts from the other workload nearest in it, where both are known (``prior``).
PARAM_PRIOR = False


def _own_label(workload: str) -> str:
    """The label of a prior that is the catalog's own model of ``workload``."""
    return f"catalog {workload}"


@dataclass
class _Learning:
    """One job's learning on one GPU model."""

    prior: FittedPerfModel
    observations: list[om.Observation] = field(default_factory=list)  # pooled by config
    params: list[float] | None = None  # None: not fitted yet
    fitted_keys: frozenset = frozenset()
    fitted_weight: float = 0.0
    model: om.OnlinePerfModel | None = None
    dirty: bool = False


@dataclass
class _Profile:
    fit: profiles.ProfileFit
    n_observations: float
    jobs: int

    @property
    def model(self) -> FittedPerfModel:
        return self.fit.model


class LearnedKnowledge:
    """Per-job online models fed by simulated observations (see the module docstring)."""

    def __init__(
        self,
        catalog: PerfCatalog,
        *,
        measurement_noise: float = 0.0,
        seed: int = 0,
        hide_workloads: bool = True,
        settings: om.FitSettings = SIM_FIT,
        param_counts: Mapping[str, float] | None = None,
    ) -> None:
        if not (measurement_noise >= 0 and math.isfinite(measurement_noise)):
            raise ValueError("measurement_noise must be a finite number, not negative")
        self.catalog = catalog
        self.noise = measurement_noise
        self.seed = seed
        self.hide_workloads = hide_workloads
        self.settings = settings
        if param_counts is None:
            param_counts = load_param_counts() if PARAM_PRIOR else {}
        self.param_counts = dict(param_counts)
        self._learning: dict[tuple[str, str], _Learning] = {}
        self._rng: dict[str, random.Random] = {}
        self._profiles: dict[tuple[str, str], _Profile] = {}
        self._priors: dict[tuple, om.OnlinePerfModel] = {}  # shared by jobs without data
        self._candidates: dict[str, list[FittedPerfModel]] = {}
        self._unobserved: dict[tuple, tuple] = {}  # ``prior`` before observations, by key
        self.n_fits = 0
        self.n_observations = 0

    # --- priors --------------------------------------------------------------------------

    def _others(self, workload: str, gpu_model: str) -> list[FittedPerfModel]:
        if gpu_model not in self._candidates:
            self._candidates[gpu_model] = [
                m for m in self.catalog.models() if m.gpu_model == gpu_model
            ]
        models = self._candidates[gpu_model]
        if not self.hide_workloads:
            return models
        return [m for m in models if m.workload != workload] or models

    def prior(self, job: Job, gpu_model: str, first: om.Observation | None = None):
        """(prior model, its label) for ``job`` on ``gpu_model`` (module docstring)."""
        profile = self._profiles.get((job.workload, gpu_model))
        if profile is not None:
            return profile.model, f"profile {job.workload}@{gpu_model} ({profile.jobs} jobs)"
        if not self.hide_workloads and self.catalog.has(job.workload, gpu_model):
            return self.catalog.get(job.workload, gpu_model), _own_label(job.workload)
        if first is not None:
            return self._nearest(job, gpu_model, first)
        # Before any observation the choice depends on the workload, the GPU model and the
        # submitted per-GPU batch only; a long queue asks it of every waiting job each round.
        key = (job.workload, gpu_model, job.global_batch / max(job.requested_gpus, 1))
        found = self._unobserved.get(key)
        if found is None:
            found = self._unobserved[key] = self._nearest(job, gpu_model, None)
        return found

    def _nearest(self, job: Job, gpu_model: str, first: om.Observation | None):
        """``prior``'s choice among the other catalog workloads (module docstring)."""
        others = self._others(job.workload, gpu_model)
        if not others:
            return None, None
        by_size = nearest_by_params(
            [m.workload for m in others], self.param_counts.get(job.workload), self.param_counts
        )
        if by_size is not None:
            near = next(m for m in others if m.workload == by_size)
            return near, f"catalog {near.workload} (nearest in parameters)"
        if first is not None and first.iter_time_s is not None:
            cfg = first.config()
            near = min(
                others,
                key=lambda m: (abs(math.log(m.iter_time_s(cfg) / first.iter_time_s)), m.workload),
            )
        else:
            local = job.global_batch / max(job.requested_gpus, 1)

            def batch_distance(m: FittedPerfModel) -> float:
                sizes = m.batch_sizes or (32,)
                return min(abs(math.log(local / s)) for s in sizes if s > 0)

            near = min(others, key=lambda m: (batch_distance(m), m.workload))
        return near, f"catalog {near.workload} (nearest other)"

    # --- observations ------------------------------------------------------------------

    def observe(
        self,
        job: Job,
        gpu_model: str,
        alloc: Allocation,
        shape: Sequence[int],
        iter_time_s: float,
        power_w: float,
    ) -> None:
        """One stretch of ``job`` alone on ``alloc``: its true iteration time and per-GPU
        draw, measured with the configured noise."""
        rng = self._rng.get(job.job_id)
        if rng is None:
            rng = self._rng[job.job_id] = random.Random(f"{self.seed}:observe:{job.job_id}")
        if self.noise > 0.0:
            iter_time_s *= math.exp(rng.gauss(0.0, self.noise))
            power_w *= math.exp(rng.gauss(0.0, self.noise))
        obs = om.Observation(
            n_gpus=alloc.n_gpus,
            n_nodes=max(len(shape), 1),
            local_batch=alloc.global_batch / alloc.n_gpus,
            iter_time_s=iter_time_s,
            power_w=power_w,
            sm_clock_mhz=alloc.sm_clock_mhz,
            power_limit_w=alloc.power_limit_w,
        )
        key = (job.job_id, gpu_model)
        learning = self._learning.get(key)
        if learning is None:
            prior, _ = self.prior(job, gpu_model, first=obs)
            if prior is None:
                return
            learning = self._learning[key] = _Learning(prior=prior)
        if om.refusal_reason(obs, gpu=learning.prior.gpu) is not None:
            return  # what the live service refuses never enters a fit here either
        per_node = learning.prior.gpu.gpus_per_node
        learning.observations = om.pooled_observations([*learning.observations, obs], per_node)
        learning.dirty = True
        self.n_observations += 1

    def _refresh(self, learning: _Learning, workload: str) -> om.OnlinePerfModel:
        obs = learning.observations
        keys = frozenset(o.key for o in obs)
        weight = sum(o.weight for o in obs if o.iter_time_s is not None)
        base = learning.model.base if learning.model is not None else None
        if (
            learning.params is None
            or not keys <= learning.fitted_keys
            or weight >= REFIT_GROWTH * learning.fitted_weight
        ):
            learning.params = online_fit.fit_params(
                learning.prior, obs, settings=self.settings, start=learning.params
            )
            learning.fitted_keys = keys
            learning.fitted_weight = weight
            self.n_fits += 1
            base = None
        # between refits the parameters, so the fitted equations and their cached
        # predictions, stay; only the per-configuration corrections move
        learning.model = om.learned_model(
            learning.prior,
            learning.params,
            obs,
            settings=self.settings,
            workload=workload,
            base=base,
        )
        learning.dirty = False
        return learning.model

    # --- what the snapshot carries ---------------------------------------------------------

    def job_perf(
        self, jobs: Iterable[Job], gpu_models: Iterable[str]
    ) -> dict[tuple[str, str], PerfModel]:
        """(job id, GPU model) -> the model a policy sees for that job."""
        gpu_models = tuple(gpu_models)
        out: dict[tuple[str, str], PerfModel] = {}
        # A job not measured yet gets what every such job of its workload, GPU model and
        # per-GPU batch gets (``prior``'s inputs; nothing here changes them): looked up
        # once a call, as a long queue asks it of every waiting job each round.
        unmeasured: dict[tuple[str, str, float], PerfModel | None] = {}
        has: dict[tuple[str, str], bool] = {}  # the catalog's answer, once a call
        for job in jobs:
            for gpu_model in gpu_models:
                pair = (job.workload, gpu_model)
                known = has.get(pair)
                if known is None:
                    known = has[pair] = self.catalog.has(job.workload, gpu_model)
                if not known:
                    # The truth cannot advance the job there: no GPU model to offer (a
                    # prior from another workload would size it for one, and the run stop).
                    continue
                learning = self._learning.get((job.job_id, gpu_model))
                if learning is not None:
                    model = learning.model
                    if learning.dirty or model is None:
                        model = self._refresh(learning, job.workload)
                    out[(job.job_id, gpu_model)] = model
                    continue
                seen = (job.workload, gpu_model, job.global_batch / max(job.requested_gpus, 1))
                if seen in unmeasured:
                    hit = unmeasured[seen]
                    if hit is not None:
                        out[(job.job_id, gpu_model)] = hit
                    continue
                unmeasured[seen] = None
                prior, label = self.prior(job, gpu_model)
                if prior is None:
                    continue
                # Jobs that start from the same prior share one model object, so the
                # round's prediction cache serves them all.
                key = (job.workload, gpu_model, id(prior), label)
                shared = self._priors.get(key)
                if shared is None:
                    # Measured: its workload's profile that knows the compute split, or
                    # (``hide_workloads=False``) the catalog's own model of it, which the
                    # live service uses as it is (``workload_profiles._starting_model``).
                    profile = self._profiles.get((job.workload, gpu_model))
                    own = profile is not None and prior is profile.model
                    shared = self._priors[key] = om.OnlinePerfModel(
                        prior=prior,
                        params=[0.0] * om.N_PARAMS,
                        workload=job.workload,
                        prior_measured=(own and profiles.knows_split(profile.fit.observations))
                        or label == _own_label(job.workload),
                    )
                out[(job.job_id, gpu_model)] = unmeasured[seen] = shared
        return out

    # --- profiles --------------------------------------------------------------------------

    def finish(self, job: Job) -> None:
        """Fold a finished job's measurements into its workload's profiles (``profiles.fold``:
        one fit over every folded job's measurements, each job's share bounded, refitted
        where the fold would matter)."""
        for gpu_model in sorted({g for (j, g) in self._learning if j == job.job_id}):
            learning = self._learning.pop((job.job_id, gpu_model))
            obs = learning.observations
            n_job = sum(o.weight for o in obs if o.iter_time_s is not None)
            if not obs or n_job <= 0:
                continue
            key = (job.workload, gpu_model)
            profile = self._profiles.get(key)
            # The job's own fit is the first fold's only where it saw every configuration
            # the job ran in (its last stretch may have been observed since).
            fitted = learning.params is not None and {o.key for o in obs} <= learning.fitted_keys
            fit = profiles.fold(
                profile.fit if profile is not None else None,
                learning.prior,
                obs,
                workload=job.workload,
                settings=self.settings,
                job_params=learning.params if fitted else None,
                # the catalog's own model (workloads not hidden) is measured, as live
                measured_prior=profile is None
                and not self.hide_workloads
                and self.catalog.has(job.workload, gpu_model),
            )
            self.n_fits += (profile is None and not fitted) or (
                profile is not None and fit.model is not profile.model
            )
            n_before, jobs = (0.0, 0) if profile is None else (profile.n_observations, profile.jobs)
            self._profiles[key] = _Profile(fit, n_before + n_job, jobs + 1)
        self._rng.pop(job.job_id, None)
