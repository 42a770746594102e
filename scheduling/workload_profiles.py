"""Online performance models in the service: each running job's observations, its learned
model, and the workload profiles that carry what one job learned to the next.

* ``record_observations`` screens a job's new measurements (``online_model.refusal_reason``:
  a refused one is logged with its reason and never enters a fit), pools them per
  configuration into ``JobSchedulingState.observations`` and refits the job's model
  (``online_params``, with the prior it was fitted against: ``fit_prior``, which gives an
  estimate from another workload the batch shape of the job's own draw).
* ``job_models`` rebuilds the learned models of the round's jobs for the snapshot, from the
  stored prior (``stored_prior``), so the round predicts what the fit did.
* ``fold_into_profile`` adds a finished job's measurements to the (workload, GPU model)
  profile's, with a bounded share, refits the profile over them all (``profiles.fold``)
  and stores the result as a new ``WorkloadProfile`` version.
* ``prior_for`` is where a job starts: the newest profile of its workload on that GPU model,
  else the catalog's model, else (a workload the catalog does not know on that GPU model)
  the catalog workload the job says it resembles, else the one nearest in parameter count
  where the job names one (``Job.param_count``, against the published sizes in
  ``data/perf/param_counts.csv``), else the first one, on it, which the job's own
  observations then reshape (``scheduling.perf_lookup`` is its one entry point).
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import JSONField, Min, Q
from django.db.models.expressions import RawSQL
from django.utils import timezone

from cluster.choices import JobState
from cluster.models import Job
from scheduling.core import gpu_estimates, online_fit, profiles
from scheduling.core import online_model as om
from scheduling.core.gpu_estimates import (
    NvmlGpu,
    catalog_spans,
    estimated_for,
    gpu_draw_range_w,
    light_work_span_or_estimate_w,
    nearest_catalog_gpu,
)
from scheduling.core.perf_models import (
    Catalog,
    FittedPerfModel,
    PowerParams,
    ThroughputParams,
    catalog_stand_in,
    gpu_from_dict,
    gpu_to_dict,
    model_to_dict,
    nearest_by_params,
    param_counts,
)
from scheduling.models import JobSchedulingState, WorkloadProfile

logger = logging.getLogger(__name__)

# Workload -> published parameter count (data/perf/param_counts.csv), read once.
PARAM_COUNTS = param_counts()
# ``prior_for``'s label of a prior that is not the (workload, GPU model)'s own: "<this>
# <catalog workload>@<catalog GPU model>".
ESTIMATED = "estimated from catalog"
# a resembled workload's profile on the job's GPU model, where the catalog has no model of it
ESTIMATED_FROM_PROFILE = "estimated from profile"


def model_to_params(model: FittedPerfModel) -> dict[str, Any]:
    return {"model": model_to_dict(model), "gpu": gpu_to_dict(model.gpu)}


def model_from_params(params: Mapping[str, Any]) -> FittedPerfModel:
    m = params["model"]
    return FittedPerfModel(
        workload=m["workload"],
        gpu=gpu_from_dict(m["gpu_model"], params["gpu"]),
        batch_sizes=tuple(int(b) for b in m["batch_sizes"]),
        throughput=ThroughputParams(**m["throughput"]),
        power=PowerParams(**m["power"]),
        errors=m.get("errors"),
        sources=m.get("sources"),
    )


def latest_profile(workload: str, gpu_model: str) -> WorkloadProfile | None:
    return (
        WorkloadProfile.objects.filter(workload=workload, gpu_model=gpu_model)
        .order_by("-version")
        .first()
    )


# (workload, GPU model) -> its newest profile (None: none), read ahead for many jobs
Profiles = Mapping[tuple[str, str], "WorkloadProfile | None"]


def latest_profiles(workloads: Iterable[str], gpu_models: Iterable[str]) -> dict:
    """``latest_profile`` of every pair of ``workloads`` and ``gpu_models``, in one query
    (``Profiles``: a pair without a profile maps to None)."""
    workloads, gpu_models = set(workloads) - {""}, set(gpu_models)
    out: dict[tuple[str, str], WorkloadProfile | None] = {
        (w, g): None for w in workloads for g in gpu_models
    }
    if out:
        for profile in (
            WorkloadProfile.objects.filter(workload__in=workloads, gpu_model__in=gpu_models)
            .order_by("workload", "gpu_model", "-version")
            .distinct("workload", "gpu_model")
        ):
            out[profile.workload, profile.gpu_model] = profile
    return out


def _latest(newest: Profiles | None, workload: str, gpu_model: str) -> WorkloadProfile | None:
    """``latest_profile``, from ``newest`` where it was read ahead."""
    if newest is not None and (workload, gpu_model) in newest:
        return newest[workload, gpu_model]
    return latest_profile(workload, gpu_model)


@dataclass(frozen=True)
class JobHints:
    """What a job's submitter said of an unprofiled workload, for its prior (``prior_for``):
    the catalog workload it ``resembles`` and its number of parameters (``Job.resembles``,
    ``Job.param_count``). One value, so that every lookup gets both."""

    resembles: str = ""
    param_count: int | None = None

    @classmethod
    def of(cls, job: Job) -> JobHints:
        return cls(job.resembles or "", job.param_count)


NO_HINTS = JobHints()


def prior_for(
    workload: str,
    gpu_model: str,
    *,
    catalog: Catalog,
    nvml: NvmlGpu | None = None,
    hints: JobHints = NO_HINTS,
) -> tuple[FittedPerfModel, str] | None:
    """(prior model, where it came from) for a job of ``workload`` on ``gpu_model``: the
    newest profile; else the catalog's model; else the model on that GPU model of the
    catalog workload the job says it resembles (``hints``), or that workload's newest
    profile on it, else of the one nearest in
    the job's parameter count (``hints``) among those with a published size, else of the first
    catalog workload on it; else, for a GPU model the catalog does not know, the workload's model
    (or the resembled one's, or the first one) on the catalog GPU nearest to what NVML
    reports (``nvml``). None: nothing to start from. Every case after the catalog's is an
    estimate that the job's own observations then correct, and so is a profile that does
    not yet tell the compute split (``_prior_and_mark``)."""
    found = _prior_and_mark(workload, gpu_model, catalog=catalog, nvml=nvml, hints=hints)
    return None if found is None else found[:2]


def _prior_and_mark(
    workload: str,
    gpu_model: str,
    *,
    catalog: Catalog,
    nvml: NvmlGpu | None,
    hints: JobHints,
    newest: Profiles | None = None,
) -> tuple[FittedPerfModel, str, bool] | None:
    """``prior_for``'s (prior, source), and whether the prior is measured, not a guess: the
    catalog's own model of the workload, or a profile whose measurements tell the compute
    split (``profiles.knows_split``)."""
    profile = _latest(newest, workload, gpu_model)
    if profile is not None:
        # the split from the stored measurements' batches alone: the fit is not rebuilt
        stored = (profile.params.get("fit") or {}).get("observations", ())
        timed = (d["local_batch"] for d in stored if d.get("iter_time_s") is not None)
        measured = profiles.batches_tell_split(timed)
        return model_from_params(profile.params), f"profile v{profile.version}", measured
    found = _unprofiled_prior(
        workload, gpu_model, catalog=catalog, nvml=nvml, hints=hints, newest=newest
    )
    if found is None:
        return None
    return *found, found[1] == catalog_source(workload, gpu_model)


def catalog_source(workload: str, gpu_model: str) -> str:
    """The prior source that names the catalog's own model of ``workload`` on
    ``gpu_model`` (measured, not an estimate)."""
    return f"catalog {workload}@{gpu_model}"


def _unprofiled_prior(
    workload: str,
    gpu_model: str,
    *,
    catalog: Catalog,
    nvml: NvmlGpu | None,
    hints: JobHints,
    newest: Profiles | None = None,
) -> tuple[FittedPerfModel, str] | None:
    """``prior_for`` where the workload has no profile on ``gpu_model``: the catalog's model,
    else the resembled workload's catalog model on it, else its profile on it, else a
    stand-in (see ``prior_for``)."""
    # Named by what they were looked up as: a catalog alias (imagenet on the A100 is
    # resnet50's model) is the workload's own model, measured, not an estimate.
    if catalog.has(workload, gpu_model):
        return catalog.get(workload, gpu_model), catalog_source(workload, gpu_model)
    resembles, param_count = hints.resembles, hints.param_count
    if resembles and catalog.has(resembles, gpu_model):
        return catalog.get(resembles, gpu_model), f"{ESTIMATED} {resembles}@{gpu_model}"
    if resembles:
        # What jobs of the resembled workload taught on this GPU model beats its catalog
        # model carried from another GPU (a live probe: a job like resnet50 on an L40S
        # started from the A100 catalog model beside a learned resnet50@L40S profile).
        kin = _latest(newest, resembles, gpu_model)
        if kin is not None:
            label = f"{ESTIMATED_FROM_PROFILE} {resembles}@{gpu_model} v{kin.version}"
            return model_from_params(kin.params), label
    # the rest of the rule the simulated agent runs such a job by
    base = catalog_stand_in(catalog, workload, gpu_model, param_count=param_count)
    if base is not None:
        return base, f"{ESTIMATED} {base.workload}@{gpu_model}"
    if nvml is None or gpu_model in catalog.gpus:
        return None
    near = nearest_catalog_gpu(catalog, nvml)
    if near is None:
        return None
    if catalog.has(workload, near):
        base, name = catalog.get(workload, near), workload
    elif resembles and catalog.has(resembles, near):
        base, name = catalog.get(resembles, near), resembles
    else:
        on_near = [m for m in catalog.models() if m.gpu_model == near]
        by_size = nearest_by_params([m.workload for m in on_near], param_count, PARAM_COUNTS)
        base = next((m for m in on_near if m.workload == by_size), on_near[0])
        name = base.workload
    return estimated_for(base, nvml), f"{ESTIMATED} {name}@{near}"


def estimated_from_another_workload(workload: str, source: str) -> bool:
    """True where ``source`` (a ``prior_for`` label) says a job of ``workload`` starts from
    another workload's catalog model: its fixed / per-sample split is then a guess. False
    for the workload's own catalog model or profile, and for its own model carried from
    another GPU model (its shape, only the GPU differs)."""
    for prefix in (ESTIMATED, ESTIMATED_FROM_PROFILE):
        if source.startswith(f"{prefix} "):
            return source.rsplit("@", 1)[0] != f"{prefix} {workload}"
    return False


# A GPU model's idle draw as measured: this quantile of its GPUs' samples at 0 % utilisation
# over the last IDLE_WINDOW_S, once there are IDLE_MIN_SAMPLES of them. A low quantile: a
# GPU left with a job's context open idles with its clocks up (an H100: 117-126 W against
# 70-72 W at rest, data/device/h100_2026-11-26), and what an unused GPU draws is the rest.
IDLE_QUANTILE = 0.1
IDLE_WINDOW_S = 3600.0
IDLE_MIN_SAMPLES = 30


def measured_idle_w(gpu_ids: Iterable[int], *, now: datetime) -> float | None:
    """The idle draw of one of ``gpu_ids`` (GPUs of one model) as its NVML samples show it
    (``IDLE_QUANTILE`` of the samples at 0 % utilisation in the last ``IDLE_WINDOW_S``);
    None with fewer than ``IDLE_MIN_SAMPLES``."""
    from telemetry.models import GpuSample

    ids = list(gpu_ids)
    if not ids:
        return None
    table = connection.ops.quote_name(GpuSample._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT percentile_cont(%s) WITHIN GROUP (ORDER BY power_w), count(*) "  # noqa: S608
            f"FROM {table} WHERE gpu_id = ANY(%s) AND ts > %s AND ts <= %s AND util_pct = 0 "
            "AND power_w > 0",
            [IDLE_QUANTILE, ids, now - timedelta(seconds=IDLE_WINDOW_S), now],
        )
        value, count = cursor.fetchone()
    if count < IDLE_MIN_SAMPLES or value is None or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def uncatalogued_idle_w(
    catalog: Catalog, gpus: Iterable[Any], nvml: Mapping[str, NvmlGpu], *, now: datetime
) -> dict[str, float]:
    """GPU model -> idle draw of one GPU, for the models of ``gpus`` (``Gpu`` rows) that the
    catalog has no model on, which it would price at 0 W (``Snapshot.idle_power_w``): as
    measured (``measured_idle_w``), else the idle of the nearest catalog GPU carried over
    with the prior (``gpu_draw_range_w``: an H100 from the A100, 50 W x 700/400 W).
    ``nvml``: ``nvml_gpus`` of ``gpus``."""
    rows = list(gpus)
    out: dict[str, float] = {}
    for model in sorted({g.model for g in rows} - set(catalog.gpu_models())):
        idle_w = measured_idle_w([g.pk for g in rows if g.model == model], now=now)
        if idle_w is None:
            span = gpu_draw_range_w(catalog, model, nvml.get(model))
            idle_w = None if span is None else span[0]
        if idle_w is not None:
            out[model] = idle_w
    return out


def fit_prior(
    workload: str,
    prior: FittedPerfModel,
    source: str,
    observations: Iterable[om.Observation],
    *,
    catalog: Catalog,
    nvml: NvmlGpu | None = None,
    known: Mapping[str, Sequence[float]] | None = None,
    draws: MeasuredDraws | None = None,
) -> FittedPerfModel:
    """The model a job's ``observations`` are fitted against, given ``prior_for``'s
    ``(prior, source)``: the prior itself, except where it is another workload's catalog
    model (``estimated_from_another_workload``). Then its compute time's fixed / per-sample
    split and its draw's batch shape come from the job's own draw at the default limit and
    top clock (``online_model.draw_shaped_prior``, the kept variant of the benchmark: the
    draw's split alone, with its shape), read against the GPU model's idle and busy maximum
    (``gpu_draw_range_w``): a job that draws idle power waits on its input, and its time is
    flat in batch. Where enough other workloads' draws were measured on the GPU model
    (``known``, by default ``measured_on_gpu``: its catalog models and profiles;
    ``online_model.measured_draw_span_w``), the least of them is the floor the draw's batch
    shape starts from and the most the busy maximum: light work draws more than idle.
    Nothing changes at the batch it was measured at; without such a draw the prior is
    returned unchanged.

    This is the one place the shaping happens: ``record_observations`` stores its result as
    the fit's prior, and every rebuild reads that back (``stored_prior``), so the round,
    the refit and the first profile version cannot disagree, and a catalog that changes
    later does not move an earlier fit's prior. ``draws``: where a round folds many jobs,
    what ``measured_on_gpu`` reads, read once a GPU model for all of them."""
    if not estimated_from_another_workload(workload, source):
        return prior
    span = gpu_draw_range_w(catalog, prior.gpu_model, nvml)
    if span is None:
        return prior
    idle_w, busy_max_w = span
    observations = list(observations)
    if known is None:
        # Only for a job with a draw to read (``draw_busy_fraction``): the query reads every
        # other workload's newest profile on the GPU model.
        if not any(
            o.power_w is not None and om.at_default_power(o, prior.gpu) for o in observations
        ):
            return prior
        draws = draws or MeasuredDraws(catalog)
        known = draws.on(prior.gpu_model, exclude=workload)
    # Draws measured on this GPU model by enough other workloads: the least says where light
    # work sits (above idle, with the clocks up), the most is the busy maximum.
    # With too few, no floor; or, where ``gpu_estimates.ESTIMATE_FLOOR`` is on (off: measured,
    # not kept), a floor estimated from the catalog's GPU models, marked in the prior's
    # sources (``light_work_span_or_estimate_w``).
    references = catalog_spans(catalog, exclude=workload) if gpu_estimates.ESTIMATE_FLOOR else []
    job_draws = (
        [
            o.power_w
            for o in observations
            if o.power_w is not None and o.n_gpus == 1 and om.at_default_power(o, prior.gpu)
        ]
        if references and gpu_estimates.ESTIMATE_JOB_CAP
        else ()
    )
    floor_w, busy_max_w, estimated = light_work_span_or_estimate_w(
        idle_w, busy_max_w, prior.gpu.power_limit_max_w, known, references, job_draws=job_draws
    )
    return om.draw_shaped_prior(
        prior,
        observations,
        idle_w=idle_w,
        busy_max_w=busy_max_w,
        draw_shape=True,
        floor_w=floor_w,
        floor_source=estimated,
    )


# The power_w of a profile's stored fit observations (``profile_params``) on one GPU at its
# default limit and top clock (``online_model.at_default_power``, against the profile's
# own GPU spec): a jsonpath over ``params``.
_ONE_GPU_DEFAULT_DRAWS = """jsonb_path_query_array(
    "scheduling_workloadprofile"."params" -> 'fit' -> 'observations',
    '$[*] ? (@.n_gpus == 1 && @.power_w > 0
             && (@.power_limit_w == null || @.power_limit_w >= $lim)
             && (@.sm_clock_mhz == null || @.sm_clock_mhz >= $clk)).power_w',
    jsonb_build_object(
        'lim', "scheduling_workloadprofile"."params" -> 'gpu' -> 'power_limit_max_w',
        'clk', "scheduling_workloadprofile"."params" -> 'gpu' -> 'dvfs' -> 'max_clock_mhz'))"""


def measured_on_gpu(
    gpu_model: str, *, catalog: Catalog, exclude: str = ""
) -> dict[str, list[float]]:
    """Workload (but ``exclude``) -> its draws of one GPU measured on ``gpu_model`` at the
    default limit and top clock: the catalog's models on it (at their batch sizes) and the
    NVML draws the newest profile of each workload was fitted to (on several GPUs the draw
    counts the all-reduce's waiting; one GPU's draws only). What ``fit_prior`` reads a
    job's light-work floor from (``online_model.measured_draw_span_w``).

    A workload is all the names the catalog's aliases make one (``Catalog.same_workload``),
    keyed by the first of them: an imagenet job's floor pool counted resnet50's profile as
    another workload's draws (its own network's), and a third workload's pool counted the
    two names as two workloads."""
    return MeasuredDraws(catalog).on(gpu_model, exclude=exclude)


def _measured_on(gpu_model: str, *, catalog: Catalog) -> dict[str, list[float]]:
    """``measured_on_gpu`` of ``gpu_model``, every workload's, in one query."""
    out: dict[str, list[float]] = {}
    for m in catalog.models():
        if m.gpu_model == gpu_model:
            key = min(catalog.same_workload(m.workload))
            out.setdefault(key, []).extend(om.model_draws_w(m))
    # The draws are picked out by PostgreSQL (``_ONE_GPU_DEFAULT_DRAWS``), not read with each
    # newest profile's models and observations: this runs inside the round's transaction.
    newest = (
        WorkloadProfile.objects.filter(gpu_model=gpu_model)
        .order_by("workload", "-version")
        .distinct("workload")
        .annotate(draws=RawSQL(_ONE_GPU_DEFAULT_DRAWS, (), output_field=JSONField()))
        .values_list("workload", "draws")
    )
    for workload, draws in newest:
        kept = [float(d) for d in draws or () if isinstance(d, int | float)]
        if kept:
            out.setdefault(min(catalog.same_workload(workload)), []).extend(kept)
    return out


