"""JobSchedulingState no longer keeps a copy of why a job waits (Job.pending_* is the one
store; cluster 0008 copied what only it had); rounds count the jobs they left queued."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0004_online_model_and_workload_profiles"),
        ("cluster", "0009_copy_wait_from_scheduling_state"),
    ]

    operations = [
        migrations.RemoveField(model_name="jobschedulingstate", name="wait_code"),
        migrations.RemoveField(model_name="jobschedulingstate", name="wait_reason"),
        migrations.RemoveField(model_name="jobschedulingstate", name="wait_round"),
        migrations.RemoveField(model_name="jobschedulingstate", name="wait_until"),
        migrations.AddField(
            model_name="schedulinground",
            name="queued_jobs",
            field=models.PositiveIntegerField(default=0),
        ),
    ]
