"""Models of the scheduling app."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models, transaction

from cluster.workloads import workload_fold
from scheduling.choices import DecisionAction, RoundOutcome
from scheduling.core.perf_models import (
    Catalog,
    catalog_from_dict,
    gpu_to_dict,
    model_to_dict,
)

# --- performance profiles ---------------------------------------------------------------


class PerfProfileQuerySet(models.QuerySet):
    def upsert_catalog(self, catalog: Catalog, *, fitted_at: datetime) -> tuple[int, int]:
        """Store every model of ``catalog`` under its version; returns (created, updated).

        Rows are keyed by (workload, GPU model, version): refitting the same version
        updates its rows in place, a new version adds rows and keeps the old ones.
        """
        created = updated = 0
        with transaction.atomic():
            for model in catalog.models():
                errors = model.errors
                _, was_created = self.update_or_create(
                    workload=model.workload,
                    gpu_model=model.gpu_model,
                    version=catalog.version,
                    defaults={
                        "params": {
                            "model": model_to_dict(model),
                            "gpu": gpu_to_dict(model.gpu),
                            # Aliases pointing at this model (e.g. imagenet -> resnet50).
                            "aliases": [
                                w
                                for (w, g), target in sorted(catalog.aliases().items())
                                if g == model.gpu_model and target == model.workload
                            ],
                        },
                        "fitted_at": fitted_at,
                        "errors": dict(errors),
                        "iter_time_median_abs_error": errors.get("iter_time_median_abs_error"),
                        "iter_time_p90_abs_error": errors.get("iter_time_p90_abs_error"),
                        "n_heldout": errors.get("n_heldout"),
                    },
                )
                created += was_created
                updated += not was_created
        return created, updated

    def catalog(self, version: str) -> Catalog:
        """The stored profiles of ``version`` as a catalog the core can use."""
        rows = list(self.filter(version=version).order_by("workload", "gpu_model"))
        if not rows:
            raise PerfProfile.DoesNotExist(f"no performance profiles of version {version!r}")
        return catalog_from_dict(
            {
                "version": version,
                "gpus": {r.gpu_model: r.params["gpu"] for r in rows},
                "models": [r.params["model"] for r in rows],
                "aliases": [
                    {"workload": alias, "gpu_model": r.gpu_model, "target": r.workload}
                    for r in rows
                    for alias in r.params.get("aliases", [])
                ],
            }
        )


class PerfProfile(models.Model):
    """A fitted performance model of one workload class on one GPU model.

    ``params`` holds the catalog entry as ``scheduling/core/perf_catalog.json`` has it
    (``model``: throughput and power parameters, batch sizes, sources; ``gpu``: the GPU
    model's idle draw, clocks, power limits and clock scaling; ``aliases``: other workload
    keys served by this model on this GPU), so a stored version can be
    turned back into a catalog (``PerfProfile.objects.catalog(version)``). The error
    columns are the held-out iteration-time errors of the fit, fractions (0.05 = 5 %).
    Written by ``manage.py fit_perf_models``; read-only in the admin.
    """

    workload = models.CharField(max_length=100)  # as long as a job's (cluster.Job)
    gpu_model = models.CharField(max_length=100)
    version = models.CharField(max_length=32)
    params = models.JSONField()
    fitted_at = models.DateTimeField()
    iter_time_median_abs_error = models.FloatField(null=True, blank=True)
    iter_time_p90_abs_error = models.FloatField(null=True, blank=True)
    n_heldout = models.PositiveIntegerField(null=True, blank=True)
    errors = models.JSONField(default=dict, blank=True)

    objects = PerfProfileQuerySet.as_manager()

    class Meta:
        ordering = ["workload", "gpu_model", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["workload", "gpu_model", "version"], name="perf_profile_unique_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.workload} on {self.gpu_model} (v{self.version})"


class WorkloadProfile(models.Model):
    """What the jobs of one workload taught about it on one GPU model: a versioned, learned
    performance model that the next job of the workload starts from.

    Each job that finishes with observations adds a version (``version`` counts up from 1;
    the newest is the profile). ``params`` holds the learned equations as the catalog does
    (``model``, ``gpu``: ``perf_models.model_to_dict`` / ``gpu_to_dict``) and, in the newest
    version only, what they were fitted from (``fit``: every folded job's measurements,
    pooled, and the base model; ``workload_profiles.profile_params``); ``prior`` names the
    catalog model the first job started from. ``n_observations`` is the measurements behind
    it, ``jobs`` the jobs folded in; the error columns are the median relative error of the
    previous version's predictions on the newest job's observed configurations (null for the
    first version, which had nothing to predict with). Written by
    ``scheduling.workload_profiles``; read-only in the admin.
    """

    workload = models.CharField(max_length=100)  # as long as a job's (cluster.Job)
    # ``workload`` as names are matched (``cluster.workloads.workload_fold``), set on every
    # save: the lookup of a learned spelling filters on it, so the database and Python
    # apply one rule. (A text: the fold may be longer than the name, "\u00df" is "ss".)
    workload_key = models.TextField(editable=False, default="")
    gpu_model = models.CharField(max_length=100)
    version = models.PositiveIntegerField()
    prior = models.CharField(max_length=100, help_text="catalog model the first job started from")
    params = models.JSONField()
    n_observations = models.FloatField(default=0.0)
    jobs = models.PositiveIntegerField(default=0)
    iter_time_error = models.FloatField(null=True, blank=True)
    power_error = models.FloatField(null=True, blank=True)
    last_job = models.ForeignKey(
        "cluster.Job", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["workload", "gpu_model", "-version"]
        indexes = [models.Index(fields=["workload_key"], name="workload_profile_key_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=["workload", "gpu_model", "version"], name="workload_profile_unique_version"
            ),
            models.CheckConstraint(
                condition=models.Q(version__gte=1), name="workload_profile_version_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workload} on {self.gpu_model} (learned v{self.version})"

    def save(self, *args, **kwargs) -> None:
        self.workload_key = workload_fold(self.workload)
        fields = kwargs.get("update_fields")
        if fields is not None and "workload" in fields:
            kwargs["update_fields"] = {*fields, "workload_key"}
        super().save(*args, **kwargs)


# --- live scheduling: settings, rounds, decisions, per-job state -------------------------


def _default_policy() -> str:
    return settings.WATTFLOW_DEFAULT_POLICY


def _default_round_interval_s() -> int:
    return settings.WATTFLOW_ROUND_INTERVAL_S


class SchedulerSettings(models.Model):
    """The live scheduler's runtime settings: one row (pk 1), edited by admins in the admin.

    ``policy`` names a policy of the core's registry; ``round_interval_s`` is how often a
    round runs. Celery beat fires every ``WATTFLOW_ROUND_INTERVAL_S`` (the finest step), and
    a beat tick that comes before ``round_interval_s`` has passed since the last round is
    skipped, so a longer interval takes effect at once without restarting beat.
    ``policy_state`` is the opaque state the policy returned in its last plan (it is handed
    back in the next snapshot); it is reset when the policy changes.
    """

    SINGLETON_PK = 1

    policy = models.CharField(max_length=64, default=_default_policy)
    round_interval_s = models.PositiveIntegerField(
        default=_default_round_interval_s,
        help_text="Seconds between rounds; a value below the beat interval acts as the beat "
        "interval (WATTFLOW_ROUND_INTERVAL_S).",
    )
    paused = models.BooleanField(
        default=False, help_text="While ticked no round runs; running jobs keep running."
    )
    policy_state = models.JSONField(default=dict, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "scheduler settings"
        verbose_name_plural = "scheduler settings"
        constraints = [
            models.CheckConstraint(condition=models.Q(pk=1), name="schedulersettings_singleton"),
            models.CheckConstraint(
                condition=models.Q(round_interval_s__gte=1),
                name="schedulersettings_interval_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.policy} every {self.round_interval_s} s"

    def save(self, *args, **kwargs) -> None:
        self.pk = self.SINGLETON_PK
        super().save(*args, **kwargs)

    @classmethod
    def load(cls) -> SchedulerSettings:
        """The singleton row, created with the environment's defaults on first use."""
        obj, _ = cls.objects.get_or_create(pk=cls.SINGLETON_PK)
        return obj

    def clean(self) -> None:
        from scheduling.core.registry import policy_names

        errors = {}
        known = policy_names()
        if self.policy not in known:
            errors["policy"] = f"Unknown policy {self.policy!r}; known: {', '.join(known)}."
        if self.round_interval_s is not None and self.round_interval_s < 1:
            errors["round_interval_s"] = "Must be at least 1 second."
        if errors:
            raise ValidationError(errors)


