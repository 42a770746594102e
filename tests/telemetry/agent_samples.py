"""Builders of agent sample dicts in the wire format (imported by the telemetry tests)."""

from datetime import datetime, timedelta


def sample(gpu_uuid: str, ts: datetime, **overrides) -> dict:
    values = {
        "gpu_uuid": gpu_uuid,
        "ts": ts.isoformat(),
        "power_w": 250.0,
        "energy_j": None,
        "util_pct": 90.0,
        "mem_used_mib": 2048.0,
        "temp_c": 60.0,
        "sm_clock_mhz": 1410,
        "power_limit_w": 400.0,
    }
    values.update(overrides)
    return values


def series(gpu_uuid: str, start: datetime, seconds: int, **overrides) -> list[dict]:
    return [sample(gpu_uuid, start + timedelta(seconds=s), **overrides) for s in range(seconds)]
