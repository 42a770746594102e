"""A job's environment is the agent's, without the agent's own secret: the node's token.

Found by a probe: ``ProcessJob.environment`` copied the agent's whole environment, and
``WATTFLOW_AGENT_TOKEN`` is where the agent's token is documented to go (it keeps it out of
``ps``; ``scripts/sim_agent.sh`` and the compose file put it there). Every job of every
team on the node got the token that speaks for the node (its samples, its allocations'
events: other teams' jobs there), and a script that prints its environment (``env`` in a
wrapper) sent it in its log tail to the server, shown to the job's team."""

import sys

from telemetry.agent.runners import ProcessRunner
from tests.support.polling import wait_for


def test_the_job_does_not_inherit_the_agents_token(tmp_path, monkeypatch):
    monkeypatch.setenv("WATTFLOW_AGENT_TOKEN", "wfa_secret-of-node-01")
    monkeypatch.setenv("SOMETHING_ELSE", "kept")
    runner = ProcessRunner(tmp_path, stop_grace_s=1.0)
    script = tmp_path / "env.py"
    script.write_text(
        "import os\n"
        "print('token:', os.environ.get('WATTFLOW_AGENT_TOKEN'))\n"
        "print('other:', os.environ.get('SOMETHING_ELSE'))\n"
    )
    assignment = {
        "allocation_id": 1, "job_id": 7, "command": f"{sys.executable} {script}",
        "gpu_uuids": ["GPU-0"], "gpu_count": 1, "batch_size": 256,
        "checkpoint_dir": str(tmp_path / "ckpt"), "total_iterations": 100,
        "completed_iterations": 0.0, "env": {},
    }  # fmt: skip
    runner.start(assignment, [0])
    ended = wait_for(lambda: runner.ended(7), timeout_s=20.0, what="the job's exit")
    tail = ended.log_tail
    assert "other: kept" in tail
    assert "token: None" in tail
    assert "wfa_secret" not in tail
