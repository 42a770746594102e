"""Telemetry: raw GPU samples, their rollups, energy/carbon ledgers, grid intensity, job events.

Raw samples are many (one per GPU per second) and short-lived (``TELEMETRY_RETENTION_S``);
pages and reports read the per-minute and per-hour rollups and the ledger, which are kept.
All times are aware UTC datetimes; minutes and hours are the start of the bucket.
"""

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import BrinIndex
from django.db import models
from django.db.models import Q

from cluster.models import Gpu, Job, Node, Team
from telemetry.choices import CarbonSource, ExitReason, JobEventKind


class GpuSample(models.Model):
    """One NVML reading of one GPU, as the agent posted it.

    The primary key is (GPU, timestamp): that makes ingestion idempotent (a replayed batch
    inserts nothing new) without a second unique index on the hottest table. ``energy_j`` is
    the GPU's cumulative energy counter (null where the GPU has none); it may jump back to zero
    after a driver reload, which accounting handles. Other nulls are values the agent could
    not read.
    """

    pk = models.CompositePrimaryKey("gpu", "ts")
    # No database-level foreign key: ingestion has just checked every GPU against the token's
    # node, and the per-row referential-integrity lookup is a cost on the hottest insert.
    # Deleting a GPU still cascades through the ORM. No separate index on gpu either: the
    # primary key (gpu, ts) already serves lookups by GPU.
    gpu = models.ForeignKey(
        Gpu, on_delete=models.CASCADE, related_name="samples", db_constraint=False, db_index=False
    )
    ts = models.DateTimeField()
    power_w = models.FloatField()
    energy_j = models.FloatField(null=True)
    util_pct = models.FloatField(null=True)
    mem_used_mib = models.FloatField(null=True)
    temp_c = models.FloatField(null=True)
    sm_clock_mhz = models.IntegerField(null=True)
    power_limit_w = models.FloatField(null=True)

    class Meta:
        # Rows arrive roughly in time order, so a BRIN index on ts is tiny and keeps the
        # retention delete and time-range scans cheap.
        indexes = [BrinIndex(fields=["ts"], name="gpusample_ts_brin")]

    def __str__(self) -> str:
        return f"{self.gpu_id}@{self.ts.isoformat()} {self.power_w} W"


class DirtyHour(models.Model):
    """A (GPU, hour) whose samples changed since it was last accounted.

    Ingestion marks hours; ``process_dirty_hours`` recomputes their rollups and ledger rows from
    the raw samples and deletes the mark. Recomputing a whole hour (instead of adding deltas)
    is what makes late, replayed or duplicated batches count exactly once.
    """

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    marked_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["gpu", "hour"], name="dirtyhour_unique")]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} hour {self.hour.isoformat()}"


class GpuMinute(models.Model):
    """Per-minute rollup of one GPU. ``energy_j`` is the energy of the intervals ending in the
    minute (from the counter where there is one, else integrated power)."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="minutes")
    minute = models.DateTimeField()
    samples = models.PositiveIntegerField()
    power_avg_w = models.FloatField()
    power_max_w = models.FloatField()
    util_avg_pct = models.FloatField(null=True)
    energy_j = models.FloatField()

    class Meta:
        ordering = ["gpu", "minute"]
        constraints = [
            models.UniqueConstraint(fields=["gpu", "minute"], name="gpuminute_unique"),
        ]
        indexes = [BrinIndex(fields=["minute"], name="gpuminute_minute_brin")]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} {self.minute.isoformat()} {self.energy_j:.0f} J"


class GpuHour(models.Model):
    """Per-hour rollup of one GPU, computed from the same intervals as its minutes."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="hours")
    hour = models.DateTimeField()
    samples = models.PositiveIntegerField()
    power_avg_w = models.FloatField()
    power_max_w = models.FloatField()
    util_avg_pct = models.FloatField(null=True)
    energy_j = models.FloatField()

    class Meta:
        ordering = ["gpu", "hour"]
        constraints = [models.UniqueConstraint(fields=["gpu", "hour"], name="gpuhour_unique")]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} {self.hour.isoformat()} {self.energy_j:.0f} J"


class EnergyLedgerEntry(models.Model):
    """Energy and carbon of one GPU in one hour attributed to one job (``job`` null: the GPU
    was idle, or held by nobody, and its draw is the cluster's overhead).

    ``team`` is copied from the job so team and budget totals need no join; ``ci_g_per_kwh``
    and ``ci_estimated`` record which intensity priced the carbon, for audit.
    """

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="ledger")
    hour = models.DateTimeField()
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, null=True, blank=True, related_name="energy_ledger"
    )
    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, null=True, blank=True, related_name="energy_ledger"
    )
    energy_j = models.FloatField()
    co2_g = models.FloatField()
    ci_g_per_kwh = models.FloatField()
    ci_estimated = models.BooleanField(default=False)
    zone = models.CharField(max_length=32)
    # The energy of each minute of the hour, J (60 values; empty in rows accounted before
    # they were kept): a budget period that starts or ends inside the hour counts its own
    # minutes (``usage.budget_usage``).
    minutes_j = ArrayField(models.FloatField(), default=list, blank=True)

    class Meta:
        verbose_name_plural = "energy ledger entries"
        ordering = ["hour", "gpu", "job"]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu", "hour", "job"], name="ledger_unique", nulls_distinct=False
            ),
            models.CheckConstraint(
                condition=Q(energy_j__gte=0) & Q(co2_g__gte=0), name="ledger_non_negative"
            ),
        ]
        indexes = [
            models.Index(fields=["team", "hour"], name="ledger_team_hour_idx"),
            models.Index(fields=["job", "hour"], name="ledger_job_hour_idx"),
            # The order of the API's pages (keyset) and, read backwards, the admin's list.
            models.Index(fields=["hour", "gpu", "id"], name="ledger_hour_gpu_id_idx"),
        ]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} {self.hour.isoformat()} job {self.job_id}: {self.energy_j:.0f} J"


