"""Workload profiles learned under two forms of one name before submits folded names
(``MyNet``, then fullwidth ``\uff2d\uff59\uff2e\uff45\uff54``) stayed two sets of rows: jobs
take the first learned spelling (scheduling 0014, ``catalog_name``), and what the other
spelling's jobs measured was found by none of them. The migration (scheduling 0015) and
``manage.py merge_workload_spellings`` (the fold, live code a migration may not hold) make
them one profile under the first spelling, folding the smaller set of measurements into
the larger as a job is folded, with a bounded share (``profiles.MAX_JOB_WEIGHT``)."""

import io
from datetime import UTC, datetime

import pytest
from support.migrations import stored_before

from cluster.workloads import workload_fold
from scheduling.core import profiles
from scheduling.core.online_model import Observation, config_of
from scheduling.core.perf_models import load_catalog

BEFORE = [
    ("scheduling", "0014_job_workload_names_folded"),
    ("cluster", "0028_gpu_sm_clock_bound"),
]
T0 = datetime(2026, 12, 7, tzinfo=UTC)
WIDE = "\uff2d\uff59\uff2e\uff45\uff54"  # fullwidth MyNet
CATALOG = load_catalog()
TRUTH = CATALOG.get("ncf", "T4")
PRIOR = CATALOG.get("cifar10", "T4")
BATCH = 256.0


def _measured(n_gpus: int, weight: float, slower: float = 1.0) -> Observation:
    cfg = config_of(n_gpus, 1, BATCH / n_gpus)
    return Observation(
        n_gpus=n_gpus, n_nodes=1, local_batch=BATCH / n_gpus,
        iter_time_s=TRUTH.iter_time_s(cfg) * slower, power_w=TRUTH.power_w(cfg), weight=weight,
    )  # fmt: skip


def _params(workload: str, observations) -> dict:
    from scheduling.workload_profiles import profile_params

    return profile_params(profiles.fold(None, PRIOR, observations, workload=workload))


@pytest.mark.django_db(transaction=True)
def test_profiles_learned_under_two_forms_of_a_name_become_one():
    with stored_before(BEFORE) as (apps, user, team):
        model = apps.get_model("scheduling", "WorkloadProfile")

        def profile(workload, gpu_model, version, at, observations, jobs, **kw):
            # (its match key as ``WorkloadProfile.save`` sets it; a historical model's
            # save does not)
            return model.objects.create(
                workload=workload, workload_key=workload_fold(workload), gpu_model=gpu_model,
                version=version, prior="estimated from cifar10@T4", created_at=at,
                params=_params(workload, observations), jobs=jobs,
                n_observations=sum(o.weight for o in observations), **kw,
            ).pk  # fmt: skip

        # MyNet, learned first: 600 measurements on one T4 at ncf's speed, from 2 jobs
        mine = profile("MyNet", "T4", 1, T0, [_measured(1, 600.0)], 2)
        # learned later as fullwidth MyNet: 500 measurements, twice as slow, from 3 jobs
        wide_t4 = profile(WIDE, "T4", 1, T0.replace(hour=5), [_measured(1, 500.0, 2.0)], 3)
        # and on the A100 by the fullwidth spelling alone, two versions
        wide_a100 = [
            profile(WIDE, "A100", v, T0.replace(hour=5 + v), [_measured(1, 50.0 * v)], v)
            for v in (1, 2)
        ]
        # a workload learned under one spelling is left alone
        other = profile("OtherNet", "T4", 1, T0, [_measured(1, 10.0)], 1)
        others_params = model.objects.get(pk=other).params

    from django.core.management import call_command

    from scheduling import workload_profiles
    from scheduling.models import WorkloadProfile

    # the migration leaves the pair both spellings learned to the command, which folds it
    assert workload_profiles.latest_profile("MyNet", "T4").pk == mine
    call_command("merge_workload_spellings", stdout=io.StringIO())
    # then on the T4 the first spelling has a new version counting both sets
    merged = workload_profiles.latest_profile("MyNet", "T4")
    assert (merged.version, merged.jobs, merged.n_observations) == (2, 5, 1100.0)
    assert merged.workload_key == "mynet"
    fit = workload_profiles.profile_fit(merged)
    assert fit.model.workload == "MyNet"
    # where the smaller set (the fullwidth one's 500) joined the larger with a bounded share:
    # a quarter of the whole (200 of 800), not 500 of 1,100
    share = profiles.MAX_JOB_WEIGHT
    assert sum(o.weight for o in fit.observations) == pytest.approx(600.0 / (1 - share))
    cfg = config_of(1, 1, BATCH)
    assert fit.model.iter_time_s(cfg) / TRUTH.iter_time_s(cfg) == pytest.approx(
        2.0**share, rel=0.02
    )
    # its error columns as a fold's: the previous version's on what joined (2x slower)
    assert merged.iter_time_error == pytest.approx(0.5, rel=0.02)
    # the measurements moved to the newest version; the older keeps its model
    assert "fit" not in WorkloadProfile.objects.get(pk=mine).params
    # the fullwidth rows on the T4 are kept as they were (nothing is deleted)
    assert WorkloadProfile.objects.get(pk=wide_t4).workload == WIDE

    # on the A100, which only the fullwidth spelling learned on, its versions take the name
    moved = WorkloadProfile.objects.filter(pk__in=wide_a100).order_by("version")
    assert [(p.workload, p.workload_key, p.version) for p in moved] == [
        ("MyNet", "mynet", 1),
        ("MyNet", "mynet", 2),
    ]
    assert workload_profiles.latest_profile("MyNet", "A100").pk == wide_a100[1]
    assert workload_profiles.profile_fit(moved[1]).model.workload == "MyNet"
    assert not WorkloadProfile.objects.filter(workload=WIDE, gpu_model="A100").exists()

    # and a name learned once is untouched
    assert WorkloadProfile.objects.get(pk=other).params == others_params
    assert WorkloadProfile.objects.filter(workload="OtherNet").count() == 1

    # and run again, the command merges nothing twice
    out = io.StringIO()
    call_command("merge_workload_spellings", stdout=out)
    assert out.getvalue().strip() == "0 profile versions merged"
    assert workload_profiles.latest_profile("MyNet", "T4").pk == merged.pk


