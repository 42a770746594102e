"""Every trace in data/trace/ parses into Job value objects with exact row counts."""

from __future__ import annotations

import csv
import random
from pathlib import Path

import pytest

from scheduling.core.perf_models import load_catalog
from scheduling.core.types import GpuConfig
from scheduling.simulator.traces import (
    TraceError,
    philly_model_for,
    pollux_modal_batches,
    pollux_total_iters,
    read_elasticflow_trace,
    read_philly_week,
    read_pollux_workload,
    read_trace,
    with_arrival_scale,
    with_batch_range,
)

DATA = Path(__file__).resolve().parents[2] / "data"
TRACE = DATA / "trace"


class LinearSpeed:
    """Analytic speed model for the philly mapping: iteration time 0.5 s / n GPUs."""

    idle_power_w = 30.0

    def iter_time_s(self, cfg: GpuConfig) -> float:
        return 0.5 / cfg.n_gpus


class LinearCatalog:
    def get(self, workload: str, gpu_model: str) -> LinearSpeed:
        return LinearSpeed()

    def workloads(self) -> tuple[str, ...]:
        return ("cifar10", "ncf", "deepspeech2", "bert", "yolov3", "imagenet")


def test_elasticflow_trace_reads_all_876_jobs_with_their_request():
    jobs = read_elasticflow_trace(TRACE / "elasticflow_philly_876.csv")
    assert len(jobs) == 876
    first = next(j for j in jobs if j.job_id == "0")
    assert (first.workload, first.submit_time_s, first.total_iters) == ("vgg16", 0.0, 1282877.0)
    assert (first.global_batch, first.requested_gpus, first.min_gpus, first.max_gpus) == (
        256,
        1,
        1,
        64,
    )
    second = next(j for j in jobs if j.job_id == "1")
    assert (second.submit_time_s, second.total_iters, second.requested_gpus) == (
        219316.0,
        26446831.0,
        4,
    )
    assert {j.workload for j in jobs} == {
        "bert",
        "deepspeech2",
        "gpt2",
        "inception3",
        "resnet50",
        "vgg16",
    }
    assert [j.submit_time_s for j in jobs] == sorted(j.submit_time_s for j in jobs)


@pytest.mark.parametrize("n", range(1, 9))
def test_pollux_workloads_read_160_jobs_each_with_measured_iterations(n):
    jobs = read_pollux_workload(TRACE / f"pollux_workload-{n}.csv", perf_dir=DATA / "perf")
    assert len(jobs) == 160
    for job in jobs:
        assert job.total_iters == pollux_total_iters(DATA / "perf", job.workload, job.global_batch)


def test_pollux_total_iterations_come_from_the_last_validation_row():
    # data/perf/pollux_t4/cifar10/validation-2048.csv ends at iteration 3178
    assert pollux_total_iters(DATA / "perf", "cifar10", 2048) == 3178.0
    jobs = read_pollux_workload(TRACE / "pollux_workload-1.csv", perf_dir=DATA / "perf")
    first = jobs[0]
    assert (first.job_id, first.workload, first.submit_time_s) == ("cifar10-0", "cifar10", 107.0)
    assert (first.requested_gpus, first.global_batch, first.total_iters) == (6, 2048, 3178.0)


def test_pollux_modal_batches_are_the_most_used_batch_per_application():
    assert pollux_modal_batches(TRACE) == {
        "bert": 384,
        "cifar10": 2048,
        "deepspeech2": 320,
        "imagenet": 6400,
        "ncf": 32768,
        "yolov3": 64,
    }


