"""Read-only queries over recorded rounds for pages.

The round summary is built in one place, ``scheduling.summaries``; pages take it from here.
"""

from __future__ import annotations

from datetime import datetime

from scheduling.models import SchedulingRound
from scheduling.summaries import latest_round_summary, placement_label, round_summary

__all__ = ["latest_round_summary", "placement_label", "round_summary", "running_jobs_series"]


def running_jobs_series(start: datetime, end: datetime) -> list[tuple[datetime, int]]:
    """(round start, jobs running after it) of the cluster's rounds in [start, end]."""
    return list(
        SchedulingRound.objects.filter(started_at__gte=start, started_at__lte=end)
        .order_by("started_at", "id")
        .values_list("started_at", "running_jobs")
    )