@pytest.mark.django_db(transaction=True)
def test_the_migration_holds_no_live_profile_code(monkeypatch):
    # A migration runs on every upgraded database for good, so it holds what it needs: one
    # that folds with the profile code of the day breaks once that code moves or changes
    # (issue 12 moves the fitting code), as scheduling 0014 did with the catalog module.
    from scheduling import workload_profiles

    def moved(*args, **kwargs):
        raise ImportError("the profile code has moved")

    with stored_before(BEFORE) as (apps, user, team):
        model = apps.get_model("scheduling", "WorkloadProfile")
        rows = {}
        for workload, gpu_model, observations in (
            ("MyNet", "T4", [_measured(1, 600.0)]),
            (WIDE, "T4", [_measured(1, 500.0, 2.0)]),
            (WIDE, "A100", [_measured(1, 50.0)]),
        ):
            rows[workload, gpu_model] = model.objects.create(
                workload=workload, workload_key=workload_fold(workload), gpu_model=gpu_model,
                version=1, prior="p", created_at=T0 if workload == "MyNet" else T0.replace(hour=5),
                params=_params(workload, observations), jobs=1,
                n_observations=sum(o.weight for o in observations),
            ).pk  # fmt: skip
        monkeypatch.setattr(profiles, "fold", moved)
        monkeypatch.setattr(workload_profiles, "profile_fit", moved)
        monkeypatch.setattr(workload_profiles, "profile_params", moved)

    from scheduling.models import WorkloadProfile

    # the migration ran: what only the other spelling learned is renamed (data alone) ...
    assert WorkloadProfile.objects.get(pk=rows[WIDE, "A100"]).workload == "MyNet"
    # ... and the pair both learned is left for the command (``merge_workload_spellings``)
    assert list(
        WorkloadProfile.objects.filter(gpu_model="T4").order_by("pk").values_list("workload")
    ) == [("MyNet",), (WIDE,)]


@pytest.mark.django_db(transaction=True)
def test_the_command_before_the_migration_is_one_line():
    # run on a database not yet migrated, it was a ProgrammingError traceback
    from django.core.management import CommandError, call_command

    with stored_before(BEFORE):
        with pytest.raises(CommandError, match="not applied: run `manage.py migrate` first"):
            call_command("merge_workload_spellings", stdout=io.StringIO())