def test_philly_week_maps_12751_jobs_by_gpu_time_bucket():
    batches = pollux_modal_batches(TRACE)
    jobs = read_philly_week(
        TRACE / "philly_week.csv", catalog=LinearCatalog(), gpu_model="T4", batches=batches, seed=3
    )
    assert len(jobs) == 12751
    assert min(j.submit_time_s for j in jobs) == 0.0
    # The first row: 66 s on 1 GPU, 2017-10-09 07:01:55 (the week starts 00:01:56).
    first = next(j for j in jobs if j.job_id == "philly-1")
    assert first.workload in {"cifar10", "ncf"}
    assert first.submit_time_s == 7 * 3600 - 1.0
    assert first.total_iters == pytest.approx(66.0 / 0.5, abs=1e-9)
    assert first.team == "11cb48"
    assert first.global_batch == batches[first.workload]
    # Speed at the requested GPUs makes every job last its measured duration there.
    with (TRACE / "philly_week.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    for job in jobs:
        row = rows[int(job.job_id.removeprefix("philly-")) - 1]
        assert job.requested_gpus == int(row["num_gpus"])
        assert job.total_iters * 0.5 / job.requested_gpus == pytest.approx(float(row["duration"]))
    counts = {}
    for job in jobs:
        counts[job.workload] = counts.get(job.workload, 0) + 1
    assert set(counts) <= {"cifar10", "ncf", "deepspeech2", "bert", "yolov3", "imagenet"}
    assert counts["imagenet"] + counts["yolov3"] + counts["bert"] + counts["deepspeech2"] > 0


def test_philly_mapping_is_deterministic_for_a_seed_and_varies_across_seeds():
    batches = pollux_modal_batches(TRACE)

    def read(seed):
        path = TRACE / "philly_week.csv"
        return read_philly_week(
            path, catalog=LinearCatalog(), gpu_model="T4", batches=batches, seed=seed
        )

    a, b, c = read(7), read(7), read(8)
    assert a == b
    assert [j.workload for j in a] != [j.workload for j in c]


def test_gpu_time_buckets_follow_pollux():
    rng = random.Random(0)
    assert philly_model_for(3599.0, rng) in {"cifar10", "ncf"}
    assert philly_model_for(3600.0, rng) in {"deepspeech2", "bert"}
    assert philly_model_for(99 * 3600.0, rng) == "yolov3"
    assert philly_model_for(100 * 3600.0, rng) == "imagenet"


def test_read_trace_dispatches_on_the_file_name():
    assert len(read_trace(TRACE / "pollux_workload-3.csv", data_dir=DATA)) == 160
    assert len(read_trace(TRACE / "elasticflow_philly_876.csv", data_dir=DATA)) == 876


def test_unknown_or_broken_traces_are_refused_with_one_line(tmp_path):
    with pytest.raises(TraceError, match="unknown trace format"):
        read_trace(TRACE / "cluster_n16g8.csv", data_dir=DATA)
    with pytest.raises(TraceError, match="philly_week needs the perf catalog"):
        read_trace(TRACE / "philly_week.csv", data_dir=DATA)
    bad = tmp_path / "elasticflow_bad.csv"
    bad.write_text(
        "job_id,submit_time,model_name,batch_size,num_gpu,iteration\n0,zero,vgg16,256,1,10\n"
    )
    with pytest.raises(
        TraceError, match=r"elasticflow_bad.csv:2: submit_time='zero' is not a number"
    ):
        read_trace(bad, data_dir=DATA)
    missing = tmp_path / "elasticflow_missing.csv"
    missing.write_text("job_id,submit_time\n0,0\n")
    with pytest.raises(TraceError, match="missing column"):
        read_trace(missing, data_dir=DATA)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("0,nan,vgg16,256,1,10", r":2: submit_time='nan' is not a finite number"),
        ("0,0,vgg16,256,1,inf", r":2: iteration='inf' is not a finite number"),
        ("0,0,vgg16,0,1,10", r":2: batch_size='0' must be positive"),
        ("0,0,vgg16,256,0,10", r":2: num_gpu='0' must be positive"),
        ("0,0,vgg16,256,1,0", r":2: iteration='0' must be positive"),
        # a job without an id ran, and its row of the results named no job
        (",0,vgg16,256,1,10", r":2: job_id='' is blank \(a job id\)"),
        ("  ,0,vgg16,256,1,10", r":2: job_id='  ' is blank \(a job id\)"),
        ("0,-5,vgg16,256,1,10", r":2: submit_time='-5' is negative"),
        ("0,0,vgg16,0.5,1,10", r":2: batch_size='0.5' is not a whole number"),
        ("0,0,vgg16,256.9,1,10", r":2: batch_size='256.9' is not a whole number"),
        ("0,0,vgg16,256,-0.5,10", r":2: num_gpu='-0.5' is negative"),
        # finite but absurd: the run never ended, one budget period per step
        ("0,1e308,vgg16,256,1,10", r":2: submit_time='1e308' is more than 3.15576e\+09"),
        ("0,0,vgg16,256,1,1e308", r":2: iteration='1e308' is more than 1e\+12"),
        # a row longer than the header: the fields past it were dropped without a word, so
        # an iteration count written with a thousands separator ran as 1 iteration
        ("0,0,vgg16,256,1,1,000", r":2: 7 fields where the header has 6 \(extra: '000'\)"),
        # a batch smaller than the GPUs asked for: fifo ran 2 samples a step on 4 GPUs
        ("0,0,vgg16,2,4,10", r":2: batch_size=2 is smaller than num_gpu=4: each GPU computes"),
    ],
)
def test_a_trace_row_the_scheduler_cannot_use_is_refused_by_line(tmp_path, row, message):
    # A NaN or infinite count, or a zero batch, used to pass the reader and fail deep in
    # the round (a goodput ValueError, an OverflowError in the price) with a traceback.
    bad = tmp_path / "elasticflow_bad.csv"
    bad.write_text(f"job_id,submit_time,model_name,batch_size,num_gpu,iteration\n{row}\n")
    with pytest.raises(TraceError, match=message):
        read_trace(bad, data_dir=DATA)


