"""A long queue of waiting jobs costs the engine nothing per round beyond the planner's
own look at it: applying a plan and advancing the jobs touch only the jobs that hold GPUs
or are given some (``Simulator._holding``), in the active set's order, so the results
are those of a walk over every active job."""

from __future__ import annotations

from scheduling.core.perf_models import load_catalog
from scheduling.core.types import Job
from scheduling.simulator.cluster_spec import ClusterSpec
from scheduling.simulator.engine import SimConfig, Simulator
from scheduling.simulator.knowledge import LearnedKnowledge
from scheduling.simulator.scenario import core_planner
from scheduling.simulator.state import JobRecord


class CountingRecord(JobRecord):
    """A job record that counts how often its allocation is read while it has none."""

    reads_while_waiting = 0

    @property
    def allocation(self):
        value = self.__dict__.get("_alloc")
        if value is None:
            CountingRecord.reads_while_waiting += 1
        return value

    @allocation.setter
    def allocation(self, value) -> None:
        self.__dict__["_alloc"] = value


def tiny_jobs(n: int) -> list[Job]:
    # one-iteration jobs, all there at once, one per T4 (the catalog's bert and cifar10)
    return [
        Job(
            job_id=f"t{i:03d}",
            workload=("bert", "cifar10")[i % 2],
            team="default",
            submit_time_s=float(i % 3),
            total_iters=1.0,
            global_batch=(32, 128)[i % 2],
        )
        for i in range(n)
    ]


def simulator(jobs: list[Job], *, records=JobRecord) -> Simulator:
    sim = Simulator(
        jobs,
        cluster=ClusterSpec(
            name="one", gpu_model="T4", switches=1, nodes_per_switch=1, gpus_per_node=2
        ).build(),
        catalog=load_catalog(),
        planner=core_planner("fifo"),
        config=SimConfig(round_length_s=300.0),
    )
    sim._records = [records(spec=r.spec) for r in sim._records]
    return sim


def test_waiting_jobs_are_not_looked_at_by_the_engine_each_round():
    # given 120 one-iteration jobs queued on 2 GPUs: 60 rounds, each starting two of them
    n = 120
    sim = simulator(tiny_jobs(n), records=CountingRecord)
    CountingRecord.reads_while_waiting = 0

    # when the run goes to its end
    result = sim.run()

    # then every job finished, and a waiting job's allocation was read a bounded number
    # of times in all (its first snapshot, its start), not once a round per waiting job
    # (a walk over the active set in each round's plan and advance: about 3 x 120^2 / 2)
    assert result.stopped_early is False
    assert sum(r.finish_s is not None for r in result.jobs) == n
    assert len(result.timeline) >= n // 2
    assert CountingRecord.reads_while_waiting <= 4 * n


def test_jobs_not_measured_yet_ask_for_their_prior_once_per_shape_a_round(monkeypatch):
    # given learned knowledge and 60 waiting jobs of two workloads, one batch each
    knowledge = LearnedKnowledge(load_catalog())
    asked = []
    prior = knowledge.prior

    def counted(job, gpu_model, first=None):
        asked.append(job.job_id)
        return prior(job, gpu_model, first)

    monkeypatch.setattr(knowledge, "prior", counted)
    looked_up = []
    has = knowledge.catalog.has

    def counted_has(workload, gpu_model):
        looked_up.append(workload)
        return has(workload, gpu_model)

    monkeypatch.setattr(knowledge.catalog, "has", counted_has)
    jobs = tiny_jobs(60)

    # when a round's models are looked up
    models = knowledge.job_perf(jobs, ["T4"])

    # then the prior is chosen, and the catalog asked, once per workload; and every job
    # gets the model it gets when asked alone
    assert asked == ["t000", "t001"]
    assert looked_up == ["bert", "cifar10"]
    for j in jobs:
        assert models[(j.job_id, "T4")] is knowledge.job_perf([j], ["T4"])[(j.job_id, "T4")]


def test_the_long_queue_generator_writes_what_the_simulator_reads(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import long_queue_gen

    from scheduling.simulator.cluster_spec import read_cluster_spec
    from scheduling.simulator.traces import read_elasticflow_trace

    # given the generator run for two sizes
    long_queue_gen.main([str(tmp_path), "--jobs", "7,12"])

    # then each trace holds its count of one-iteration one-GPU jobs 1.7 s apart, cycling
    # through the T4 workloads, the smaller one the larger one's first rows
    small = read_elasticflow_trace(tmp_path / "elasticflow_tiny7.csv")
    large = read_elasticflow_trace(tmp_path / "elasticflow_tiny12.csv")
    assert small == large[:7] and len(large) == 12
    assert [j.submit_time_s for j in large[:3]] == [0.0, 1.7, 3.4]
    assert {(j.total_iters, j.requested_gpus) for j in large} == {(1.0, 1)}
    assert [j.workload for j in large[:7]] == list(long_queue_gen.T4) + ["bert"]
    # and the cluster is 5 nodes of 3 T4
    cluster = read_cluster_spec(tmp_path / "n5g3_t4.json").build()
    assert len(cluster.gpus) == 15 and {g.model for g in cluster.gpus} == {"T4"}


def test_a_round_makes_neither_a_reason_nor_a_view_per_waiting_job(monkeypatch):
    # given 120 one-iteration jobs queued on 2 GPUs under FIFO (60 rounds)
    import scheduling.core.policies.fifo as fifo
    import scheduling.core.round as round_mod

    made = {"reasons": 0, "views": 0}
    real_reason, real_view = fifo.behind_in_queue, round_mod.JobView

    def reason(*args):
        made["reasons"] += 1
        return real_reason(*args)

    def view(*args):
        made["views"] += 1
        return real_view(*args)

    monkeypatch.setattr(fifo, "behind_in_queue", reason)
    monkeypatch.setattr(round_mod, "JobView", view)
    n = 120
    sim = simulator(tiny_jobs(n))

    # when the run goes to its end
    result = sim.run()

    # then every job finished with each round's waiting jobs counted by code, and the
    # rounds made a reason for the first blocked job of each and a view for each job's
    # arrival and start (about 2 x 120), not one of each per waiting job per round (about
    # 120^2 / 2 + 120^2 / 4 = 3,600 each, which the queue loop and admission made before)
    assert sum(r.finish_s is not None for r in result.jobs) == n
    waited = sum(s.waiting_jobs for s in result.timeline)
    assert waited > 3000
    assert result.wait_codes == {"behind_in_queue": waited}
    assert made["reasons"] <= len(result.timeline)
    assert made["views"] <= 2 * n + len(result.timeline)
