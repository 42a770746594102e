"""netdelay's auto-tuner takes its replay as a callable: the core never imports the
simulator, whose replay installs itself as the default."""

from __future__ import annotations

import subprocess
import sys

from corekit import job, make_cluster

from scheduling.core.netdelay_tuner import tune_delay
from scheduling.core.perf_models import load_catalog

CLUSTER = make_cluster(1, 2, 4)


def test_a_passed_replay_scores_each_candidate_and_the_best_wins():
    calls = []

    def replay(
        jobs, *, cluster, catalog, policy_params, congestion, round_length_s, restart_cost_s
    ):
        calls.append((dict(policy_params), congestion, round_length_s, restart_cost_s))
        k = policy_params["delay_per_sensitivity_s"]
        return (100.0 + abs(k - 3000.0), 500.0)  # best at 3000 s

    result = tune_delay(
        [job("a"), job("b")],
        cluster=CLUSTER,
        catalog=load_catalog(),
        candidates_s=(6000.0, 0.0, 3000.0),
        congestion=2.0,
        round_length_s=120.0,
        replay=replay,
    )
    assert result.best_s == 3000.0
    assert result.scores == {0.0: (3100.0, 500.0), 3000.0: (100.0, 500.0), 6000.0: (3100.0, 500.0)}
    # Each replay runs netdelay at one candidate with tuning off, under the given congestion.
    assert [c[0]["delay_per_sensitivity_s"] for c in calls] == [0.0, 3000.0, 6000.0]
    assert all(c[0]["tune_every_s"] is None and c[0]["congestion"] == 2.0 for c in calls)
    assert {c[1:] for c in calls} == {(2.0, 120.0, 30.0)}


def test_the_core_and_its_policies_import_without_the_simulator():
    code = (
        "import sys, scheduling.core.round, scheduling.core.policies.netdelay;"
        "print(sorted(m for m in sys.modules if m.startswith('scheduling.simulator')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