def _without(
    known: Mapping[str, list[float]], exclude: str, catalog: Catalog
) -> dict[str, list[float]]:
    """``known`` but the workload ``exclude`` is (all its names are one key: the least of
    them, ``Catalog.same_workload``, whose names no other workload's share)."""
    if not exclude:
        return {k: list(v) for k, v in known.items()}
    dropped = min(catalog.same_workload(exclude))
    return {k: list(v) for k, v in known.items() if k != dropped}


class MeasuredDraws:
    """``measured_on_gpu`` for the jobs a round folds: each GPU model's draws read once, at
    the first job that needs them (each job of an unknown workload with a draw at the
    default limit read them with a query of its own, every round: an N+1 of the fold).
    The profiles it reads are not written while a round folds."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        self._by_gpu: dict[str, dict[str, list[float]]] = {}

    def on(self, gpu_model: str, *, exclude: str = "") -> dict[str, list[float]]:
        if gpu_model not in self._by_gpu:
            self._by_gpu[gpu_model] = _measured_on(gpu_model, catalog=self._catalog)
        return _without(self._by_gpu[gpu_model], exclude, self._catalog)


def stored_prior(entry: Mapping[str, Any]) -> FittedPerfModel:
    """The prior a job's stored fit (one GPU model's ``online_params`` entry) was fitted
    against, as ``fit_prior`` built it: every rebuild of the job's model starts here."""
    return model_from_params(entry["prior_params"])


