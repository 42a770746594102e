"""Why a job waits is stored once, on the job: add the expected start and the round that said
so (until now kept in scheduling's JobSchedulingState), and allow only the codes of
cluster.choices.WaitCode. A stored code outside them is cleared; its text is kept in
pending_reason when that was empty, so nothing a person could read is lost."""

import django.db.models.deletion
from django.db import migrations, models

CODES = ['budget_exhausted', 'waiting_for_clean_hour', 'no_free_block', 'behind_in_queue', 'delayed_for_locality', 'preempted', 'no_perf_model', 'no_matching_gpu', 'over_round_allowance', 'node_lost']


def clear_unknown_codes(apps, schema_editor):
    Job = apps.get_model("cluster", "Job")
    unknown = Job.objects.exclude(pending_reason_code="").exclude(pending_reason_code__in=CODES)
    for job in unknown.only("pk", "pending_reason_code", "pending_reason"):
        Job.objects.filter(pk=job.pk).update(
            pending_reason_code="", pending_reason=job.pending_reason or job.pending_reason_code
        )


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0007_job_gradient_statistics"),
        ("scheduling", "0002_live_rounds"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="pending_round",
            field=models.ForeignKey(
                blank=True,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="scheduling.schedulinground",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="pending_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="job",
            name="pending_reason_code",
            field=models.CharField(blank=True, choices=[('budget_exhausted', 'Team budget used up'), ('waiting_for_clean_hour', 'Waiting for cleaner electricity'), ('no_free_block', 'No free block of GPUs'), ('behind_in_queue', 'Behind other jobs in the queue'), ('delayed_for_locality', 'Waiting for GPUs close together'), ('preempted', 'Preempted by the scheduler'), ('no_perf_model', 'No performance model for this workload'), ('no_matching_gpu', 'No GPU of the requested model'), ('over_round_allowance', 'Budget paced: not this round'), ('node_lost', 'Its node stopped reporting')], max_length=64),
        ),
        migrations.RunPython(clear_unknown_codes, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("pending_reason_code", ""), ("pending_reason_code__in", CODES), _connector="OR"),
                name="job_pending_reason_code_valid",
            ),
        ),
    ]
