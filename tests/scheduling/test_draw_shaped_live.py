"""The live online model of a job whose prior is another workload's: its batch shape comes
from its own draw (``workload_profiles.fit_prior``, ``online_model.draw_shaped_prior``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from support.jobs import submitted_before

from cluster.choices import JobState
from cluster.models import Job
from scheduling import adapters
from scheduling import workload_profiles as wp
from scheduling.core import online_fit
from scheduling.core import online_model as om
from scheduling.core.online_model import Observation, config_of
from scheduling.core.perf_models import load_catalog
from scheduling.models import JobSchedulingState, WorkloadProfile
from tests.support.nodes import make_a40_node

T0 = datetime(2026, 11, 26, 8, 0, 0, tzinfo=UTC)
CATALOG = load_catalog()
A40 = wp.NvmlGpu("A40", 100.0, 300.0, 300.0, clocks_mhz=(1740, 1500, 1200))
# The A100's idle draw (the catalog's) and its most loading catalog model's draw.
IDLE_W, BUSY_MAX_W = wp.gpu_draw_range_w(CATALOG, "A100")
B0 = 64.0  # per-GPU batch the job reports at, on one GPU


@pytest.fixture
def make_job(make_job):
    """Jobs submitted before ``T0`` unless told: the rounds here run at ``T0`` and after."""
    return submitted_before(make_job, T0)


def at(local_batch: float, n: int = 1) -> om.GpuConfig:
    return config_of(n, 1, local_batch)


def reports(prior, power_w: float, *, slower: float = 1.5) -> list[Observation]:
    """What the service reads of one running job at ``B0`` on one GPU, default limit and top
    clock: three progress reports and ten NVML samples, apart (``observed_measurements_of``)."""
    common = dict(n_gpus=1, n_nodes=1, local_batch=B0)
    t_s = prior.iter_time_s(at(B0)) * slower
    return [Observation(iter_time_s=t_s, **common)] * 3 + [
        Observation(power_w=power_w, **common)
    ] * 10


def record(job: Job, observations, *, gpu_model: str = "A100", nvml=None) -> om.OnlinePerfModel:
    state, _ = JobSchedulingState.objects.get_or_create(job=job)
    model = wp.record_observations(
        job, state, gpu_model=gpu_model, observations=observations, until=T0, catalog=CATALOG,
        nvml=nvml,
    )  # fmt: skip
    assert model is not None
    return model


def bend(model, n: int = 1) -> float:
    """How much longer an iteration takes at 4x the reported per-GPU batch."""
    return model.iter_time_s(at(4 * B0, n)) / model.iter_time_s(at(B0, n))


def test_the_gpu_draw_range_is_the_catalogs_idle_and_its_most_loading_models_draw(db):
    # an A100: the catalog's 50 W idle, and the most loading A100 model's draw
    on_a100 = [m for m in CATALOG.models() if m.gpu_model == "A100"]
    assert (IDLE_W, BUSY_MAX_W) == (50.0, om.draw_range_w(on_a100)[1])
    # an A40 the catalog lacks: the A100's (nearest in highest limit), carried over by 300/400
    idle_w, busy_max_w = wp.gpu_draw_range_w(CATALOG, "A40", A40)
    assert idle_w == pytest.approx(50.0 * 0.75, rel=1e-12)
    assert busy_max_w == pytest.approx(BUSY_MAX_W * 0.75, rel=1e-12)
    assert wp.gpu_draw_range_w(CATALOG, "A40") is None


def test_an_unknown_workload_drawing_idle_power_gets_an_iteration_time_flat_in_batch(
    make_job, member, team
):
    # given a job of a workload the catalog lacks, said to resemble resnet50 (whose time at 64
    # per GPU is 95% per-sample: 3.85x at 4x the batch), whose A100 draws its idle 50 W
    job = make_job(owner=member, team=team, workload="loader-bound", resembles="resnet50")
    prior = CATALOG.get("resnet50", "A100")
    assert bend(prior) == pytest.approx(3.85, abs=0.01)

    # when its reports are recorded
    model = record(job, reports(prior, IDLE_W))

    # then it is predicted as measured at its batch, and nearly flat at 4x the batch: the
    # GPU waits on the input, which does not grow with the batch
    assert model.iter_time_s(at(B0)) == pytest.approx(1.5 * prior.iter_time_s(at(B0)), rel=1e-3)
    assert bend(model) == pytest.approx(1.0, abs=0.01)
    entry = JobSchedulingState.objects.get(job=job).online_params["A100"]
    assert entry["prior"] == "estimated from catalog resnet50@A100"
    assert entry["prior_params"]["model"]["sources"]["draw_busy_fraction"] == "0"


def test_an_unknown_workload_drawing_its_gpus_busy_maximum_gets_a_time_proportional_to_batch(
    make_job, member, team
):
    # given a job like resnet50_cifar10 (at 64 per GPU its time is 15% per-sample: 1.45x at
    # 4x the batch) whose A100 draws the busy maximum
    job = make_job(owner=member, team=team, workload="gpu-bound", resembles="resnet50_cifar10")
    prior = CATALOG.get("resnet50_cifar10", "A100")
    assert bend(prior) == pytest.approx(1.45, abs=0.01)

    model = record(job, reports(prior, BUSY_MAX_W))

    # then its time grows in proportion to the batch
    assert bend(model) == pytest.approx(4.0, rel=0.01)
    assert model.iter_time_s(at(B0)) == pytest.approx(1.5 * prior.iter_time_s(at(B0)), rel=1e-3)


def test_a_catalog_workloads_job_is_fitted_against_its_own_model_whatever_it_draws(
    make_job, member, team
):
    # given a resnet50 job (the catalog's own model on the A100), and one on an A40 (resnet50's
    # A100 model carried over: its own shape), both drawing idle power, and a job of an
    # unknown workload like resnet50 with the same reports
    make_a40_node(heartbeat=T0)
    own = CATALOG.get("resnet50", "A100")
    catalog_job = make_job(owner=member, team=team)
    a40_job = make_job(owner=member, team=team, gpu_model="A40", min_gpus=1, max_gpus=1)
    unknown = make_job(owner=member, team=team, workload="loader-bound", resembles="resnet50")
    seen = reports(own, IDLE_W)
    on_a40, source = wp.prior_for("resnet50", "A40", catalog=CATALOG, nvml=A40)
    assert source == "estimated from catalog resnet50@A100"

    # when their reports are recorded
    from_catalog = record(catalog_job, seen)
    from_a40 = record(a40_job, seen, gpu_model="A40", nvml=A40)
    estimated = record(unknown, seen)

    # then the resnet50 jobs are fitted against the prior as it is (stored unchanged): at 4x
    # the batch the time is the plain fit's, bent as resnet50's; only the estimate is flat
    pooled = om.pooled_observations(seen, 8)
    for job, model, prior, gpu in (
        (catalog_job, from_catalog, own, "A100"),
        (a40_job, from_a40, on_a40, "A40"),
    ):
        entry = JobSchedulingState.objects.get(job=job).online_params[gpu]
        assert entry["prior_params"] == wp.model_to_params(prior)
        plain = online_fit.fit_online(prior, pooled, workload="resnet50")
        assert model.iter_time_s(at(4 * B0)) == plain.iter_time_s(at(4 * B0))
        assert bend(model) > 3.0
    assert bend(estimated) < 1.05


def test_the_rounds_snapshot_the_refit_and_the_first_profile_predict_alike_far_from_the_reports(
    make_job, member, team
):
    # given a job of an unknown workload on an A40 (the catalog lacks both), drawing a third of
    # the way from idle to busy maximum
    make_a40_node(heartbeat=T0)
    job = make_job(
        owner=member, team=team, workload="mixed", resembles="resnet50", gpu_model="A40",
        min_gpus=1, max_gpus=1,
    )  # fmt: skip
    prior, source = wp.prior_for(
        "mixed", "A40", catalog=CATALOG, nvml=A40, hints=wp.JobHints(resembles="resnet50")
    )
    assert source == "estimated from catalog resnet50@A100"
    idle_w, busy_max_w = wp.gpu_draw_range_w(CATALOG, "A40", A40)

    # when its reports are recorded (the refit) and a round reads its model
    refit = record(
        job, reports(prior, idle_w + (busy_max_w - idle_w) / 3), gpu_model="A40", nvml=A40
    )
    snap = adapters.build_snapshot(now=T0, round_length_s=60.0).snapshot
    in_round = snap.job_perf[(str(job.pk), "A40")]

    # then at 4x the reported batch, on one GPU and on two, the round predicts what the fit
    # did (time and draw), and that is the draw's shape, not the prior's
    for n in (1, 2):
        far = at(4 * B0, n)
        assert in_round.iter_time_s(far) == refit.iter_time_s(far)
        assert in_round.power_w(far) == refit.power_w(far)
    assert bend(refit) == pytest.approx(1.0 + 3.0 / 3, rel=0.05)
    assert bend(prior) > 3.8
    # and when it finishes, the first profile of its workload is that same model
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED)
    assert wp.fold_finished_jobs(now=T0 + timedelta(minutes=1)) == 1
    profile = wp.model_from_params(WorkloadProfile.objects.get(workload="mixed").params)
    assert profile.iter_time_s(at(4 * B0)) == pytest.approx(refit.iter_time_s(at(4 * B0)), rel=1e-9)


def test_the_next_job_starts_from_the_profile_and_is_not_reshaped_by_its_own_draw(
    make_job, member, team
):
    # given a finished first job of an unknown workload that drew idle power (a flat time)
    prior = CATALOG.get("resnet50", "A100")
    first = make_job(owner=member, team=team, workload="loader-bound", resembles="resnet50")
    record(first, reports(prior, IDLE_W))
    Job.objects.filter(pk=first.pk).update(state=JobState.COMPLETED)
    wp.fold_finished_jobs(now=T0)

    # when a second job of the workload reports at the busy maximum
    second = make_job(owner=member, team=team, workload="loader-bound", resembles="resnet50")
    model = record(second, reports(prior, BUSY_MAX_W))

    # then its prior is the profile's model, stored as it is: what the first job learned
    # stands (the measurements it was fitted from stay with the profile)
    entry = JobSchedulingState.objects.get(job=second).online_params["A100"]
    assert entry["prior"] == "profile v1"
    profile = WorkloadProfile.objects.get(workload="loader-bound", version=1)
    assert entry["prior_params"] == {k: profile.params[k] for k in ("model", "gpu")}
    assert bend(model) == pytest.approx(1.0, abs=0.01)


def _a40_profile(workload: str, draws_w, *, limit_w: float | None = None, n_gpus: int = 1):
    """A profile of ``workload`` on the A40 fitted to NVML draws ``draws_w`` at per-GPU
    batches 32, 64, ... on ``n_gpus`` GPUs at ``limit_w`` (None: the default limit)."""
    seen = [
        Observation(
            n_gpus=n_gpus, n_nodes=1, local_batch=32.0 * 2**i, power_w=w, power_limit_w=limit_w
        )
        for i, w in enumerate(draws_w)
    ]
    model = wp.estimated_for(CATALOG.get(workload, "A100"), A40)
    fit = {"observations": [om.observation_to_dict(o) for o in seen]}
    WorkloadProfile.objects.create(
        workload=workload, gpu_model="A40", version=1, prior=f"catalog {workload}@A100",
        params=wp.model_to_params(model) | {"fit": fit}, created_at=T0,
    )  # fmt: skip


# Three workloads' draws measured on the A40: light work sits at 150 W, the most is 280 W.
A40_DRAWS = {"resnet50_cifar10": (150.0, 190.0, 230.0), "deepspeech2": (200.0, 210.0)} | {
    "bert": (260.0, 280.0)
}
FLOOR_W, TOP_W = 150.0, 280.0


def _a40_profiles(**how) -> None:
    for workload, draws in A40_DRAWS.items():
        _a40_profile(workload, draws, **how)


def _a40_job(make_job, member, team, draw_w: float) -> om.OnlinePerfModel:
    """A job of an unknown workload on an A40 drawing ``draw_w`` at ``B0``."""
    job = make_job(
        owner=member, team=team, workload="embedding-lookups", gpu_model="A40",
        min_gpus=1, max_gpus=1,
    )  # fmt: skip
    prior, _ = wp.prior_for("embedding-lookups", "A40", catalog=CATALOG, nvml=A40)
    return record(job, reports(prior, draw_w), gpu_model="A40", nvml=A40)


def test_the_draws_other_workloads_showed_on_a_gpu_model_set_where_light_work_sits(
    make_job, member, team
):
    # given three workloads whose jobs' NVML draws at the default limit taught profiles on
    # the A40 (the least 150 W, the most 280 W), and a job of an unknown workload there
    make_a40_node(heartbeat=T0)
    _a40_profiles()
    known = wp.measured_on_gpu("A40", catalog=CATALOG, exclude="embedding-lookups")
    assert {w: tuple(d) for w, d in known.items()} == A40_DRAWS
    assert om.measured_draw_span_w(known) == (FLOOR_W, TOP_W)

    # when it draws the floor, its draw is the floor at every batch (light work draws no
    # more as the batch grows), while its time still grows with the batch
    light = _a40_job(make_job, member, team, FLOOR_W)
    for b in (B0 / 4, B0, 4 * B0, 16 * B0):
        assert light.power_w(at(b)) == pytest.approx(FLOOR_W, rel=0.01)
    assert bend(light) > 1.05

    # and a job drawing half way up the span rises from the floor towards the most measured
    mid_w = (FLOOR_W + TOP_W) / 2
    mid = _a40_job(make_job, member, team, mid_w)
    assert mid.power_w(at(B0)) == pytest.approx(mid_w, rel=0.01)
    assert 0.9 * TOP_W < mid.power_w(at(16 * B0)) < 1.01 * TOP_W
    assert FLOOR_W < mid.power_w(at(B0 / 16)) < 1.1 * FLOOR_W


@pytest.mark.parametrize(
    "how", [{"limit_w": 200.0}, {"n_gpus": 2}], ids=["capped limit", "several GPUs"]
)
def test_draws_not_of_one_gpu_at_its_default_limit_or_too_few_workloads_set_no_floor(
    make_job, member, team, how
):
    # given the three profiles, fitted to draws at a capped limit or on two GPUs each (not
    # what one GPU draws at its default)
    make_a40_node(heartbeat=T0)
    _a40_profiles(**how)
    assert wp.measured_on_gpu("A40", catalog=CATALOG) == {}

    # when a job drawing 150 W reports, its draw is read against the estimated idle (37.5 W)
    # alone: it falls well below 150 W at small batches
    model = _a40_job(make_job, member, team, FLOOR_W)
    assert model.power_w(at(B0 / 16)) < 0.8 * FLOOR_W
    # and one workload measured is too few to say where light work sits
    assert om.measured_draw_span_w({"bert": A40_DRAWS["bert"]}) is None


def test_on_a_catalog_gpu_the_catalogs_own_models_set_the_floor(make_job, member, team):
    # given a job of an unknown workload on an A100 drawing the least any catalog model draws
    # there (resnet50_cifar10 at 64 per GPU, 200 W, four times the 50 W idle)
    known = wp.measured_on_gpu("A100", catalog=CATALOG, exclude="light")
    floor_w, busy_w = om.measured_draw_span_w(known)
    assert (floor_w, busy_w) == pytest.approx(om.draw_range_w(CATALOG_A100))
    job = make_job(owner=member, team=team, workload="light", resembles="resnet50")

    # when its reports are recorded
    model = record(job, reports(CATALOG.get("resnet50", "A100"), floor_w))

    # then its draw stays at that floor as the batch grows and shrinks
    for b in (B0 / 8, 8 * B0):
        assert model.power_w(at(b)) == pytest.approx(floor_w, rel=0.01)


CATALOG_A100 = [m for m in CATALOG.models() if m.gpu_model == "A100"]


def test_a_job_drawing_less_than_every_other_workload_is_predicted_its_own_draw_at_its_batch(
    make_job, member, team
):
    # given a job of an unknown workload on an A100 whose draw (100 W) is below the least any
    # catalog model draws there (the 200 W floor): lighter work than any measured
    known = wp.measured_on_gpu("A100", catalog=CATALOG, exclude="lighter")
    floor_w, _ = om.measured_draw_span_w(known)
    assert floor_w > 150.0
    job = make_job(owner=member, team=team, workload="lighter", resembles="resnet50")

    # when its reports are recorded
    model = record(job, reports(CATALOG.get("resnet50", "A100"), 100.0))

    # then it is predicted the draw it was measured at, at that batch (not the floor's)
    assert model.power_w(at(B0)) == pytest.approx(100.0, rel=0.01)
    assert model.power_w(at(B0 / 8)) <= 100.0 * 1.01


def test_a_job_on_several_gpus_above_the_floor_is_predicted_its_own_draw_at_its_batch(
    make_job, member, team
):
    # given a job of an unknown workload on two A100s drawing 260 W a GPU, between the
    # catalog's floor and busy maximum there (its GPUs wait part of each iteration on the
    # all-reduce, at the idle draw)
    job = make_job(owner=member, team=team, workload="two-gpu", resembles="resnet50", min_gpus=2)
    prior = CATALOG.get("resnet50", "A100")
    common = dict(n_gpus=2, n_nodes=1, local_batch=B0)
    t_s = prior.iter_time_s(at(B0, 2))
    seen = [Observation(iter_time_s=t_s, **common)] * 3 + [
        Observation(power_w=260.0, **common)
    ] * 10

    # when its reports are recorded
    model = record(job, seen)

    # then it is predicted the draw it was measured at, on two GPUs at its batch
    assert model.power_w(at(B0, 2)) == pytest.approx(260.0, rel=0.01)


def _profile(workload: str, version: int, seen, *, gpu_model: str = "A40") -> None:
    model = wp.estimated_for(CATALOG.get("bert", "A100"), A40)
    fit = {"observations": [om.observation_to_dict(o) for o in seen]}
    WorkloadProfile.objects.create(
        workload=workload, gpu_model=gpu_model, version=version, prior="catalog bert@A100",
        params=wp.model_to_params(model) | {"fit": fit}, created_at=T0,
    )  # fmt: skip


def test_the_draws_measured_are_each_workloads_newest_profiles_of_one_gpu_at_its_default(db):
    # given profiles on the A40 (highest limit 300 W, top clock 1740 MHz): two versions of
    # one workload, the job's own workload's, one on another GPU model, and draws at the
    # highest limit set explicitly, at the top clock set, below it, on two GPUs, capped
    def drew(w, **how):
        return Observation(n_nodes=1, local_batch=64.0, power_w=w, **({"n_gpus": 1} | how))

    _profile("a", 1, [drew(100.0), drew(400.0)])
    _profile("a", 2, [drew(150.0), drew(170.0, power_limit_w=300.0)])
    _profile("b", 1, [drew(200.0, sm_clock_mhz=1740), drew(90.0, sm_clock_mhz=1500)])
    _profile("b", 2, [drew(210.0), drew(80.0, n_gpus=2), drew(70.0, power_limit_w=250.0)])
    _profile("job", 1, [drew(60.0)])
    _profile("c", 1, [drew(50.0)], gpu_model="V100")
    _profile("d", 1, [Observation(n_gpus=1, n_nodes=1, local_batch=64.0, iter_time_s=0.1)])

    known = wp.measured_on_gpu("A40", catalog=CATALOG, exclude="job")

    # then only the newest version of each other workload counts, one GPU's draws at the
    # default limit (explicit or not) and top clock (explicit or not)
    assert {w: sorted(d) for w, d in known.items()} == {"a": [150.0, 170.0], "b": [210.0]}


def test_a_job_without_a_draw_at_the_default_does_not_read_the_other_workloads_profiles(
    make_job, member, team, django_assert_num_queries
):
    # given a job of an unknown workload whose reports carry no draw at the default limit
    prior, source = wp.prior_for("embedding-lookups", "A40", catalog=CATALOG, nvml=A40)
    timed = [o for o in reports(prior, FLOOR_W) if o.power_w is None]
    capped = [replace(o, power_limit_w=200.0) for o in reports(prior, FLOOR_W) if o.power_w]

    # when its prior is shaped, no query is made: there is no draw to read against a floor
    for seen in (timed, timed + capped):
        with django_assert_num_queries(0):
            shaped = wp.fit_prior(
                "embedding-lookups", prior, source, seen, catalog=CATALOG, nvml=A40
            )
        assert shaped is prior


def test_a_workloads_catalog_aliases_are_not_other_workloads_in_its_floor_pool(db):
    # given profiles on the A40 of resnet50 (light: 150 W at its smallest batch) and bert
    # (260-280 W); the catalog aliases imagenet to resnet50 (Pollux's imagenet is ResNet-50
    # on ImageNet, ElasticFlow's resnet50 on the A100)
    assert CATALOG.aliases()[("imagenet", "A100")] == "resnet50"
    _a40_profile("resnet50", (150.0, 190.0))
    _a40_profile("bert", (260.0, 280.0))

    # when an imagenet job's floor pool is read, resnet50's draws are its own network's:
    # one other workload (bert) is too few to set a floor
    known = wp.measured_on_gpu("A40", catalog=CATALOG, exclude="imagenet")
    assert {w: tuple(d) for w, d in known.items()} == {"bert": (260.0, 280.0)}
    assert om.measured_draw_span_w(known) is None

    # and for a job of a third workload, imagenet's profile beside resnet50's is one
    # workload measured twice, not two
    WorkloadProfile.objects.filter(workload="bert").delete()
    _a40_profile("imagenet", (170.0, 200.0))
    known = wp.measured_on_gpu("A40", catalog=CATALOG, exclude="embedding-lookups")
    assert len(known) == 1
    assert sorted(next(iter(known.values()))) == [150.0, 170.0, 190.0, 200.0]
    assert om.measured_draw_span_w(known) is None


@pytest.mark.parametrize("estimate", [False, True], ids=["kept off", "estimate on"])
def test_a_first_job_on_an_uncatalogued_gpu_gets_the_estimated_floor_only_when_turned_on(
    make_job, member, team, monkeypatch, estimate
):
    # given an A40 with no other workload measured on it, and a job drawing 90 W there
    # (ncf draws 84-90 W at every batch on a Zeus A40: light work with the clocks up)
    from scheduling.core import gpu_estimates

    monkeypatch.setattr(gpu_estimates, "ESTIMATE_FLOOR", estimate)
    make_a40_node(heartbeat=T0)
    assert wp.measured_on_gpu("A40", catalog=CATALOG) == {}
    draw_w = 90.0

    # when its reports are recorded
    job = make_job(
        owner=member, team=team, workload="embedding-lookups", gpu_model="A40",
        min_gpus=1, max_gpus=1,
    )  # fmt: skip
    prior, _ = wp.prior_for("embedding-lookups", "A40", catalog=CATALOG, nvml=A40)
    model = record(job, reports(prior, draw_w), gpu_model="A40", nvml=A40)
    stored = wp.stored_prior(JobSchedulingState.objects.get(job=job).online_params["A40"])

    if not estimate:
        # then by default (measured, not kept: docs/benchmarks.md, "A floor for the first
        # jobs on a new GPU model") it is read against the estimated idle alone, its draw
        # rising with the batch, and no floor is recorded
        assert model.power_w(at(16 * B0)) > 1.5 * draw_w
        assert "light_work_floor" not in stored.sources
        return
    # then, turned on, the floor carried from the catalog's GPUs (A100, T4) is above its
    # draw: it is read as light work, its draw flat at its own, and the stored prior says
    # the floor was estimated and from what
    for b in (B0 / 8, B0, 16 * B0):
        assert model.power_w(at(b)) == pytest.approx(draw_w, rel=0.02)
    assert stored.sources["light_work_floor"].endswith("W, estimated from A100,T4")
    floor_w = float(stored.sources["light_work_floor"].split()[0])
    spans = gpu_estimates.catalog_spans(CATALOG, exclude="embedding-lookups")
    assert floor_w == pytest.approx(gpu_estimates.estimated_floor_w(37.5, 300.0, spans), rel=1e-3)


@pytest.mark.parametrize("share", [None, 0.4], ids=["kept off", "on"])
def test_a_first_job_that_the_lower_limits_left_alone_is_read_flat_only_when_turned_on(
    make_job, member, team, monkeypatch, share
):
    # given an A40 with no other workload measured on it, and a job drawing 90 W there at
    # the default limit and at 275, 250, 225 and 200 W alike (ncf on a Zeus A40: 84-87 W at
    # every limit from 300 to 200 W, 83-91 W at every batch)
    monkeypatch.setattr(om, "LIGHT_DRAW_SHARE", share)
    make_a40_node(heartbeat=T0)
    assert wp.measured_on_gpu("A40", catalog=CATALOG) == {}
    draw_w = 90.0
    job = make_job(
        owner=member, team=team, workload="embedding-lookups", gpu_model="A40",
        min_gpus=1, max_gpus=1,
    )  # fmt: skip
    prior, _ = wp.prior_for("embedding-lookups", "A40", catalog=CATALOG, nvml=A40)
    t_s = prior.iter_time_s(at(B0)) * 1.5
    capped = [
        Observation(
            n_gpus=1,
            n_nodes=1,
            local_batch=B0,
            iter_time_s=t_s,
            power_w=draw_w,
            power_limit_w=limit_w,
        )  # fmt: skip
        for limit_w in (275.0, 250.0, 225.0, 200.0)
    ]

    # when its reports are recorded
    model = record(job, reports(prior, draw_w) + capped, gpu_model="A40", nvml=A40)
    stored = wp.stored_prior(JobSchedulingState.objects.get(job=job).online_params["A40"])

    if share is None:
        # then by default (measured, not kept: docs/benchmarks.md, "The first jobs' draw:
        # light work the limits did not touch") its draw climbs with the batch
        assert model.power_w(at(16 * B0)) > 1.5 * draw_w
        assert "light_work_draw" not in stored.sources
        return
    # then, turned on, 52.5 W above the A40's idle estimate (37.5 W) is 0.32 of the span up
    # to the 200 W limit that left it alone: its draw is flat at its own, and the stored
    # prior says so
    for b in (B0 / 8, B0, 16 * B0):
        assert model.power_w(at(b)) == pytest.approx(draw_w, rel=0.02)
    assert stored.sources["light_work_draw"] == "90 W at every batch"