class SchedulingRound(models.Model):
    """One round that took the lock: what it saw, what it planned, what it cost to plan.

    Predictions are the core's for the coming ``round_length_s`` (busy and powered idle
    GPUs); allowances are what the policy's pacing let the round spend (null: no budget).
    """

    started_at = models.DateTimeField(db_index=True)
    finished_at = models.DateTimeField()
    policy = models.CharField(max_length=64)
    outcome = models.CharField(
        max_length=16, choices=RoundOutcome.choices, default=RoundOutcome.APPLIED
    )
    round_length_s = models.FloatField()
    schedulable_gpus = models.PositiveIntegerField()
    active_jobs = models.PositiveIntegerField()
    # Counts after the round's changes were carried out (cluster-wide).
    queued_jobs = models.PositiveIntegerField(default=0)
    running_jobs = models.PositiveIntegerField()
    waiting_jobs = models.PositiveIntegerField()
    changes = models.PositiveIntegerField()
    failed_changes = models.PositiveIntegerField(default=0)
    requeued_jobs = models.PositiveIntegerField(
        default=0, help_text="Jobs re-queued because their node stopped heart-beating."
    )
    predicted_energy_j = models.FloatField()
    predicted_co2_g = models.FloatField()
    energy_allowance_j = models.FloatField(null=True, blank=True)
    co2_allowance_g = models.FloatField(null=True, blank=True)
    ci_g_per_kwh = models.FloatField()
    ci_estimated = models.BooleanField(default=False)
    plan_duration_s = models.FloatField(help_text="Wall time of build + plan + apply.")
    replan_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The plan asked for the next round by then (a probe of a job known only "
        "by its prior ends): the first beat tick after it runs a round, even before the "
        "round interval has passed.",
    )

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(outcome__in=RoundOutcome.values),
                name="schedulinground_outcome_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"round {self.pk} at {self.started_at:%Y-%m-%d %H:%M:%S} ({self.policy})"


