"""Backfill ``Gpu.node_since`` for GPUs that moved before the field existed.

0024 added the field null for every GPU: "on this node since it was registered". A GPU
that had moved by then read as its new node's for all its history, so the new node's token
could post samples and events stamped in the time it ran its old node's jobs (what the
field exists to refuse). Each move an agent's registration made is in the audit log: a
GPU retired on one node brought back into service on another
(``cluster.services.record_retirement``: ``before``/``after`` name the GPU as
"<node>/gpu<index>"). The latest such entry's time is when the GPU came onto its node. A
move an admin made by editing the GPU's node was not audited; such a GPU stays null.
"""

from django.db import migrations


def _node_of(snapshot) -> str | None:
    """The node name of an audit snapshot's "<node>/gpu<index>", or None."""
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("gpu"), str):
        return None
    node, sep, _ = snapshot["gpu"].rpartition("/gpu")
    return node if sep else None


def forwards(apps, schema_editor):
    Gpu = apps.get_model("cluster", "Gpu")
    AuditEntry = apps.get_model("cluster", "AuditEntry")
    unknown = {
        str(pk): pk
        for pk in Gpu.objects.filter(node_since__isnull=True).values_list("pk", flat=True)
    }
    if not unknown:
        return
    entries = AuditEntry.objects.filter(
        object_type="gpu", action="updated", object_id__in=list(unknown)
    ).order_by("at", "pk")
    arrived = {}
    for entry in entries.iterator():
        before, after = _node_of(entry.before), _node_of(entry.after)
        if before is None or after is None or before == after:
            continue
        if entry.after.get("retired_at") is not None:
            continue  # not a return into service
        arrived[unknown[entry.object_id]] = entry.at  # the latest wins (ordered by time)
    for pk, at in arrived.items():
        Gpu.objects.filter(pk=pk, node_since__isnull=True).update(node_since=at)


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0024_gpu_node_since"),
    ]

    operations = [
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