class CarbonIntensity(models.Model):
    """Grid carbon intensity of one zone in one hour (direct emissions, gCO2e/kWh).

    ``estimated`` is true where the source itself marks the value as estimated, or where the
    value is a fallback because the configured provider failed.
    """

    zone = models.CharField(max_length=32)
    hour = models.DateTimeField()
    ci_g_per_kwh = models.FloatField()
    source = models.CharField(max_length=16, choices=CarbonSource.choices)
    estimated = models.BooleanField(default=False)

    class Meta:
        verbose_name_plural = "carbon intensities"
        ordering = ["zone", "hour"]
        constraints = [
            models.UniqueConstraint(fields=["zone", "hour"], name="carbonintensity_unique"),
            models.CheckConstraint(condition=Q(ci_g_per_kwh__gte=0), name="carbon_ci_non_negative"),
            models.CheckConstraint(
                condition=Q(source__in=CarbonSource.values), name="carbon_source_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.zone} {self.hour.isoformat()}: {self.ci_g_per_kwh} g/kWh"


class JobEvent(models.Model):
    """What an agent reported about a job: started, progress (iterations, optionally the
    gradient statistics ``grad_sqr`` and ``grad_var``) or exited.

    ``event_id`` is chosen by the agent, so a replayed event is recognised and applied once.
    """

    event_id = models.UUIDField(unique=True)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="job_events")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    allocation_id = models.BigIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=16, choices=JobEventKind.choices)
    ts = models.DateTimeField()
    iterations = models.FloatField(null=True, blank=True)
    # Optional gradient statistics of a progress report (at the allocation's batch).
    grad_sqr = models.FloatField(null=True, blank=True)
    grad_var = models.FloatField(null=True, blank=True)
    exit_status = models.IntegerField(null=True, blank=True)
    reason = models.CharField(max_length=16, choices=ExitReason.choices, blank=True)
    log_tail = models.TextField(blank=True)
    received_at = models.DateTimeField()
    # The agent's time lay outside the allocation (before its start or after its end, within
    # the clock skew), and ``ts`` is the bound the server put it on: the count stands, but
    # the time is not when the job reached it, so the intervals it bounds are no measurement
    # of the job's speed (``scheduling.observations``). (A time ahead of the server's clock,
    # taken at its arrival, is not marked.)
    clamped = models.BooleanField(default=False, db_default=False)

    class Meta:
        ordering = ["job", "ts"]
        indexes = [
            models.Index(fields=["job", "ts"], name="jobevent_job_ts_idx"),
            # Each node's first two progress reports of an allocation, looked up by the round
            # for every running job (``scheduling.observations.first_two_reports_of``)
            # without reading the allocation's other reports.
            models.Index(
                fields=["job", "allocation_id", "node", "ts"],
                condition=Q(kind="progress"),
                name="jobevent_progress_node_ts_idx",
            ),
            # Each allocation's newest progress report, read backwards from the round's
            # time (``scheduling.observations.newest_progress_of``). Neither index above
            # serves it: by (job, time) an ended allocation's newest is found under every
            # report of the job's later ones; by (job, allocation, node, time) every report
            # of the allocation is read and sorted (0.45-1.2 s a round for the scale
            # database's 250 running allocations of 6,440 reports each).
            models.Index(
                fields=["job", "allocation_id", "ts"],
                condition=Q(kind="progress"),
                name="jobevent_progress_alloc_ts_idx",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=JobEventKind.values), name="jobevent_kind_valid"
            )
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.kind} at {self.ts.isoformat()}"


class RefusedEnergyStep(models.Model):
    """An energy-counter step larger than its GPU could have drawn, refused by accounting.

    The interval between ``previous_ts`` and ``ts`` was charged its integrated power
    (``charged_j``) instead of the counter's step; what the counter claimed is charged to
    nobody. The row is the audit trail: it keeps both readings after retention has deleted
    the raw samples (and retention keeps the flagged sample itself meanwhile).
    """

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="refused_steps")
    ts = models.DateTimeField(help_text="Time of the sample whose counter reading was refused.")
    previous_ts = models.DateTimeField()
    previous_energy_j = models.FloatField()
    energy_j = models.FloatField()
    allowed_j = models.FloatField(help_text="Largest step believed over the interval.")
    charged_j = models.FloatField(help_text="Integrated power charged for the interval.")
    detected_at = models.DateTimeField()

    class Meta:
        ordering = ["-ts"]
        constraints = [
            models.UniqueConstraint(fields=["gpu", "ts"], name="refusedenergystep_unique")
        ]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} {self.ts.isoformat()}: +{self.step_j:.3g} J refused"

    @property
    def step_j(self) -> float:
        return self.energy_j - self.previous_energy_j