class RoundDecision(models.Model):
    """One change a round made to a job: start, stop, resize or retune, with the new
    configuration. ``applied`` is false when the change lost a race (the job was cancelled
    or finished meanwhile, or its GPUs were taken); ``error`` then says why."""

    round = models.ForeignKey(SchedulingRound, on_delete=models.CASCADE, related_name="decisions")
    job = models.ForeignKey("cluster.Job", on_delete=models.CASCADE, related_name="decisions")
    action = models.CharField(max_length=16, choices=DecisionAction.choices)
    gpu_uuids = models.JSONField(default=list, blank=True)
    batch_size = models.PositiveIntegerField(null=True, blank=True)
    sm_clock_mhz = models.PositiveIntegerField(null=True, blank=True)
    power_limit_w = models.PositiveIntegerField(null=True, blank=True)
    reason_code = models.CharField(max_length=64, blank=True)
    reason = models.TextField(blank=True)
    applied = models.BooleanField(default=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["round", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(action__in=DecisionAction.values),
                name="rounddecision_action_valid",
            ),
        ]
        indexes = [models.Index(fields=["job", "round"], name="rounddecision_job_round_idx")]

    def __str__(self) -> str:
        return f"{self.action} job {self.job_id} in round {self.round_id}"


class JobSchedulingState(models.Model):
    """What the live scheduler keeps per job between rounds: the online-refinement scales
    (observed / predicted iteration time and power) with the instant up to which telemetry has
    been folded into them, and the job's online model (its pooled observations and fitted
    parameters, see ``observations``). Why a job waits lives on the job (``Job.pending_*``),
    only there.
    """

    job = models.OneToOneField(
        "cluster.Job", on_delete=models.CASCADE, primary_key=True, related_name="scheduling"
    )
    iter_time_scale = models.FloatField(default=1.0)
    power_scale = models.FloatField(default=1.0)
    observed_until = models.DateTimeField(null=True, blank=True)
    # The online model (scheduling.core.online_model): observations pooled per configuration
    # and GPU model ({gpu_model: [observation dicts]}), the fitted parameter moves per GPU
    # model, the prior each started from, and the profile version it was folded into.
    observations = models.JSONField(default=dict, blank=True)
    online_params = models.JSONField(default=dict, blank=True)
    profile_version = models.PositiveIntegerField(null=True, blank=True)
    # Just-in-time exploration of power limits (scheduling.core.exploration.new_record): the
    # limits tried, the seconds it cost against its bound, the limit chosen. Empty: none.
    exploration = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name = "job scheduling state"
        indexes = [
            # The states not yet folded into a profile that have a model to fold: what
            # ``workload_profiles.fold_finished_jobs`` looks for every round. Without it the
            # round read every job's state (94,000 rows of a large cluster's history, most
            # of them finished jobs with no model, which are never folded).
            models.Index(
                fields=["job"],
                name="schedstate_unfolded_idx",
                condition=models.Q(profile_version__isnull=True) & ~models.Q(online_params={}),
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.observation_count()} observations"

    def observation_count(self) -> float:
        return sum(self.observation_counts().values())

    def observation_counts(self) -> dict[str, float]:
        """Measurements behind the job's online model, per GPU model (weights summed)."""
        return {
            gpu: sum(o.get("weight", 1.0) for o in rows)
            for gpu, rows in sorted((self.observations or {}).items())
        }


# --- executors ----------------------------------------------------------------------------


class SlurmJob(models.Model):
    """One Slurm job the Slurm executor submitted for an allocation (issue 14).

    ``allocation`` is the allocation the Slurm job serves now: a retune (same nodes and GPU
    counts, new batch or power limit) re-points it to the job's new allocation instead of
    restarting the job. At most one Slurm job serves an allocation, and an allocation with a
    row here is never submitted again, so a crash between ``sbatch`` and the next round never
    runs a job twice. ``cancel_requested_at`` marks the jobs Wattflow stopped itself, so the
    reconciler tells them from jobs cancelled outside Wattflow. ``ended_at``/``slurm_state``/
    ``exit_code`` are Slurm's word on how it ended (``squeue``, else ``sacct``).
    """

    slurm_job_id = models.PositiveBigIntegerField(unique=True)
    job = models.ForeignKey("cluster.Job", on_delete=models.CASCADE, related_name="slurm_jobs")
    allocation = models.OneToOneField(
        "cluster.JobAllocation", on_delete=models.CASCADE, related_name="slurm_job"
    )
    nodes = models.CharField(max_length=1000, help_text="Slurm node list it was placed on.")
    gpus_per_node = models.PositiveSmallIntegerField()
    submitted_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)
    running_at = models.DateTimeField(null=True, blank=True, help_text="First seen running.")
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True, help_text="Seen finished in Slurm.")
    slurm_state = models.CharField(max_length=32, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(
                fields=["slurm_job_id"],
                condition=models.Q(ended_at__isnull=True),
                name="slurmjob_live_idx",
            )
        ]

    def __str__(self) -> str:
        return f"Slurm job {self.slurm_job_id} (job {self.job_id})"