def test_a_job_id_seen_twice_is_refused_by_name(tmp_path):
    # It used to pass the reader and stop the simulator with a traceback.
    dup = tmp_path / "elasticflow_dup.csv"
    dup.write_text(
        "job_id,submit_time,model_name,batch_size,num_gpu,iteration\n"
        "7,0,vgg16,256,1,10\n7,5,vgg16,256,1,10\n8,9,vgg16,256,1,10\n"
    )
    with pytest.raises(TraceError, match=r"elasticflow_dup.csv: job id\(s\) '7' appear more"):
        read_trace(dup, data_dir=DATA)


def test_jobs_submitted_at_the_same_time_come_in_job_id_order_whatever_the_rows_order(tmp_path):
    # Equal submit times kept their file order, so shuffling a trace's rows changed which
    # job the engine met first: a learned run's JCTs moved, and --max-jobs kept other jobs.
    rows = ["b,5,vgg16,256,1,10", "a,5,vgg16,256,1,10", "c,0,vgg16,256,1,10", "d,5,vgg16,256,1,9"]
    orders = []
    for n, order in enumerate((rows, rows[::-1], rows[2:] + rows[:2])):
        path = tmp_path / f"elasticflow_{n}.csv"
        path.write_text(
            "job_id,submit_time,model_name,batch_size,num_gpu,iteration\n" + "\n".join(order)
        )
        orders.append([j.job_id for j in read_trace(path, data_dir=DATA)])
    assert orders == [["c", "a", "b", "d"]] * 3


def test_a_trace_saved_with_a_byte_order_mark_reads_as_without(tmp_path):
    # A spreadsheet's "CSV UTF-8" starts with one: it was refused as missing job_id.
    text = "job_id,submit_time,model_name,batch_size,num_gpu,iteration\n0,0,vgg16,256,1,10\n"
    (tmp_path / "elasticflow_bom.csv").write_text("\ufeff" + text, encoding="utf-8")
    (tmp_path / "elasticflow_plain.csv").write_text(text, encoding="utf-8")

    bom = read_trace(tmp_path / "elasticflow_bom.csv", data_dir=DATA)

    assert bom == read_trace(tmp_path / "elasticflow_plain.csv", data_dir=DATA)


def test_a_trace_that_is_not_utf8_is_refused_in_one_line(tmp_path):
    # (a UnicodeDecodeError escaped `manage.py replay_trace` and the simulator as a traceback)
    path = tmp_path / "elasticflow_latin1.csv"
    path.write_bytes(
        b"job_id,submit_time,model_name,batch_size,num_gpu,iteration\n0,0,vgg16\xff,256,1,10\n"
    )

    with pytest.raises(TraceError, match=r"^elasticflow_latin1.csv: not UTF-8 text \(invalid"):
        read_trace(path, data_dir=DATA)


def test_philly_week_on_a_gpu_the_catalog_lacks_models_for_is_refused_by_name():
    # The reader needs each model's speed on the cluster's GPU; on the A100 the catalog has
    # no ncf, and the UnknownPerfModelError (a KeyError) escaped the CLI as a traceback.
    with pytest.raises(TraceError, match="philly_week.csv: no perf model of 'ncf' on A100"):
        read_trace(
            TRACE / "philly_week.csv", data_dir=DATA, catalog=load_catalog(), gpu_model="A100"
        )


def test_pollux_rows_need_at_least_one_gpu(tmp_path):
    pollux = tmp_path / "pollux_workload-9.csv"
    pollux.write_text("name,time,application,num_replicas,batch_size\ncifar10-0,1,cifar10,0,128\n")
    with pytest.raises(TraceError, match=r"pollux_workload-9.csv:2: num_replicas='0' must be"):
        read_trace(pollux, data_dir=DATA)
    # A batch smaller than its GPUs: each GPU computes at least one sample a step.
    pollux.write_text("name,time,application,num_replicas,batch_size\nbert-0,1,bert,16,12\n")
    with pytest.raises(TraceError, match=r"-9.csv:2: batch_size=12 is smaller than num_replicas"):
        read_trace(pollux, data_dir=DATA)


def test_batch_range_and_arrival_scale_change_only_what_they_say():
    jobs = read_elasticflow_trace(TRACE / "elasticflow_philly_876.csv")[:3]
    ranged = with_batch_range(jobs, 4)
    assert [(j.min_batch, j.max_batch) for j in ranged] == [
        (j.global_batch, 4 * j.global_batch) for j in jobs
    ]
    assert [j.global_batch for j in ranged] == [j.global_batch for j in jobs]
    dense = with_arrival_scale(jobs, 0.25)
    assert [j.submit_time_s for j in dense] == [0.25 * j.submit_time_s for j in jobs]
    assert [j.total_iters for j in dense] == [j.total_iters for j in jobs]
    with pytest.raises(TraceError, match="at least 1"):
        with_batch_range(jobs, 0)
    with pytest.raises(TraceError, match="must be positive"):
        with_arrival_scale(jobs, 0.0)


