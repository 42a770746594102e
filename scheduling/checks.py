"""System checks of the live-scheduling settings (IDs scheduling.E0xx / W0xx)."""

from django.conf import settings
from django.core.checks import Error, Warning, register

# The agent's default heartbeat interval (telemetry/agent/__main__.py --heartbeat-interval-s).
AGENT_HEARTBEAT_INTERVAL_S = 15


@register()
def check_scheduling_settings(app_configs, **kwargs):
    from scheduling.core.registry import policy_names

    problems = []
    known = policy_names()
    if settings.WATTFLOW_DEFAULT_POLICY not in known:
        problems.append(
            Error(
                f"WATTFLOW_DEFAULT_POLICY={settings.WATTFLOW_DEFAULT_POLICY!r} is not a policy.",
                hint=f"Use one of: {', '.join(known)}.",
                id="scheduling.E001",
            )
        )
    from scheduling.executors import EXECUTOR_NAMES

    if settings.WATTFLOW_EXECUTOR not in EXECUTOR_NAMES:
        problems.append(
            Error(
                f"WATTFLOW_EXECUTOR={settings.WATTFLOW_EXECUTOR!r} is not an executor.",
                hint=f"Use one of: {', '.join(EXECUTOR_NAMES)}.",
                id="scheduling.E003",
            )
        )
    for name in ("WATTFLOW_ROUND_INTERVAL_S", "WATTFLOW_LIVENESS_INTERVAL_S"):
        if getattr(settings, name) < 1:
            problems.append(Error(f"{name} must be at least 1 second.", id="scheduling.E002"))
    if settings.WATTFLOW_NODE_TIMEOUT_S < 2 * AGENT_HEARTBEAT_INTERVAL_S:
        problems.append(
            Warning(
                f"WATTFLOW_NODE_TIMEOUT_S={settings.WATTFLOW_NODE_TIMEOUT_S} is under two agent "
                f"heartbeats ({AGENT_HEARTBEAT_INTERVAL_S} s each): one late heartbeat would "
                "mark a healthy node unhealthy and re-queue its jobs.",
                hint="Use at least 30 s, or shorten the agents' --heartbeat-interval-s.",
                id="scheduling.W001",
            )
        )
    return problems
