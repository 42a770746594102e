"""Jobs for tests whose rounds run at a fixed clock."""

from collections.abc import Callable
from datetime import datetime, timedelta


def submitted_before(make_job: Callable, t0: datetime, lead: timedelta = timedelta(minutes=1)):
    """``make_job`` (the conftest fixture) with each job submitted ``lead`` before ``t0``
    unless the test gives its own time: a round leaves out a job submitted after its clock
    (it waits for the next round), so tests whose rounds run at ``t0`` submit before it."""

    def make(**fields):
        fields.setdefault("at", t0 - lead)
        return make_job(**fields)

    return make