def test_an_arrival_scale_that_puts_a_submit_past_a_century_is_refused():
    from scheduling.simulator.traces import with_arrival_scale

    jobs = read_trace(DATA / "trace" / "pollux_workload-1.csv", data_dir=DATA)
    assert with_arrival_scale(jobs, 10.0)
    with pytest.raises(TraceError, match="arrival scale of 1e\\+12 puts the last submit"):
        with_arrival_scale(jobs, 1e12)


def test_a_philly_week_trace_spanning_centuries_is_refused_by_job(tmp_path):
    from scheduling.core.perf_models import load_catalog

    bad = tmp_path / "philly_week_far.csv"
    bad.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 07:01:55,66.0,1,66.0,a\n"
        "9999-10-09 07:01:55,66.0,1,66.0,a\n"
    )
    with pytest.raises(TraceError, match="philly_week_far.csv: job philly-2 is submitted"):
        read_trace(bad, data_dir=DATA, catalog=load_catalog(), gpu_model="T4")


def test_a_pollux_row_at_a_batch_pollux_never_ran_names_the_measured_batches(tmp_path):
    # given Pollux rows at a batch cifar10 was never run at, and of an application it lacks
    pollux = tmp_path / "pollux_workload-9.csv"
    pollux.write_text(
        "name,time,application,num_replicas,batch_size\ncifar10-0,1,cifar10,1,128\n"
        "cifar10-1,2,cifar10,1,100\n"
    )
    # then the refusal names the row and the batches measured, not a file it could not open
    measured = "128, 256, 512, 1024, 2048, 4096"
    with pytest.raises(
        TraceError,
        match=rf"-9.csv:3: cifar10 has no Pollux run at batch_size=100; .* are {measured}",
    ):
        read_trace(pollux, data_dir=DATA)
    pollux.write_text("name,time,application,num_replicas,batch_size\nx-0,1,resnet9,1,128\n")
    with pytest.raises(TraceError, match=r"-9.csv:2: application 'resnet9' has no Pollux runs"):
        read_trace(pollux, data_dir=DATA)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        # blank lines (a spreadsheet's empty rows) before the bad row: it named line 3
        (
            "elasticflow_b.csv",
            "job_id,submit_time,model_name,batch_size,num_gpu,iteration\n\n"
            "0,0,vgg16,256,1,10\n\n\n1,0,vgg16,256,1,abc\n",
            "elasticflow_b.csv:6: iteration='abc' is not a number",
        ),
        # a quoted job id holding a line break: it named line 3
        (
            "elasticflow_q.csv",
            'job_id,submit_time,model_name,batch_size,num_gpu,iteration\n"a\nb",0,vgg16,256,1,10\n'
            "1,0,vgg16,256,1,-5\n",
            "elasticflow_q.csv:4: iteration='-5' is negative",
        ),
        (
            "pollux_workload-9.csv",
            "name,time,application,num_replicas,batch_size\n\ncifar10-0,1,cifar10,0,128\n",
            "pollux_workload-9.csv:3: num_replicas='0' must be positive",
        ),
        (
            "philly_week_b.csv",
            "timestamp,duration,num_gpus,gpu_time,cluster\n\n2017-10-09 07:01:55,66,1,66,a\n"
            "\n2017-10-09 07:01:55,-1,1,66,a\n",
            "philly_week_b.csv:5: duration='-1' is negative",
        ),
    ],
)
def test_a_bad_row_after_blank_lines_or_a_line_break_is_named_by_its_own_line(
    tmp_path, name, text, message
):
    (tmp_path / name).write_text(text, encoding="utf-8")

    with pytest.raises(TraceError) as caught:
        read_trace(tmp_path / name, data_dir=DATA, catalog=LinearCatalog(), gpu_model="T4")

    assert str(caught.value) == message


def test_philly_job_ids_count_rows_not_lines(tmp_path):
    # blank lines do not move the ids (philly-N is the N-th row)
    rows = "2017-10-09 07:01:55,66,1,66,a\n2017-10-09 07:03:55,66,1,66,a\n"
    head = "timestamp,duration,num_gpus,gpu_time,cluster\n"
    (tmp_path / "philly_week_b.csv").write_text(head + "\n" + rows.replace("\n", "\n\n"))

    jobs = read_trace(
        tmp_path / "philly_week_b.csv", data_dir=DATA, catalog=LinearCatalog(), gpu_model="T4"
    )

    assert [j.job_id for j in jobs] == ["philly-1", "philly-2"]