def _stored(state: JobSchedulingState, gpu_model: str) -> list[om.Observation]:
    return [om.observation_from_dict(d) for d in (state.observations or {}).get(gpu_model, [])]


def screen(job_id: int, observations: Iterable[om.Observation], *, gpu=None) -> list:
    """The observations that may enter a fit; each refused one is logged with its reason."""
    accepted = []
    for obs in observations:
        reason = om.refusal_reason(obs, gpu=gpu)
        if reason is None:
            accepted.append(obs)
        else:
            logger.warning("job %s: observation refused (%s): %s", job_id, reason, obs)
    return accepted


def record_observations(
    job: Job,
    state: JobSchedulingState,
    *,
    gpu_model: str,
    observations: Iterable[om.Observation],
    until: datetime,
    catalog: Catalog,
    nvml: NvmlGpu | None = None,
) -> om.OnlinePerfModel | None:
    """Fold new measurements of ``job`` on ``gpu_model`` into its stored observations and
    refit its model; ``observed_until`` moves to ``until`` either way (refused measurements
    are not read again). ``nvml``: what NVML reports of the GPU model, for one the catalog
    lacks. Returns the refitted model (None: no prior for the GPU model)."""
    writes = StateWrites()
    model = refit_observations(
        job, state, gpu_model=gpu_model, observations=observations, until=until,
        catalog=catalog, nvml=nvml, writes=writes,
    )  # fmt: skip
    writes.save()
    return model


