"""The executor setting: the agents by default, Slurm when asked, anything else refused."""

import pytest
from django.core.checks import run_checks

from scheduling.executors import get_executor
from scheduling.executors.agent import AgentExecutor
from scheduling.executors.slurm import SlurmExecutor


def test_the_agents_are_the_default_executor_and_carry_out_nothing(settings):
    assert settings.WATTFLOW_EXECUTOR == "agent"
    executor = get_executor()
    assert isinstance(executor, AgentExecutor)
    assert executor.carries_out is False


def test_slurm_executor_takes_its_settings(settings):
    settings.WATTFLOW_EXECUTOR = "slurm"
    settings.WATTFLOW_SLURM_CONF = "/etc/slurm-test/slurm.conf"
    settings.WATTFLOW_SLURM_PARTITION = "gpu-energy"
    settings.WATTFLOW_SLURM_ACCOUNT = "wattflow-ops"
    settings.WATTFLOW_SLURM_RESERVATION = "wattflow-pilot"
    settings.WATTFLOW_SLURM_OUTPUT_DIR = "/shared/wattflow/out"

    executor = get_executor()

    assert isinstance(executor, SlurmExecutor)
    assert executor.cli.conf == "/etc/slurm-test/slurm.conf"
    assert (executor.partition, executor.account, executor.reservation) == (
        "gpu-energy",
        "wattflow-ops",
        "wattflow-pilot",
    )
    assert str(executor.output_path(7)) == "/shared/wattflow/out/wattflow-job-7.out"


def test_an_unknown_executor_is_a_system_check_error(settings):
    settings.WATTFLOW_EXECUTOR = "kubernetes"

    errors = [m for m in run_checks() if m.id == "scheduling.E003"]

    assert [e.msg for e in errors] == ["WATTFLOW_EXECUTOR='kubernetes' is not an executor."]
    with pytest.raises(ValueError, match="kubernetes"):
        get_executor()
