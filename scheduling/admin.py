"""Django admin of the scheduling app. Performance profiles are read-only: they are written
by ``manage.py fit_perf_models`` from the measurements, never by hand."""

from django.contrib import admin
from django.db import transaction

from cluster.admin import EditedUnderLock, RefusesStaleEdits
from cluster.admin_readonly import ReadOnlyAdmin, RecordAdmin
from cluster.choices import AuditAction
from cluster.services import audit_snapshot, record_audit
from scheduling.models import (
    JobSchedulingState,
    PerfProfile,
    RoundDecision,
    SchedulerSettings,
    SchedulingRound,
    SlurmJob,
    WorkloadProfile,
)


@admin.register(WorkloadProfile)
class WorkloadProfileAdmin(ReadOnlyAdmin):
    """Learned profiles: written by the scheduler as jobs finish, read-only here."""

    list_display = [
        "workload",
        "gpu_model",
        "version",
        "n_observations",
        "jobs",
        "iter_time_error",
        "power_error",
        "prior",
        "created_at",
    ]
    list_filter = ["gpu_model"]
    search_fields = ["workload", "gpu_model"]


@admin.register(PerfProfile)
class PerfProfileAdmin(ReadOnlyAdmin):
    list_display = [
        "workload",
        "gpu_model",
        "version",
        "fitted_at",
        "iter_time_median_abs_error",
        "iter_time_p90_abs_error",
        "n_heldout",
    ]
    list_filter = ["gpu_model", "version"]
    search_fields = ["workload", "gpu_model"]


# --- live scheduling ----------------------------------------------------------------------

_AUDITED_SETTINGS = ["policy", "round_interval_s", "paused"]


@admin.register(SchedulerSettings)
class SchedulerSettingsAdmin(EditedUnderLock, RefusesStaleEdits, admin.ModelAdmin):
    """The singleton: admins change the policy, the round interval or pause rounds here; every
    change lands in the audit log (object type ``scheduling_policy``) with before and after.
    A field changed by someone else since the page was opened is refused, and one left as
    shown is not written (``RefusesStaleEdits``): a page opened before another admin switched
    the policy, saved to change the interval, switched it back."""

    lock = staticmethod(lambda s: SchedulerSettings.objects.select_for_update().get(pk=s.pk))

    list_display = ["policy", "round_interval_s", "paused", "updated_at"]
    fields = ["policy", "round_interval_s", "paused", "updated_at"]
    readonly_fields = ["updated_at"]

    def has_add_permission(self, request) -> bool:
        return not SchedulerSettings.objects.exists()

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change) -> None:
        with transaction.atomic():
            old = (
                SchedulerSettings.objects.select_for_update()
                .filter(pk=SchedulerSettings.SINGLETON_PK)
                .first()
            )
            before = audit_snapshot(old, _AUDITED_SETTINGS) if old else None
            if old is None:
                super().save_model(request, obj, form, change)
            else:
                # Only what the form changed: the whole row as read at the post wrote back
                # the policy state of an earlier round over the one a round stored since.
                fields = {f for f in form.changed_data if f in _AUDITED_SETTINGS}
                if old.policy != obj.policy:
                    # The last policy's timers and history mean nothing to the new one.
                    obj.policy_state = {}
                    fields.add("policy_state")
                obj.save(update_fields=[*sorted(fields), "updated_at"])
                obj.refresh_from_db()
            record_audit(
                actor=request.user,
                action=AuditAction.UPDATED if old else AuditAction.CREATED,
                object_type="scheduling_policy",
                object_id=obj.pk,
                before=before,
                after=audit_snapshot(obj, _AUDITED_SETTINGS),
            )


class RoundDecisionInline(admin.TabularInline):
    model = RoundDecision
    extra = 0
    can_delete = False
    fields = ["job", "action", "gpu_uuids", "batch_size", "sm_clock_mhz", "power_limit_w",
              "reason_code", "applied", "error"]  # fmt: skip
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(SchedulingRound)
class SchedulingRoundAdmin(RecordAdmin):
    """Rounds are records: read-only."""

    list_display = [
        "id",
        "started_at",
        "policy",
        "outcome",
        "running_jobs",
        "waiting_jobs",
        "changes",
        "failed_changes",
        "predicted_energy_j",
        "plan_duration_s",
        "replan_at",
    ]
    list_filter = ["policy", "outcome"]
    date_hierarchy = "started_at"
    inlines = [RoundDecisionInline]


@admin.register(JobSchedulingState)
class JobSchedulingStateAdmin(RecordAdmin):
    list_display = ["job", "observed_until", "observation_count", "model_prior"]

    @admin.display(description="observations")
    def observation_count(self, obj) -> str:
        """Measurements behind the job's online model, per GPU model."""
        counts = obj.observation_counts()
        return ", ".join(f"{gpu}: {n:g}" for gpu, n in counts.items()) or "none yet"

    @admin.display(description="model started from")
    def model_prior(self, obj) -> str:
        return "; ".join(
            f"{gpu}: {entry.get('prior', '?')}"
            for gpu, entry in sorted((obj.online_params or {}).items())
        )


@admin.register(RoundDecision)
class RoundDecisionAdmin(RecordAdmin):
    """Every change a round made, across rounds (a round's own page lists its decisions).
    Records: read-only."""

    list_display = [
        "round", "job", "action", "gpu_count", "batch_size", "sm_clock_mhz", "power_limit_w",
        "reason_code", "applied",
    ]  # fmt: skip
    list_filter = ["action", "applied"]
    list_select_related = ["round", "job"]
    search_fields = ["job__name", "=job__id", "reason_code"]
    # Newest first, on the primary key (a round writes its decisions as it ends): the
    # model's order (round, id) is the rounds' (-started_at), a join and sort of every
    # decision.
    ordering = ["-id"]

    @admin.display(description="GPUs")
    def gpu_count(self, obj: RoundDecision) -> int:
        return len(obj.gpu_uuids or [])


@admin.register(SlurmJob)
class SlurmJobAdmin(ReadOnlyAdmin):
    """The Slurm jobs the Slurm executor submitted, and Slurm's word on how they ended.
    Read-only: the executor and its reconciler own these rows (an edit could make a job run
    twice or never be reconciled)."""

    list_display = [
        "slurm_job_id", "job", "nodes", "gpus_per_node", "submitted_at", "running_at",
        "cancel_requested_at", "ended_at", "slurm_state", "exit_code",
    ]  # fmt: skip
    list_filter = ["slurm_state", ("submitted_at", admin.DateFieldListFilter)]
    list_select_related = ["job"]
    search_fields = ["=slurm_job_id", "job__name", "nodes"]