class StateWrites:
    """What ``refit_observations`` stores of each job's state, written together by
    ``save`` (one statement for the states refitted, one for those only read on): a round
    wrote each refitted model with its own query (800 running jobs: 800 queries)."""

    UNTIL = ("observed_until",)
    FIT = ("observations", "online_params", "observed_until")

    def __init__(self) -> None:
        self._fields: dict[int, dict[str, Any]] = {}  # state pk -> field -> value

    def add(self, pk: int, **values: Any) -> None:
        # (a job folded twice: its later values win, field by field, as its writes did)
        self._fields.setdefault(pk, {}).update(values)

    def save(self) -> None:
        groups: dict[tuple[str, ...], list[JobSchedulingState]] = {}
        for pk, values in self._fields.items():
            fields = self.FIT if len(values) > 1 else self.UNTIL
            groups.setdefault(fields, []).append(JobSchedulingState(pk=pk, **values))
        for fields, rows in groups.items():
            JobSchedulingState.objects.bulk_update(rows, fields)
        self._fields.clear()


def refit_observations(
    job: Job,
    state: JobSchedulingState,
    *,
    gpu_model: str,
    observations: Iterable[om.Observation],
    until: datetime,
    catalog: Catalog,
    nvml: NvmlGpu | None = None,
    writes: StateWrites,
    newest: Profiles | None = None,
    draws: MeasuredDraws | None = None,
) -> om.OnlinePerfModel | None:
    """``record_observations``, its write left to ``writes`` (``StateWrites.save``), its
    profile lookups to ``newest`` where they were read ahead (``latest_profiles``) and
    its GPU model's measured draws to ``draws`` (``fit_prior``)."""
    found = _prior_and_mark(
        job.workload, gpu_model, catalog=catalog, nvml=nvml, hints=JobHints.of(job),
        newest=newest,
    )  # fmt: skip
    if found is None:
        writes.add(state.pk, observed_until=until)
        return None
    prior, source, measured = found
    accepted = screen(job.pk, observations, gpu=prior.gpu)
    pooled = om.pooled_observations(_stored(state, gpu_model) + accepted, prior.gpu.gpus_per_node)
    stored_obs = dict(state.observations or {})
    stored_params = dict(state.online_params or {})
    model = None
    if pooled:
        prior = fit_prior(
            job.workload, prior, source, pooled, catalog=catalog, nvml=nvml, draws=draws
        )
        # Warm start from the last fit against the same prior: a round's refit is then a few
        # steps (~0.02 s) instead of a cold fit (~0.3 s). A draw-shaped prior moves as reports
        # come in; the fit still ends near where a cold one does (resnet50-like job on an
        # A100 whose first default-limit draw arrives after capped ones: within 0.7% at 4x
        # the batch, on one GPU and two).
        last = stored_params.get(gpu_model)
        start = last["params"] if last and last.get("prior") == source else None
        model = online_fit.fit_online(prior, pooled, workload=job.workload, start=start)
        stored_obs[gpu_model] = [om.observation_to_dict(o) for o in pooled]
        stored_params[gpu_model] = {
            "params": list(model.params),
            "prior": source,
            "prior_measured": measured,
            "prior_params": model_to_params(prior),
            # the rule the moves were fitted under (``learned_models`` refits another's)
            "network_level": om.NETWORK_LEVEL,
        }
    writes.add(state.pk, observations=stored_obs, online_params=stored_params, observed_until=until)
    state.observations, state.online_params, state.observed_until = (
        stored_obs,
        stored_params,
        until,
    )
    return model


