"""Workload profiles: what one job of a workload learned is where the next one starts."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta

import pytest

from cluster.choices import JobState
from cluster.models import Job
from scheduling import workload_profiles as wp
from scheduling.core.online_model import Observation, config_of
from scheduling.core.perf_models import load_catalog
from scheduling.models import JobSchedulingState, WorkloadProfile

T0 = datetime(2026, 11, 25, 8, 0, 0, tzinfo=UTC)
CATALOG = load_catalog()
PRIOR = CATALOG.get("resnet50", "A100")
CFG = config_of(2, 1, 128.0)


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
    # given a first resnet50 job that ran three times slower than the catalog says, and finished
    first = _job_with(make_job, member, team, [_obs(3.0), _obs(3.0)])

    # when a round folds finished jobs into profiles
    assert wp.fold_finished_jobs(now=T0) == 1

    # then version 1 holds its two observations, and a second job's prior is that profile,
    # predicting the measured speed, not the catalog's
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
    assert prior.iter_time_s(CFG) == pytest.approx(3.0 * PRIOR.iter_time_s(CFG), rel=0.01)
    # and folding again changes nothing: a job moves a profile once
    assert wp.fold_finished_jobs(now=T0 + timedelta(minutes=1)) == 0
    assert WorkloadProfile.objects.count() == 1
    assert JobSchedulingState.objects.get(job=first).profile_version == 1


def test_one_job_moves_a_shared_profile_only_by_a_bounded_weight(make_job, member, team):
    # given a profile learned from 1,000 observations at the catalog's speed
    _job_with(make_job, member, team, [_obs(1.0, weight=1000.0)])
    wp.fold_finished_jobs(now=T0)
    before = wp.model_from_params(wp.latest_profile("resnet50", "A100").params)

    # when a job with as many observations, ten times slower, finishes and is folded
    _job_with(make_job, member, team, [_obs(10.0, weight=1000.0)])
    wp.fold_finished_jobs(now=T0 + timedelta(minutes=1))

    # then the profile moved a quarter of the way (in log) towards it, not half or all of it,
    # and it records how wrong the previous version was for this job (90 %)
    latest = wp.latest_profile("resnet50", "A100")
    after = wp.model_from_params(latest.params)
    assert latest.version == 2
    assert latest.jobs == 2
    assert latest.n_observations == 2000.0
    ratio = after.iter_time_s(CFG) / before.iter_time_s(CFG)
    assert ratio == pytest.approx(10**wp.MAX_JOB_WEIGHT, rel=0.02)
    assert latest.iter_time_error == pytest.approx(0.9, rel=0.01)
    assert latest.power_error == pytest.approx(0.0, abs=0.01)


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


def test_a_workload_the_catalog_does_not_know_starts_from_a_known_one_on_its_gpu(db):
    prior, source = wp.prior_for("llama-3b", "A100", catalog=CATALOG)
    assert prior.gpu_model == "A100"
    assert source == f"catalog {prior.workload}@A100 (nearest known)"
    assert wp.prior_for("resnet50", "H100", catalog=CATALOG) is None


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
