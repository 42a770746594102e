"""Copy the expected start and the round of every waiting job from scheduling's
JobSchedulingState onto the job, before scheduling drops those columns. Its own migration:
PostgreSQL will not ALTER a table in a transaction that updated it with foreign-key checks
pending (pending_round is a foreign key)."""

from django.db import migrations

WAITING = ("queued", "paused")


def copy_wait(apps, schema_editor):
    Job = apps.get_model("cluster", "Job")
    State = apps.get_model("scheduling", "JobSchedulingState")
    states = State.objects.filter(job__state__in=WAITING).exclude(wait_code="")
    for state in states.only("job_id", "wait_until", "wait_round_id"):
        Job.objects.filter(pk=state.job_id, state__in=WAITING).update(
            pending_until=state.wait_until, pending_round_id=state.wait_round_id
        )


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0008_job_wait_reason_is_the_one_store"),
        ("scheduling", "0002_live_rounds"),
    ]

    operations = [migrations.RunPython(copy_wait, migrations.RunPython.noop)]