def learned_models(state: JobSchedulingState, workload: str) -> dict[str, om.OnlinePerfModel]:
    """GPU model -> the job's learned model, rebuilt from what ``state`` stores. A prior
    that is the catalog's own model of the workload, or a profile that knows the compute
    split, is measured: before the job's first iteration time (only NVML draws stored) it is
    not a guess, as it is not for a job with nothing stored (``_starting_model``). The mark
    is stored with the fit (``prior_measured``); a fit stored before it was names only its
    source, which tells the catalog's own model and not a profile's split. A fit stored
    under another rule for the all-reduce's level (``network_level``; none stored: the
    rule before 6 Dec 2026, 1) means other equations with the same moves: it is refitted
    here from its stored observations, warm-started from its moves, until the job's next
    observations store a fit under the current rule (a waiting or paused job's fit, or its
    fit on a GPU model it no longer runs on, would otherwise be read under the new rule)."""
    out = {}
    for gpu_model, entry in (state.online_params or {}).items():
        prior = stored_prior(entry)
        observations = _stored(state, gpu_model)
        params = entry["params"]
        if entry.get("network_level", 1.0) != om.NETWORK_LEVEL and observations:
            params = online_fit.fit_params(prior, observations, start=params)
        out[gpu_model] = om.learned_model(
            prior,
            params,
            observations,
            workload=workload,
            prior_measured=entry.get(
                "prior_measured", entry.get("prior") == catalog_source(workload, gpu_model)
            ),
        )
    return out


def job_models(
    states: Iterable[JobSchedulingState], workloads: Mapping[int, str]
) -> dict[tuple[str, str], om.OnlinePerfModel]:
    """(core job id, GPU model) -> learned model, for the snapshot."""
    out = {}
    for state in states:
        for gpu_model, model in learned_models(state, workloads[state.job_id]).items():
            out[(str(state.job_id), gpu_model)] = model
    return out


