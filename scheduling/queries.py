"""Read-only queries over recorded rounds for pages.

The round summary is built in one place, ``scheduling.summaries``; pages take it from here.
"""

from scheduling.summaries import latest_round_summary, round_summary

__all__ = ["latest_round_summary", "round_summary"]
