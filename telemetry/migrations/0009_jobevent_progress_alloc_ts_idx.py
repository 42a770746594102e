from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # Built without locking out the agents' inserts (a large table on a live service).
    atomic = False

    dependencies = [
        ("telemetry", "0008_jobevent_progress_node_ts_idx"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="jobevent",
            index=models.Index(
                condition=models.Q(("kind", "progress")),
                fields=["job", "allocation_id", "ts"],
                name="jobevent_progress_alloc_ts_idx",
            ),
        ),
    ]