def nvml_gpus(gpus: Iterable[Any]) -> dict[str, NvmlGpu]:
    """GPU model -> what NVML reported for it (the first ``Gpu`` row of each model)."""
    out: dict[str, NvmlGpu] = {}
    for g in gpus:
        if g.model not in out:
            out[g.model] = NvmlGpu(
                model=g.model,
                min_power_limit_w=float(g.min_power_limit_w),
                max_power_limit_w=float(g.max_power_limit_w),
                default_power_limit_w=float(g.default_power_limit_w),
                clocks_mhz=tuple(g.supported_sm_clocks_mhz or ()),
            )
    return out


def prior_models(
    jobs: Iterable[Job],
    gpus: Mapping[str, NvmlGpu],
    *,
    catalog: Catalog,
    skip: Iterable[tuple[str, str]] = (),
) -> dict[tuple[str, str], om.OnlinePerfModel]:
    """(core job id, GPU model) -> the job's starting model where it is not simply the
    catalog's: a workload profile earlier jobs taught, or an estimate for a pair the catalog
    lacks (``estimated`` until the job reports, except a profile whose measurements tell the
    compute split: ``profiles.knows_split``). ``skip``: pairs with a learned model."""
    skip = set(skip)
    # One model per (workload, hints, GPU model), None where the catalog's own serves:
    # jobs that start from the same prior share the object, since a round's prediction
    # cache and PowerFlow's shared hulls are keyed by the model, so a queue of one
    # workload's jobs is predicted once, not job by job.
    found: dict[tuple, om.OnlinePerfModel | None] = {}
    out = {}
    for job in jobs:
        hints = JobHints.of(job)
        for gpu_model, nvml in gpus.items():
            if (str(job.pk), gpu_model) in skip:
                continue
            key = (job.workload, hints, gpu_model)
            if key not in found:
                found[key] = _starting_model(job.workload, gpu_model, catalog, nvml, hints)
            model = found[key]
            if model is None:
                continue
            out[(str(job.pk), gpu_model)] = model
    return out


def _starting_model(
    workload: str, gpu_model: str, catalog: Catalog, nvml: NvmlGpu, hints: JobHints
) -> om.OnlinePerfModel | None:
    """``prior_for``'s prior as a model with nothing of the job's own (one profile query),
    measured where it is a profile that knows the compute split; None where it is the
    catalog's own model or there is none."""
    found = _prior_and_mark(workload, gpu_model, catalog=catalog, nvml=nvml, hints=hints)
    if found is None or found[1] == catalog_source(workload, gpu_model):
        return None
    prior, _, measured = found
    return om.OnlinePerfModel(
        prior=prior, params=[0.0] * om.N_PARAMS, workload=workload, prior_measured=measured
    )


def _median_error(model, observations: list[om.Observation], attr: str) -> float | None:
    errs = []
    for obs in observations:
        value = getattr(obs, attr)
        if value is not None:
            cfg = obs.config()
            pred = model.iter_time_s(cfg) if attr == "iter_time_s" else model.power_w(cfg)
            errs.append(abs(pred / value - 1.0))
    return statistics.median(errs) if errs else None


def fold_into_profile(job: Job, *, now: datetime) -> list[WorkloadProfile]:
    """Fold a finished job's observations into its workload's profiles (one new version per
    GPU model it ran on). Idempotent: a job is folded once (``profile_version``)."""
    created = []
    with transaction.atomic():
        state = JobSchedulingState.objects.select_for_update().filter(pk=job.pk).first()
        if state is None or state.profile_version is not None or not state.online_params:
            return []
        for gpu_model in sorted(state.online_params):
            obs = _stored(state, gpu_model)
            if not obs:
                continue
            profile = _fold_one(job, state, gpu_model, obs, now=now)
            if profile is not None:
                created.append(profile)
        version = max((p.version for p in created), default=0)
        JobSchedulingState.objects.filter(pk=job.pk, profile_version__isnull=True).update(
            profile_version=version
        )
    return created


def profile_fit(profile: WorkloadProfile) -> profiles.ProfileFit:
    """What a stored profile version was fitted from (``profiles.ProfileFit``). A version
    written before profiles kept their measurements holds only its model
    (``profiles.unpooled``)."""
    model = model_from_params(profile.params)
    fit = profile.params.get("fit")
    if fit is None:
        return profiles.unpooled(model, profile.n_observations)
    return profiles.ProfileFit(
        base=model_from_params(fit["base"]),
        observations=tuple(om.observation_from_dict(d) for d in fit["observations"]),
        params=tuple(float(v) for v in fit["params"]),
        model=model,
        fitted_weight=float(fit.get("fitted_weight", 0.0)),  # absent before refits were spaced
    )


def profile_params(fit: profiles.ProfileFit) -> dict[str, Any]:
    """A profile version's ``params``: its model, and what it was fitted from."""
    return {
        **model_to_params(fit.model),
        "fit": {
            "base": model_to_params(fit.base),
            "params": list(fit.params),
            "observations": [om.observation_to_dict(o) for o in fit.observations],
            "fitted_weight": fit.fitted_weight,
        },
    }


