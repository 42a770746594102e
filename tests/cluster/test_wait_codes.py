"""Why a job waits: one choices class holds every code, and the database refuses any other."""

import pytest
from django.db import IntegrityError, transaction

from cluster.choices import WaitCode
from cluster.models import Job
from scheduling.core.types import WaitCode as CoreWaitCode


def test_every_code_the_core_can_give_is_a_choice_with_a_human_label_and_colour():
    for code in CoreWaitCode:
        choice = WaitCode(code.value)
        assert choice.label and choice.label != code.value
        assert choice.colour


def test_service_codes_are_choices_too():
    assert WaitCode.NODE_LOST.value == "node_lost"
    assert set(WaitCode.values) - {c.value for c in CoreWaitCode} == {
        "node_lost",
        "slurm_refused",
        "slurm_pending",
        "slurm_lost",
    }


def test_the_database_refuses_a_code_outside_the_choices(make_job, member, team):
    job = make_job(owner=member, team=team)
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(pending_reason_code="no_capacity")
    job.refresh_from_db()
    assert job.pending_reason_code == ""
