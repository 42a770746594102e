"""Workload profiles: what one job of a workload learned is where the next one starts."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient
from support.jobs import submitted_before

from cluster.choices import JobState
from cluster.models import Gpu, Job, Node
from scheduling import adapters, perf_lookup, services
from scheduling import workload_profiles as wp
from scheduling.core import profiles
from scheduling.core.online_model import Observation, config_of
from scheduling.core.perf_models import load_catalog
from scheduling.models import JobSchedulingState, SchedulerSettings, WorkloadProfile
from tests.support.nodes import make_a40_node

T0 = datetime(2026, 11, 25, 8, 0, 0, tzinfo=UTC)
CATALOG = load_catalog()
PRIOR = CATALOG.get("resnet50", "A100")
CFG = config_of(2, 1, 128.0)


@pytest.fixture
def make_job(make_job):
    """Jobs submitted before ``T0`` unless told: the rounds here run at ``T0`` and after."""
    return submitted_before(make_job, T0)


def _obs(scale: float, *, weight: float = 1.0, power_scale: float = 1.0) -> Observation:
    return Observation(
        n_gpus=2,
        n_nodes=1,
        local_batch=128.0,
        iter_time_s=PRIOR.iter_time_s(CFG) * scale,
        power_w=PRIOR.power_w(CFG) * power_scale,
        weight=weight,
    )


def _job_with(make_job, member, team, observations, *, finish: bool = True) -> Job:
    job = make_job(owner=member, team=team)
    state = JobSchedulingState.objects.create(job=job)
    wp.record_observations(
        job, state, gpu_model="A100", observations=observations, until=T0, catalog=CATALOG
    )
    if finish:
        Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED)
        job.refresh_from_db()
    return job


def test_the_second_job_of_a_workload_starts_from_what_the_first_learned(make_job, member, team):
    # given a first resnet50 job that ran three times slower than the catalog says, and finished,
    # and a finished job that no round ever saw (no state, no observations)
    first = _job_with(make_job, member, team, [_obs(3.0), _obs(3.0)])
    unseen = make_job(owner=member, team=team)
    Job.objects.filter(pk=unseen.pk).update(state=JobState.CANCELLED)

    # when a round folds finished jobs into profiles
    assert wp.fold_finished_jobs(now=T0) == 1

    # then version 1 holds its two observations, and a second job's prior is that profile,
    # moved towards the measured speed by the job's bounded share: the catalog's model of
    # resnet50 is measured, and weighs three times the first job (a job reporting itself
    # 2,800x faster became the whole profile, a live probe)
    (profile,) = WorkloadProfile.objects.all()
    assert (profile.workload, profile.gpu_model, profile.version, profile.jobs) == (
        "resnet50",
        "A100",
        1,
        1,
    )
    assert profile.n_observations == 2.0
    assert profile.prior == "catalog resnet50@A100"
    assert profile.last_job == first
    assert profile.iter_time_error is None
    prior, source = wp.prior_for("resnet50", "A100", catalog=CATALOG)
    assert source == "profile v1"
    share = profiles.MAX_JOB_WEIGHT
    assert prior.iter_time_s(CFG) == pytest.approx(3.0**share * PRIOR.iter_time_s(CFG), rel=0.01)
    # and folding again changes nothing: a job moves a profile once
    assert wp.fold_finished_jobs(now=T0 + timedelta(minutes=1)) == 0
    assert WorkloadProfile.objects.count() == 1
    assert JobSchedulingState.objects.get(job=first).profile_version == 1


def test_a_workload_named_as_long_as_a_job_allows_gets_its_profile(make_job, member, team):
    # A job's workload may be 100 characters; profiles kept 64, and folding a finished
    # job with a longer name failed every round from then on (a live probe).
    job = _job_with(make_job, member, team, [_obs(1.0)], finish=False)
    name = "w" * Job._meta.get_field("workload").max_length
    Job.objects.filter(pk=job.pk).update(workload=name, state=JobState.COMPLETED)
    assert wp.fold_finished_jobs(now=T0) == 1
    assert WorkloadProfile.objects.get().workload == name


def test_one_job_moves_a_shared_profile_only_by_a_bounded_weight(make_job, member, team):
    # given a profile learned from 1,000 observations at the catalog's speed
    _job_with(make_job, member, team, [_obs(1.0, weight=1000.0)])
    wp.fold_finished_jobs(now=T0)
    before = wp.model_from_params(wp.latest_profile("resnet50", "A100").params)

    # when a job with as many observations, ten times slower, finishes and is folded
    _job_with(make_job, member, team, [_obs(10.0, weight=1000.0)])
    wp.fold_finished_jobs(now=T0 + timedelta(minutes=1))

    # then the profile moved a fifth of the way (in log) towards it (its 1,000 against the
    # first job's 1,000 and the catalog's 3,000), not half or all of it, and it records how
    # wrong the previous version was for this job (90 %)
    latest = wp.latest_profile("resnet50", "A100")
    after = wp.model_from_params(latest.params)
    assert latest.version == 2
    assert latest.jobs == 2
    assert latest.n_observations == 2000.0
    ratio = after.iter_time_s(CFG) / before.iter_time_s(CFG)
    assert ratio == pytest.approx(10**0.2, rel=0.02)
    assert latest.iter_time_error == pytest.approx(0.9, rel=0.01)
    assert latest.power_error == pytest.approx(0.0, abs=0.01)


def test_one_job_far_off_moves_a_shared_profile_at_most_the_bound_and_is_logged(
    make_job, member, team, caplog
):
    # given a profile learned from 1,000 observations at the catalog's speed
    _job_with(make_job, member, team, [_obs(1.0, weight=1000.0)])
    wp.fold_finished_jobs(now=T0)
    before = wp.model_from_params(wp.latest_profile("resnet50", "A100").params)

    # when a job with as many observations, 1,000 times slower (within what is refused),
    # finishes and is folded: its capped fifth of the weight would move it 1000 ** 0.2 = 4x
    slow = _job_with(make_job, member, team, [_obs(1000.0, weight=1000.0)])
    caplog.set_level("INFO", logger=wp.logger.name)
    wp.fold_finished_jobs(now=T0 + timedelta(minutes=1))

    # then the profile moves towards it by the bound on one job's move, not more, and the
    # cut is logged with the job
    latest = wp.latest_profile("resnet50", "A100")
    ratio = wp.model_from_params(latest.params).iter_time_s(CFG) / before.iter_time_s(CFG)
    assert ratio == pytest.approx(profiles.MAX_JOB_MOVE, rel=0.05)
    assert ratio <= profiles.MAX_JOB_MOVE * 1.001
    assert (latest.version, latest.jobs, latest.n_observations) == (2, 2, 2000.0)
    assert f"job {slow.pk}: its share of profile resnet50@A100 cut to" in caplog.text


def test_a_profile_holds_its_jobs_measurements_and_learns_what_each_job_showed(
    make_job, member, team
):
    # given a first resnet50 job measured on two A100s at the catalog's speed, and a second
    # measured on eight, three times slower than the catalog says
    eight = config_of(8, 1, 32.0)
    slow = Observation(
        n_gpus=8, n_nodes=1, local_batch=32.0, iter_time_s=3.0 * PRIOR.iter_time_s(eight)
    )
    _job_with(make_job, member, team, [_obs(1.0, weight=20.0)])
    wp.fold_finished_jobs(now=T0)
    _job_with(make_job, member, team, [dataclasses.replace(slow, weight=20.0)])
    wp.fold_finished_jobs(now=T0 + timedelta(minutes=1))

    # then version 2 holds both jobs' measurements (the first's beside the catalog's own
    # model, weighing three times it, at its configuration), and predicts each
    # configuration as it was measured: eight GPUs by the second job alone
    latest = wp.latest_profile("resnet50", "A100")
    fit = wp.profile_fit(latest)
    weights = {o.n_gpus: o.weight for o in fit.observations}
    assert weights == {2: pytest.approx(80.0), 8: 20.0}
    after = wp.model_from_params(latest.params)
    assert after.iter_time_s(eight) == pytest.approx(slow.iter_time_s, rel=0.05)
    assert after.iter_time_s(CFG) == pytest.approx(PRIOR.iter_time_s(CFG), rel=0.05)
    # and what is stored is what was fitted; version 1 keeps its model, not the measurements
    assert fit.model.iter_time_s(eight) == after.iter_time_s(eight)
    first = WorkloadProfile.objects.get(workload="resnet50", version=1)
    assert set(first.params) == {"model", "gpu"}
    # and, measured at two per-GPU batches, it backs the next job's predictions before that
    # job reports (version 1, at one per-GPU batch, did not)
    a100 = wp.NvmlGpu("A100", 100.0, 400.0, 400.0)
    third = make_job(owner=member, team=team)
    (model,) = wp.prior_models([third], {"A100": a100}, catalog=CATALOG).values()
    assert model.prior_measured and not model.estimated
    assert model.iter_time_s(eight) == after.iter_time_s(eight)


def test_a_profile_version_kept_without_measurements_weighs_as_what_it_learned_from(
    make_job, member, team
):
    # given a profile version written before profiles kept their measurements: its model
    # alone, learned from 300 observations
    WorkloadProfile.objects.create(
        workload="resnet50",
        gpu_model="A100",
        version=1,
        prior="catalog resnet50@A100",
        params=wp.model_to_params(PRIOR),
        n_observations=300.0,
        jobs=3,
        created_at=T0,
    )

    # when a job with as many observations, twice as slow, finishes and is folded
    _job_with(make_job, member, team, [_obs(2.0, weight=300.0)])
    wp.fold_finished_jobs(now=T0 + timedelta(minutes=1))

    # then the old version counts as its 300 observations and the job as a quarter of all
    latest = wp.latest_profile("resnet50", "A100")
    assert (latest.version, latest.jobs, latest.n_observations) == (2, 4, 600.0)
    ratio = wp.model_from_params(latest.params).iter_time_s(CFG) / PRIOR.iter_time_s(CFG)
    assert ratio == pytest.approx(2**profiles.MAX_JOB_WEIGHT, rel=0.02)
    # and the new version holds measurements, as every later one will
    assert sum(o.weight for o in wp.profile_fit(latest).observations) == pytest.approx(400.0)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({"iter_time_s": math.nan}, "iteration time nan is not finite"),
        ({"iter_time_s": -0.5}, "iteration time -0.5 s is not positive"),
        ({"iter_time_s": 1e7}, "iteration time 1e+07 s is outside"),
        ({"power_w": math.inf}, "power inf is not finite"),
        ({"power_w": 0.0}, "power 0.0 W is not positive"),
        ({"power_w": 5000.0}, "power 5000 W per GPU is above 600 W"),
    ],
)
def test_absurd_observations_are_refused_logged_and_never_fitted(
    make_job, member, team, caplog, bad, reason
):
    # given a running job with one good observation and one absurd one
    good = _obs(2.0)
    absurd = dataclasses.replace(good, **bad)

    # when both are recorded
    job = _job_with(make_job, member, team, [good, absurd], finish=False)

    # then only the good one is stored and fitted, and the log says why the other was refused
    stored = JobSchedulingState.objects.get(job=job).observations["A100"]
    assert [o["weight"] for o in stored] == [1.0]
    assert stored[0]["iter_time_s"] == pytest.approx(good.iter_time_s, rel=1e-12)
    assert f"job {job.pk}: observation refused ({reason}" in caplog.text
    learned = wp.learned_models(JobSchedulingState.objects.get(job=job), "resnet50")["A100"]
    assert learned.iter_time_s(CFG) == pytest.approx(good.iter_time_s, rel=1e-3)


def test_a_catalog_workload_with_only_draws_stored_is_not_a_guess(make_job, member, team):
    # given a running resnet50 job (the catalog has it on the A100) whose NVML draws have
    # been stored, but no iteration time yet
    draw = dataclasses.replace(_obs(1.0), iter_time_s=None)
    job = _job_with(make_job, member, team, [draw], finish=False)
    state = JobSchedulingState.objects.get(job=job)
    assert state.online_params["A100"]["prior"] == "catalog resnet50@A100"

    # then its model is backed by the catalog's measurements, not a prior alone (policies
    # would otherwise hold it at its GPU count until its first progress report)
    assert state.online_params["A100"]["prior_measured"] is True
    model = wp.learned_models(state, "resnet50")["A100"]
    assert model.n_time_obs == 0 and not model.estimated
    # and a fit stored before the mark was kept is read by its source: the catalog's own
    # model of the workload is measured, another workload's model is an estimate
    del state.online_params["A100"]["prior_measured"]
    assert not wp.learned_models(state, "resnet50")["A100"].estimated
    assert wp.learned_models(state, "mystery")["A100"].estimated


def _at_batch(local_batch: float) -> Observation:
    cfg = config_of(2, 1, local_batch)
    return Observation(
        n_gpus=2,
        n_nodes=1,
        local_batch=local_batch,
        iter_time_s=PRIOR.iter_time_s(cfg),
        power_w=PRIOR.power_w(cfg),
    )


@pytest.mark.parametrize(("batches", "measured"), [((128.0,), False), ((128.0, 64.0), True)])
def test_a_job_whose_prior_is_a_profile_that_knows_the_split_is_not_a_guess_before_it_reports(
    make_job, member, team, batches, measured
):
    # given a finished resnet50 job that measured iteration times at one per-GPU batch, or at
    # two (which tells how its compute time splits), folded into the workload's profile
    _job_with(make_job, member, team, [_at_batch(b) for b in batches])
    assert wp.fold_finished_jobs(now=T0) == 1
    # and a second job, running, whose NVML draws are stored but no iteration time yet
    draw = dataclasses.replace(_obs(1.0), iter_time_s=None)
    job = _job_with(make_job, member, team, [draw], finish=False)
    state = JobSchedulingState.objects.get(job=job)
    assert state.online_params["A100"]["prior"] == "profile v1"

    # then its model is measured where the profile knows the split, as it is for a job with
    # nothing stored yet (the prior the round gives a waiting job); it was a prior alone in
    # both cases, so a budget policy held it at its GPU count until its first report
    model = wp.learned_models(state, "resnet50")["A100"]
    assert model.n_time_obs == 0 and model.estimated is not measured
    waiting = make_job(owner=member, team=team)
    nvml = wp.nvml_gpus([])  # the catalog has the A100: no NVML readings needed
    starting = wp.prior_models([waiting], {"A100": None, **nvml}, catalog=CATALOG)
    assert starting[(str(waiting.pk), "A100")].estimated is not measured


def test_a_workload_the_catalog_does_not_know_starts_from_a_known_one_on_its_gpu(db):
    prior, source = wp.prior_for("llama-3b", "A100", catalog=CATALOG)
    assert prior.gpu_model == "A100"
    assert source == f"estimated from catalog {prior.workload}@A100"
    # a GPU model the catalog lacks, with nothing NVML said about it, has nothing to start from
    assert wp.prior_for("resnet50", "H100", catalog=CATALOG) is None


def test_a_catalog_alias_is_its_own_measured_model_and_a_hint_keeps_its_name(db):
    # imagenet on the A100 is resnet50's catalog model (an alias): the workload's own,
    # measured, not another workload's estimate (a review caught it labelled as one)
    prior, source = wp.prior_for("imagenet", "A100", catalog=CATALOG)
    assert (prior.workload, source) == ("resnet50", "catalog imagenet@A100")
    _, hinted = wp.prior_for("my-net", "A100", catalog=CATALOG, hints=wp.JobHints("imagenet"))
    assert hinted == "estimated from catalog imagenet@A100"


def test_a_known_workload_on_a_gpu_model_without_catalog_entry_gets_an_estimated_prior(db):
    # given an A40 as NVML reports it (100-300 W, default 300 W)
    a40 = wp.NvmlGpu("A40", 100.0, 300.0, 300.0, clocks_mhz=(1740, 1200, 210))

    # then resnet50's prior is the catalog's A100 model (400 W is nearer 300 W than the
    # T4's 70 W), on the A40's limits and clocks, its draw scaled by 300/400; of the clocks
    # only those down to the share of the top clock the A100's clock model was fitted to
    # (855 / 1410 MHz of 1740: 1055 MHz), not 210 MHz, where it would be extrapolated
    prior, source = wp.prior_for("resnet50", "A40", catalog=CATALOG, nvml=a40)
    assert source == "estimated from catalog resnet50@A100"
    assert (prior.gpu_model, prior.power_limits_w, prior.clocks_mhz) == (
        "A40",
        (100.0, 300.0),
        (1200, 1740),
    )
    assert (prior.gpu.dvfs.min_clock_mhz, prior.gpu.dvfs.max_clock_mhz) == (1200, 1740)
    assert prior.power.busy_max_w == pytest.approx(PRIOR.power.busy_max_w * 0.75, rel=1e-12)
    assert prior.iter_time_s(CFG) == pytest.approx(PRIOR.iter_time_s(CFG), rel=1e-12)


def test_admins_see_profiles_with_their_observation_count_and_error_read_only(
    admin_client, make_job, member, team
):
    # given two versions of the resnet50 profile
    _job_with(make_job, member, team, [_obs(1.0, weight=7.0)])
    wp.fold_finished_jobs(now=T0)
    _job_with(make_job, member, team, [_obs(2.0, weight=3.0)])
    wp.fold_finished_jobs(now=T0 + timedelta(minutes=1))

    # when an admin opens the list
    response = admin_client.get("/admin/scheduling/workloadprofile/")

    # then both versions are listed with observations and error, and nothing can be added
    assert response.status_code == 200
    rows = [p for p in response.context["cl"].result_list]
    assert [(p.version, p.n_observations) for p in rows] == [(2, 10.0), (1, 7.0)]
    assert rows[0].iter_time_error == pytest.approx(0.5, rel=0.02)
    html = response.content.decode()
    assert "Iter time error" in html and "N observations" in html
    assert admin_client.get("/admin/scheduling/workloadprofile/add/").status_code == 403


def test_a_job_on_a_gpu_model_the_catalog_lacks_is_planned_from_an_estimate(make_job, member, team):
    # given an A40 node (the catalog has A100 and T4 only) and a resnet50 job for it
    make_a40_node(heartbeat=T0)
    job = make_job(owner=member, team=team, gpu_model="A40", min_gpus=1, max_gpus=1)
    config = SchedulerSettings.load()
    config.policy = "fifo"
    config.save()

    # when a round runs
    result = services.run_scheduling_round(now=T0)

    # then the job starts on the A40 instead of waiting for a perf model, and the snapshot
    # says its model is an estimate
    job.refresh_from_db()
    assert str(job.pk) not in result.plan.waiting
    assert job.state == JobState.RUNNING
    assert job.current_allocation.gpus.get().model == "A40"
    snap = adapters.build_snapshot(now=T0, round_length_s=60.0).snapshot
    model = snap.job_perf[(str(job.pk), "A40")]
    assert model.estimated
    assert model.power_limits_w == (100.0, 300.0)


def test_a_job_on_a_gpu_model_the_catalog_lacks_learns_from_its_own_reports(make_job, member, team):
    # given a resnet50 job on an A40 that runs at 0.3 s per iteration at 64 per GPU, 180 W
    a40 = wp.NvmlGpu("A40", 100.0, 300.0, 300.0)
    job = make_job(owner=member, team=team, gpu_model="A40")
    state = JobSchedulingState.objects.create(job=job)
    seen = Observation(n_gpus=1, n_nodes=1, local_batch=64.0, iter_time_s=0.3, power_w=180.0)

    # when its measurements are recorded with what NVML says of the A40
    model = wp.record_observations(
        job, state, gpu_model="A40", observations=[seen, seen], until=T0, catalog=CATALOG,
        nvml=a40,
    )  # fmt: skip

    # then its model starts from the estimate and predicts what it measured
    assert model is not None and not model.estimated
    assert model.iter_time_s(seen.config()) == pytest.approx(0.3, rel=1e-3)
    assert model.power_w(seen.config()) == pytest.approx(180.0, rel=1e-3)
    entry = JobSchedulingState.objects.get(job=job).online_params["A40"]
    assert entry["prior"] == "estimated from catalog resnet50@A100"


def test_admins_see_each_jobs_observation_count_and_prior(admin_client, make_job, member, team):
    job = _job_with(make_job, member, team, [_obs(1.0, weight=5.0)], finish=False)

    response = admin_client.get("/admin/scheduling/jobschedulingstate/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "A100: 5" in html
    assert "A100: catalog resnet50@A100" in html
    assert str(job.pk) in html


def test_a_named_parameter_count_picks_the_catalog_workload_nearest_in_size(db):
    # given the A100 workloads with a published size (data/perf/param_counts.csv): resnet50
    # 25.6M, vgg16 138M, inception3 27.2M, resnet50_cifar10 23.5M, bert 110M
    counts = wp.PARAM_COUNTS
    on_a100 = {m.workload for m in CATALOG.models() if m.gpu_model == "A100"}
    assert {"vgg16", "bert", "resnet50"} <= on_a100 & set(counts)
    # when a job names 150M parameters, or 100M, and no workload it resembles
    big, source = wp.prior_for(
        "my-vgg", "A100", catalog=CATALOG, hints=wp.JobHints(param_count=150_000_000)
    )
    mid, _ = wp.prior_for(
        "my-bert", "A100", catalog=CATALOG, hints=wp.JobHints(param_count=100_000_000)
    )
    # then it starts from the one nearest in ratio: vgg16 (1.08x) and bert (1.1x)
    assert (big.workload, source) == ("vgg16", "estimated from catalog vgg16@A100")
    assert mid.workload == "bert"
    # and a resembles hint still wins over the size
    hinted, _ = wp.prior_for(
        "my-vgg",
        "A100",
        catalog=CATALOG,
        hints=wp.JobHints(resembles="resnet50", param_count=150_000_000),
    )
    assert hinted.workload == "resnet50"
    # without a count the first catalog workload on the GPU, as before
    first, _ = wp.prior_for("my-vgg", "A100", catalog=CATALOG)
    assert first.workload == next(m for m in CATALOG.models() if m.gpu_model == "A100").workload


def test_jobs_that_start_from_the_same_prior_share_one_model(make_job, member, team):
    # given three waiting jobs for an A40 node, two of one workload and one of another
    make_a40_node(heartbeat=T0)
    a = make_job(owner=member, team=team, gpu_model="A40", workload="resnet50")
    b = make_job(owner=member, team=team, gpu_model="A40", workload="resnet50")
    c = make_job(owner=member, team=team, gpu_model="A40", workload="bert")

    # when the snapshot is built
    snap = adapters.build_snapshot(now=T0, round_length_s=60.0).snapshot

    # then the two resnet50 jobs share one estimated model (a round predicts it once and
    # PowerFlow prices them on one hull), and the bert job has its own
    model_of = {job.pk: snap.job_perf[(str(job.pk), "A40")] for job in (a, b, c)}
    assert model_of[a.pk] is model_of[b.pk]
    assert model_of[c.pk] is not model_of[a.pk]
    assert all(m.estimated for m in model_of.values())


def test_a_job_like_a_workload_learned_on_its_gpu_starts_from_that_profile(make_job, member, team):
    # given resnet50 learned on an A40 (which the catalog lacks): twice as slow as its
    # estimate from the A100
    a40 = wp.NvmlGpu("A40", 100.0, 300.0, 300.0, clocks_mhz=(1740, 1200, 210))
    estimate, _ = wp.prior_for("resnet50", "A40", catalog=CATALOG, nvml=a40)
    job = make_job(owner=member, team=team)
    state = JobSchedulingState.objects.create(job=job)
    seen = Observation(n_gpus=2, n_nodes=1, local_batch=128.0,
                       iter_time_s=2.0 * estimate.iter_time_s(CFG), power_w=200.0)  # fmt: skip
    wp.record_observations(
        job, state, gpu_model="A40", observations=[seen], until=T0, catalog=CATALOG, nvml=a40
    )
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED)
    assert wp.fold_finished_jobs(now=T0) == 1

    # then a new workload that resembles resnet50 starts there from that profile (a live
    # probe: it started from the A100 catalog model), marked an estimate of another workload
    prior, source = wp.prior_for(
        "my-net", "A40", catalog=CATALOG, nvml=a40, hints=wp.JobHints("resnet50")
    )
    assert source == "estimated from profile resnet50@A40 v1"
    assert prior.iter_time_s(CFG) == pytest.approx(2.0 * estimate.iter_time_s(CFG), rel=0.02)
    assert wp.estimated_from_another_workload("my-net", source)


def test_the_api_and_the_job_page_say_whether_a_jobs_model_is_learned(
    make_job, member, team, client
):
    # given a job that measured itself twice on the A100, and one that has not run
    ran = _job_with(make_job, member, team, [_obs(2.0), _obs(2.0)], finish=False)
    waiting = make_job(owner=member, team=team)
    client.force_login(member)

    # then the API says its model is its own, from 2 measured iteration times, and what it
    # started from; the job that has not run has no model of its own yet
    models = client.get(f"/api/jobs/{ran.pk}/").json()["models"]
    assert models == [
        {
            "gpu_model": "A100",
            "kind": "own",
            "observations": 2.0,
            "prior": "catalog resnet50@A100",
            "prior_kind": "catalog",
        }
    ]
    assert client.get(f"/api/jobs/{waiting.pk}/").json()["models"] == []
    # and so do their pages
    page = client.get(f"/jobs/{ran.pk}/").content.decode()
    assert "A100: learned from 2 of its own iteration-time measurements" in page
    waiting_page = client.get(f"/jobs/{waiting.pk}/").content.decode()
    assert "not run yet: predicted from its prior" in waiting_page


def test_a_job_that_measured_only_its_draw_is_still_its_prior(make_job, member, team, client):
    # its speed is not known from draws alone (OnlinePerfModel.estimated); a review caught
    # the API calling it learned
    drawn = _obs(1.0)
    job = _job_with(
        make_job, member, team, [dataclasses.replace(drawn, iter_time_s=None)], finish=False
    )
    client.force_login(member)
    (model,) = client.get(f"/api/jobs/{job.pk}/").json()["models"]
    assert (model["kind"], model["observations"]) == ("prior", 0.0)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "A100: its prior alone, its speed not measured yet" in page


def test_a_fit_stored_under_the_old_all_reduce_rule_is_refitted_when_read(
    make_job, member, team, monkeypatch
):
    from scheduling.core import online_model as om
    from scheduling.core.online_fit import fit_online

    # given a job 20x slower than its prior, measured on one GPU and on two, whose fit was
    # stored before the all-reduce kept half the time level (no rule stored): its moves
    # put the all-reduce it measured against the prior's x 20
    monkeypatch.setattr(om, "NETWORK_LEVEL", 1.0)
    one, two = config_of(1, 1, 128.0), config_of(2, 1, 64.0)
    seen = [
        Observation(
            c.n_gpus, 1, 128.0 / c.n_gpus, PRIOR.iter_time_s(c) * 20.0, PRIOR.power_w(c), weight=5.0
        )  # fmt: skip
        for c in (one, two)
    ]
    job = _job_with(make_job, member, team, seen, finish=False)
    state = JobSchedulingState.objects.get(job=job)
    entry = dict(state.online_params["A100"])
    assert entry.pop("network_level") == 1.0
    JobSchedulingState.objects.filter(pk=state.pk).update(online_params={"A100": entry})
    state.refresh_from_db()
    monkeypatch.setattr(om, "NETWORK_LEVEL", 0.5)
    observations = wp._stored(state, "A100")
    prior = wp.stored_prior(entry)
    eight = config_of(8, 1, 16.0)

    # when it is read under the current rule
    model = wp.learned_models(state, job.workload)["A100"]

    # then it predicts what a fit under that rule predicts, not the old moves read anew
    fresh = fit_online(prior, observations, workload=job.workload)
    stale = om.learned_model(prior, entry["params"], observations, workload=job.workload)
    assert model.iter_time_s(eight) == pytest.approx(fresh.iter_time_s(eight), rel=1e-3)
    assert abs(stale.iter_time_s(eight) / fresh.iter_time_s(eight) - 1) > 0.05
    # and the measured configuration stays as measured
    assert model.iter_time_s(one) == pytest.approx(seen[0].iter_time_s, rel=0.02)


def test_the_api_calls_a_job_on_an_a100_pcie_estimated_not_the_sxm4_catalog(
    make_job, member, team, client
):
    # given A100 PCIe boards (250 W) registered by their agent under their NVML name, and a
    # job that measured itself twice on them
    node = Node.objects.create(name="pcie-01", switch_label="s1", rack_label="r1", gpu_model="x")
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Token {node.issue_agent_token()}")
    board = {
        "uuid": "GPU-pcie-0", "index": 0, "model": "NVIDIA A100-PCIE-40GB", "memory_mb": 40960,
        "default_power_limit_w": 250, "min_power_limit_w": 150, "max_power_limit_w": 250,
        "supported_sm_clocks_mhz": [1410, 1200, 1005],
    }  # fmt: skip
    response = agent.post("/api/agent/register/", {"gpus": [board]}, format="json")
    assert response.status_code == 200, response.content
    gpu_model = Gpu.objects.get(uuid="GPU-pcie-0").model
    job = make_job(owner=member, team=team)
    state = JobSchedulingState.objects.create(job=job)
    seen = dataclasses.replace(_obs(1.0), power_w=200.0)
    wp.record_observations(
        job, state, gpu_model=gpu_model, observations=[seen, seen], until=T0,
        catalog=CATALOG, nvml=perf_lookup.nvml_by_model([gpu_model]).get(gpu_model),
    )  # fmt: skip
    client.force_login(member)

    # then the API says its model started from an estimate carried from the SXM4's catalog
    # model onto the PCIe board (before: keyed A100, "catalog resnet50@A100", measured)
    (model,) = client.get(f"/api/jobs/{job.pk}/").json()["models"]
    assert (model["gpu_model"], model["prior_kind"]) == ("A100-PCIe", "estimated")
    assert model["prior"] == "estimated from catalog resnet50@A100"