def _fold_one(job, state, gpu_model, obs, *, now) -> WorkloadProfile | None:
    n_job = sum(o.weight for o in obs if o.iter_time_s is not None)
    latest = (
        WorkloadProfile.objects.select_for_update()
        .filter(workload=job.workload, gpu_model=gpu_model)
        .order_by("-version")
        .first()
    )
    entry = state.online_params[gpu_model]
    if latest is None:
        before, n_before, label = None, 0.0, entry["prior"]
        t_err, p_err, jobs, version = None, None, 1, 1
    else:
        # The job's measurements join the profile's as it is now (another job may have
        # moved it since this one started), with a bounded share.
        before, n_before, label = profile_fit(latest), latest.n_observations, latest.prior
        t_err = _median_error(before.model, obs, "iter_time_s")
        p_err = _median_error(before.model, obs, "power_w")
        jobs, version = latest.jobs + 1, latest.version + 1
    fit = profiles.fold(
        before,
        stored_prior(entry),
        obs,
        workload=job.workload,
        job_params=entry["params"],
        # the catalog's own model of the workload is measured: the first job joins it
        measured_prior=before is None and entry["prior"] == catalog_source(job.workload, gpu_model),
    )
    if fit.job_scale < 1.0:
        logger.info(
            "job %s: its share of profile %s@%s cut to %.3g of its weight cap: it would have "
            "moved predictions the profile had measured by more than %gx",
            job.pk,
            job.workload,
            gpu_model,
            fit.job_scale,
            profiles.MAX_JOB_MOVE,
        )
    try:
        with transaction.atomic():
            if latest is not None and "fit" in latest.params:
                # The measurements move to the newest version; older ones keep their model.
                WorkloadProfile.objects.filter(pk=latest.pk).update(
                    params={k: v for k, v in latest.params.items() if k != "fit"}
                )
            return WorkloadProfile.objects.create(
                workload=job.workload,
                gpu_model=gpu_model,
                version=version,
                prior=label,
                params=profile_params(fit),
                n_observations=n_before + n_job,
                jobs=jobs,
                iter_time_error=t_err,
                power_error=p_err,
                last_job=job,
                created_at=now,
            )
    except IntegrityError:
        # A first version written by a concurrent fold (nothing to lock before it existed):
        # that job's profile stands; this one is not folded twice by retrying blindly.
        logger.warning(
            "job %s: profile %s@%s written concurrently", job.pk, job.workload, gpu_model
        )
        return None


def fold_finished_jobs(*, now: datetime, settled_s: float = 0.0) -> int:
    """Fold every job that finished at least ``settled_s`` ago, has observations and is not
    yet in a profile."""
    done = [JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED]
    # Jobs no round ever saw have no state row (a LEFT JOIN's NULL would pass the other
    # filters): they are left out here, not loaded and skipped every round.
    pending = Job.objects.filter(
        state__in=done, scheduling__isnull=False, scheduling__profile_version__isnull=True
    ).exclude(scheduling__online_params={})
    if settled_s > 0:
        pending = pending.filter(finished_at__lte=now - timedelta(seconds=settled_s))
    return sum(1 for job in list(pending) if fold_into_profile(job, now=now))


# --- a GPU model re-spelled --------------------------------------------------------------


def _respelled(by_model: Mapping[str, Any], old: str, new: str, *, pool: bool) -> dict:
    """``by_model`` (GPU model -> a job's fits on it) with ``old``'s entry under ``new``:
    where ``new`` has one already, observations are pooled (``pool``: lists, the new
    spelling's first) and otherwise the new spelling's entry stands."""
    out = {k: v for k, v in by_model.items() if k != old}
    if old in by_model:
        if new not in out:
            out[new] = by_model[old]
        elif pool:
            out[new] = out[new] + by_model[old]
    return out


def _renamed(params: Any, field: str, old: str, new: str) -> Any:
    """``params`` (a stored model: ``model_to_params``'s, a profile's with its ``fit``'s
    base) with its model's ``field`` (``gpu_model``, ``workload``) ``new`` where it names
    ``old``; anything else as it is. A profile or fit moved to another spelling keeps what
    it learned, under the key it is stored under now."""
    if not isinstance(params, Mapping):
        return params
    out = dict(params)
    model = out.get("model")
    if isinstance(model, Mapping) and model.get(field) == old:
        out["model"] = {**model, field: new}
    fit = out.get("fit")
    if isinstance(fit, Mapping) and "base" in fit:
        out["fit"] = {**fit, "base": _renamed(fit["base"], field, old, new)}
    return out


def _named(params: Any, old: str, new: str) -> Any:
    """``params`` with its model's GPU model ``new`` where it names ``old``."""
    return _renamed(params, "gpu_model", old, new)


def _fits_named(online_params: Mapping[str, Any], old: str, new: str) -> dict:
    """A job's per-model fits with the prior under ``new`` naming it (``_named``)."""
    out = dict(online_params)
    entry = out.get(new)
    if isinstance(entry, Mapping) and "prior_params" in entry:
        out[new] = {**entry, "prior_params": _named(entry["prior_params"], old, new)}
    return out


def follow_respelled_gpu_model(old: str, new: str) -> tuple[int, int]:
    """What was learned under GPU model key ``old`` moves to ``new``, the same model spelled
    as the catalog (or the cluster) spells it, once no GPU in service is stored as ``old``
    (telemetry's registration calls it, in its transaction): a workload's profile versions,
    unless the workload has versions under ``new`` already (those are its history then, and
    the old ones stay as they were), and every job's per-model fits (its observations
    pooled, ``new``'s fitted parameters kept where both exist). Left under ``old``, the
    rounds looked ``new`` up, found nothing learned, and started every job of the workload
    from the catalog's model again; a finished job not yet folded began a profile of its
    own under ``old``. The rules of the migration that moved them once (scheduling 0011).
    What they store names ``new`` too (``_named``: a profile's model and its fit's base, a
    fit's prior; scheduling 0013 renamed those that moved before). Returns (profile
    versions moved, job states rewritten)."""
    moved = 0
    for workload in sorted(
        set(WorkloadProfile.objects.filter(gpu_model=old).values_list("workload", flat=True))
    ):
        if WorkloadProfile.objects.filter(workload=workload, gpu_model=new).exists():
            continue
        # Its params name the GPU model too (the model read back from them is that GPU
        # model's): moved with the row, they named the old key on a row of the new.
        for profile in WorkloadProfile.objects.select_for_update().filter(
            workload=workload, gpu_model=old
        ):
            profile.gpu_model = new
            profile.params = _named(profile.params, old, new)
            profile.save(update_fields=["gpu_model", "params"])
            moved += 1
    states = (
        JobSchedulingState.objects.select_for_update()
        .filter(Q(observations__has_key=old) | Q(online_params__has_key=old))
        .order_by("pk")
    )
    rewritten = 0
    for state in states:
        state.observations = _respelled(state.observations or {}, old, new, pool=True)
        state.online_params = _fits_named(
            _respelled(state.online_params or {}, old, new, pool=False), old, new
        )
        state.save(update_fields=["observations", "online_params"])
        rewritten += 1
    return moved, rewritten


