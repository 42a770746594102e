"""The fixed "now" of the telemetry tests that pass time in (ingestion tests use the real
clock). A module of its own: test files imported it from ``conftest``, which names
tests/api's conftest instead when both directories are collected in one run."""

from datetime import UTC, datetime

T0 = datetime(2026, 11, 22, 3, 0, 0, tzinfo=UTC)