# --- a workload learned under two spellings ----------------------------------------------


def merge_respelled_profiles() -> list[WorkloadProfile]:
    """Workload profiles learned under two forms of one name (``MyNet`` and fullwidth
    ``MyNet``, stored before submits folded names) on the same GPU model become one: the
    name's first learned spelling, the one its jobs take (``cluster.workloads.catalog_name``).
    The set with fewer measurements joins the other as a job is folded (``profiles.fold``,
    with a bounded share) into a new version of the first spelling counting both sets'
    measurements and jobs; the other spelling's newest row is marked (``MERGED_INTO``) and
    otherwise kept as it was. Where only the other spelling learned on a GPU model, scheduling
    0015 renamed its versions. The fold is here, not in that migration, because a migration
    runs for good and may hold no live code (the fitting code moves, issue 12):
    ``manage.py merge_workload_spellings`` runs it once after ``migrate``; a pair merged
    before is skipped. Returns the versions created."""
    names = (
        WorkloadProfile.objects.values("workload", "workload_key")
        .annotate(first_at=Min("created_at"))
        .order_by("first_at", "workload")
    )
    spellings: dict[str, list[str]] = {}
    for row in names:
        spellings.setdefault(row["workload_key"], []).append(row["workload"])
    created = []
    for kept, *others in spellings.values():
        for other in others:
            gpu_models = set(
                WorkloadProfile.objects.filter(workload=other).values_list("gpu_model", flat=True)
            )
            for gpu_model in sorted(gpu_models):
                with transaction.atomic():
                    merged = _merge_spelling(other, kept, gpu_model)
                if merged is not None:
                    created.append(merged)
    return created


# The key of the params of a spelling's newest version once merged (``merge_respelled_profiles``):
# the version of the first spelling it was merged into.
MERGED_INTO = "merged_into"


def _merge_spelling(other: str, kept: str, gpu_model: str) -> WorkloadProfile | None:
    def newest(name):
        return (
            WorkloadProfile.objects.select_for_update()
            .filter(workload=name, gpu_model=gpu_model)
            .order_by("-version")
            .first()
        )

    mine, theirs = newest(kept), newest(other)
    if mine is None or theirs is None or MERGED_INTO in (theirs.params or {}):
        return None
    # The set with more measurements is the profile; the other joins it as a job would.
    larger, smaller = (
        (theirs, mine) if theirs.n_observations > mine.n_observations else (mine, theirs)
    )
    try:
        held, joining = profile_fit(larger), profile_fit(smaller)
        previous = profile_fit(mine).model
    except (KeyError, TypeError, ValueError) as exc:
        logger.warning(
            "workload profile %s@%s not merged into %s: a stored model cannot be read (%r)",
            other, gpu_model, kept, exc,
        )  # fmt: skip
        return None
    if not joining.observations:
        logger.warning(
            "workload profile %s@%s not merged into %s: %s v%d holds its model alone, no "
            "measurements to fold",
            other, gpu_model, kept, smaller.workload, smaller.version,
        )  # fmt: skip
        return None
    fit = profiles.fold(held, joining.base, joining.observations, workload=kept)
    # (as a fold records: the previous version's error where the joining set measured)
    measured = list((held if theirs is larger else joining).observations)
    if "fit" in mine.params:
        # The measurements move to the newest version; older ones keep their model.
        WorkloadProfile.objects.filter(pk=mine.pk).update(
            params={k: v for k, v in mine.params.items() if k != "fit"}
        )
    last = max((mine, theirs), key=lambda p: (p.created_at, p.pk))
    merged = WorkloadProfile.objects.create(
        workload=kept,
        gpu_model=gpu_model,
        version=mine.version + 1,
        prior=larger.prior,
        # (a fold whose model stands keeps the larger set's, named as it was)
        params=_workload_named(profile_params(fit), other, kept),
        n_observations=mine.n_observations + theirs.n_observations,
        jobs=mine.jobs + theirs.jobs,
        iter_time_error=_median_error(previous, measured, "iter_time_s"),
        power_error=_median_error(previous, measured, "power_w"),
        last_job_id=last.last_job_id,
        created_at=timezone.now(),
    )
    WorkloadProfile.objects.filter(pk=theirs.pk).update(
        params={**theirs.params, MERGED_INTO: merged.version}
    )
    logger.info(
        "workload profile %s@%s v%d (%g measurements) merged with %s v%d (%g) into %s v%d, "
        "%s's joining with a bounded share; its rows are kept under their spelling",
        other, gpu_model, theirs.version, theirs.n_observations, kept, mine.version,
        mine.n_observations, kept, merged.version, smaller.workload,
    )  # fmt: skip
    return merged


def _workload_named(params: Any, old: str, new: str) -> Any:
    """``params`` (a profile's) with its model, and its fit's base, naming workload ``new``
    where they named ``old``."""
    return _renamed(params, "workload", old, new)
