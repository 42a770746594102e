"""Teams, the cluster's hardware, training jobs and their allocations, and budgets."""

import hashlib
import re
import secrets
import unicodedata
from datetime import timedelta

from django.conf import settings
from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import ArrayField, DateTimeRangeField, RangeOperators
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, transaction
from django.db.models import F, Func, Q
from django.utils import timezone

from cluster import validators as v
from cluster.choices import AuditAction, HardLimitAction, JobState, NodeStatus, Role, WaitCode
from scheduling.core.goodput import load_curves

# How long after a job leaves a node its agent is told to stop it (``stop`` in its
# assignments) and may still send the job's last events.
RECENT_STOP = timedelta(hours=1)


def finite_check(field: str, *, nullable: bool = False) -> models.CheckConstraint:
    """A CHECK that ``field`` holds a finite number: in PostgreSQL NaN sorts above Infinity,
    so ``-Infinity < x < Infinity`` refuses NaN too. The validators refuse these values on
    every input path; the constraint makes sure no path (a raw update, a future one) can
    store one, since a single NaN made every job list answer 500."""
    condition = Q(**{f"{field}__lt": float("inf")}) & Q(**{f"{field}__gt": float("-inf")})
    if nullable:
        condition = Q(**{f"{field}__isnull": True}) | condition
    return models.CheckConstraint(condition=condition, name=f"%(class)s_{field}_finite")


class Team(models.Model):
    """A group of users that shares jobs and budgets; the unit of energy/carbon accounting."""

    name = models.CharField(max_length=100, unique=True, validators=[v.single_line])
    slug = models.SlugField(max_length=50, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """A name or slug that reads as another team's, in another case or compatibility
        form (``vision`` or fullwidth ``Ｖｉｓｉｏｎ`` beside *Vision*; slug ``VISION`` beside
        ``vision``), is refused: taken, two teams that read the same stood side by side in
        the reports, the CSV and the budgets, and a slug typed in the other case named the
        other team (an eighth probe of the live service)."""
        errors = {}
        if (mixed := mixed_script_error(self.name)) is not None:
            errors["name"] = mixed
        for field, fold in (("name", team_name_fold), ("slug", str.casefold)):
            other = lookalike(Team, self.pk, field, getattr(self, field), fold)
            if other is not None and field not in errors:
                errors[field] = (
                    f"Reads as team {other.name} ({other.slug}), in another case or form: "
                    f"choose another {field}, or use that team."
                )
        if errors:
            raise ValidationError(errors)


def lookalike(model, pk, field: str, value: str, fold):
    """Another row of ``model`` whose ``field`` reads as ``value`` once both are folded
    (``fold``) but is not the same text (that one is the unique constraint's, with its own
    message); None if there is none. The rows are few (teams, nodes): compared here.

    None too where the row ``pk`` already stores ``value``: a look-alike pair stored before
    the rule (or by code that does not clean) is left as it is, and an edit that keeps the
    name is not refused for it (a drain of such a node over the API was a 400 on its name)."""
    if not value:
        return None
    rows = list(model.objects.all())
    if pk is not None and any(row.pk == pk and getattr(row, field) == value for row in rows):
        return None
    for row in rows:
        theirs = getattr(row, field)
        if row.pk != pk and theirs != value and fold(theirs) == fold(value):
            return row
    return None


# Scripts whose letters pass for each other's (Latin ``i``, Cyrillic ``і``; Latin ``o``,
# Greek ``ο``): one word mixing them is how a look-alike is made.
_LOOKALIKE_SCRIPTS = frozenset({"LATIN", "CYRILLIC", "GREEK"})


def mixed_script_word(name: str) -> str | None:
    """The first word of ``name`` (a run of letters, in its compatibility form) that mixes
    Latin with Cyrillic or Greek letters, or None. NFKC keeps scripts apart, so ``Vіsion``
    (a Cyrillic ``і``) folds to a name of its own; a word of one script each (``Лаб ML``)
    is left alone. The script is the first word of the letter's Unicode name."""
    for word in re.findall(r"[^\W\d_]+", unicodedata.normalize("NFKC", name)):
        scripts = {unicodedata.name(c, "").split(" ", 1)[0] for c in word}
        if len(scripts & _LOOKALIKE_SCRIPTS) > 1:
            return word
    return None


def mixed_script_error(name: str) -> str | None:
    word = mixed_script_word(name or "")
    if word is None:
        return None
    return (
        f"The word {word!r} mixes Latin with Cyrillic or Greek letters, which pass for each "
        "other: write each word in one script."
    )


def team_name_fold(name: str) -> str:
    """A team name as compared with the others: compatibility form, case folded."""
    return unicodedata.normalize("NFKC", name).casefold()


class Membership(models.Model):
    """A user's place in a team. Leads manage the team's budgets; members read them."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="membership_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


def hash_agent_token(raw_token: str) -> str:
    """SHA-256 hex digest of an agent token.

    Agent tokens are 256 random bits, so a plain fast hash is enough (no salt or stretching
    needed against guessing), and it lets every telemetry request find its node by an
    indexed equality lookup.
    """
    return hashlib.sha256(raw_token.encode()).hexdigest()


class Node(models.Model):
    """A GPU server running one Wattflow agent, placed under a network switch and a rack.

    Only the SHA-256 of the agent's token is stored; the raw token is shown once when issued.
    """

    name = models.CharField(max_length=100, unique=True, validators=[v.single_line])
    switch_label = models.CharField(
        max_length=100, help_text="Network switch the node is on.", validators=[v.single_line]
    )
    rack_label = models.CharField(max_length=100, blank=True, validators=[v.single_line])
    gpu_model = models.CharField(
        max_length=100, help_text="e.g. A100-SXM4-40GB", validators=[v.single_line]
    )
    status = models.CharField(max_length=16, choices=NodeStatus.choices, default=NodeStatus.HEALTHY)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    agent_token_hash = models.CharField(max_length=64, blank=True, editable=False)
    agent_token_issued_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The agent's spool as its last heartbeat reported it: messages waiting for the server,
    # and messages the server refused that the agent quarantined (with the newest reason).
    # A node with quarantined messages is alive but some of its reports went nowhere.
    agent_spooled = models.PositiveIntegerField(
        default=0, editable=False, help_text="Messages waiting in the agent's spool."
    )
    agent_quarantined = models.PositiveIntegerField(
        default=0, editable=False, help_text="Messages the server refused, kept by the agent."
    )
    agent_quarantine_reason = models.CharField(
        max_length=500, blank=True, editable=False, help_text="Why the newest was refused."
    )
    # The heartbeat's ``ts`` (the agent's clock when it sent it) less the server's clock when
    # it arrived: a sample stamped more than TELEMETRY_MAX_FUTURE_S ahead is refused, and
    # one stamped behind is charged to an earlier hour, so an admin needs to see it.
    agent_clock_skew_s = models.FloatField(
        null=True,
        blank=True,
        editable=False,
        help_text="The agent's clock less the server's at its last heartbeat, in seconds "
        "(positive: ahead; includes the heartbeat's transit, a few ms); null if it sent none.",
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=NodeStatus.values), name="node_status_valid"
            ),
            models.UniqueConstraint(
                fields=["agent_token_hash"],
                condition=~Q(agent_token_hash=""),
                name="node_agent_token_hash_unique",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # A name that reads as another node's (``NODE-01``, fullwidth ``ｎｏｄｅ-01`` beside
        # ``node-01``) was taken: a node of its own, with its own agent token, in the nodes
        # page, the GPU filters and the metrics (an eighth probe of the live service).
        if (mixed := mixed_script_error(self.name)) is not None:
            raise ValidationError({"name": mixed})
        other = lookalike(Node, self.pk, "name", self.name, team_name_fold)
        if other is not None:
            raise ValidationError(
                {
                    "name": f"Reads as node {other.name}, in another case or form: choose "
                    "another name, or use that node."
                }
            )

    @property
    def clock_skew_too_large(self) -> bool:
        """Whether the agent's clock is off by more than samples may be stamped ahead."""
        skew = self.agent_clock_skew_s
        return skew is not None and abs(skew) > settings.TELEMETRY_MAX_FUTURE_S

    def issue_agent_token(self, *, at=None) -> str:
        """Replace the node's agent token and return the new raw token (shown only now)."""
        # A prefix: a token is recognisable (secret scanners, logs), and never begins with
        # "-", which a command line reads as an option (``--token -x...``: 1 token in 64).
        raw_token = "wfa_" + secrets.token_urlsafe(32)
        self.agent_token_hash = hash_agent_token(raw_token)
        self.agent_token_issued_at = at or timezone.now()
        self.save(update_fields=["agent_token_hash", "agent_token_issued_at"])
        return raw_token

    def has_agent_token(self, raw_token: str) -> bool:
        return bool(self.agent_token_hash) and secrets.compare_digest(
            self.agent_token_hash, hash_agent_token(raw_token)
        )

    @classmethod
    def for_agent_token(cls, raw_token: str) -> "Node | None":
        """The node whose agent token this is, or None."""
        if not raw_token:
            return None
        return cls.objects.filter(agent_token_hash=hash_agent_token(raw_token)).first()


def sm_clock_conflict(
    max_clock: int | None,
    clocks: list[int] | tuple[int, ...] | None,
    *,
    max_registered: bool = False,
    clocks_registered: bool = False,
) -> str | None:
    """Why a GPU's maximum SM clock and its lockable clocks disagree (a clock above the
    maximum), naming both values; None when they agree or either is unknown. ``*_registered``
    marks a value that is the stored one, not the one sent. Stored, the scheduler assigned a
    listed clock the agent then capped at the maximum: a run unlike the one it predicted."""
    if max_clock is None or not clocks or max(clocks) <= max_clock:
        return None
    return (
        f"max_sm_clock_mhz {max_clock} MHz{' (registered)' if max_registered else ''} is below "
        f"{max(clocks)} MHz, the highest of supported_sm_clocks_mhz"
        f"{' (registered)' if clocks_registered else ''}."
    )


def sm_clocks_in_order(clocks) -> list[int]:
    """A GPU's SM clock list as it is stored: highest first, each once (as NVML lists them
    per memory clock, and as the agent's registration always stored them)."""
    return sorted(set(clocks or ()), reverse=True)


class GpuQuerySet(models.QuerySet):
    def in_service(self) -> "GpuQuerySet":
        """GPUs not retired: the cluster's capacity, and what its pages show as present."""
        return self.filter(retired_at__isnull=True)

    def reported(self) -> "GpuQuerySet":
        """GPUs in service that their node's agent reports (``missing_since`` null): what the
        rounds plan on (``scheduling.adapters.cluster_from_rows``), so what a job can be
        offered. A lost GPU still counts in ``in_service``: its record and index stay."""
        return self.in_service().filter(missing_since__isnull=True)


def gpus_in_service() -> models.Prefetch:
    """``prefetch_related`` of a node's GPUs that are not retired (``node.gpus.all()``)."""
    return models.Prefetch("gpus", queryset=Gpu.objects.in_service())


class Gpu(models.Model):
    """One GPU of a node, with the power and clock ranges NVML reports and its current setting.

    A GPU that left its node is retired (``retired_at``), not deleted: its allocations,
    samples and ledger rows are history that budgets and reports count. A retired GPU gives
    up its index (a new GPU may register there), is no capacity and is not shown as present;
    registering its UUID again puts it back in service. A GPU its node's agent registers
    without (``missing_since``) keeps its index and record, but rounds do not plan on it."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField(
        help_text=f"NVML device index on the node (0 to {v.MAX_GPU_INDEX}).",
        validators=[MaxValueValidator(v.MAX_GPU_INDEX)],
    )
    uuid = models.CharField(
        max_length=64,
        unique=True,
        help_text="NVML UUID, e.g. GPU-5f3c...",
        validators=[v.single_line],
    )
    model = models.CharField(max_length=100, validators=[v.single_line])
    memory_mb = models.PositiveIntegerField()
    default_power_limit_w = models.PositiveIntegerField()
    min_power_limit_w = models.PositiveIntegerField()
    max_power_limit_w = models.PositiveIntegerField()
    supported_sm_clocks_mhz = ArrayField(
        models.PositiveIntegerField(
            validators=[MinValueValidator(1), MaxValueValidator(v.MAX_SM_CLOCK_MHZ)]
        ),
        default=list,
        blank=True,
        validators=[v.sm_clock_count],
        help_text="SM clocks the GPU can be locked at, as its agent reports them at "
        "registration; stored highest first, each once.",
    )
    max_sm_clock_mhz = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Highest SM clock, as the agent reports it at registration; null when unknown.",
    )
    site_power_limit_w = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The limit the GPU enforced when its agent started, before it changed "
        "anything: the site's own cap (nvidia-smi -pl), else its default. Rounds plan no "
        "limit above it, and a job told none runs at it; null: not reported (an older "
        "agent), the default and top limits as registered.",
    )
    power_limit_w = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Power limit in force, from the agent's newest sample; null when unknown.",
    )
    sm_clock_mhz = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="SM clock now, from the agent's newest sample; null when unknown.",
    )
    reported_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Time of the newest sample that reported power_limit_w and sm_clock_mhz "
        "(unchanged values refresh it once a minute).",
    )
    retired_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When an admin retired it (gone from its node); null: in service.",
    )
    node_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When it came onto its node from another (a board moved); null: it has "
        "been on this node since it was registered. Its node's agent speaks for it only "
        "from then on: older samples and events of it are its old node's time.",
    )
    missing_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Since when its node's agent registers without it (its agent cannot run "
        "jobs on it, so rounds do not plan on it); null: reported. Reported again, it is "
        "planned on again; gone for good, an admin retires it.",
    )

    objects = GpuQuerySet.as_manager()

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "index"],
                condition=Q(retired_at__isnull=True),
                name="gpu_unique_node_index",
            ),
            models.CheckConstraint(
                condition=Q(min_power_limit_w__gt=0)
                & Q(min_power_limit_w__lte=F("default_power_limit_w"))
                & Q(default_power_limit_w__lte=F("max_power_limit_w")),
                name="gpu_power_limits_ordered",
            ),
            models.CheckConstraint(
                condition=Q(power_limit_w__isnull=True)
                | (
                    Q(power_limit_w__gte=F("min_power_limit_w"))
                    & Q(power_limit_w__lte=F("max_power_limit_w"))
                ),
                name="gpu_power_limit_in_range",
            ),
            models.CheckConstraint(
                condition=Q(site_power_limit_w__isnull=True)
                | (
                    Q(site_power_limit_w__gte=F("min_power_limit_w"))
                    & Q(site_power_limit_w__lte=F("max_power_limit_w"))
                ),
                name="gpu_site_power_limit_in_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"

    def save(self, *args, **kwargs) -> None:
        # One order on every write path (registration, the API, the admin, seed_demo): a
        # list patched as [1005, 1410, 1200, 1410] was stored so, and read as another GPU's.
        self.supported_sm_clocks_mhz = sm_clocks_in_order(self.supported_sm_clocks_mhz)
        cap, low, high = self.site_power_limit_w, self.min_power_limit_w, self.max_power_limit_w
        if cap is not None and None not in (low, high) and not low <= cap <= high:
            # The site's cap its agent reported lies outside the range the GPU has now (an
            # admin's edit, a registration from an older agent with another range): not
            # known until its agent reports one again.
            self.site_power_limit_w = None
            update_fields = kwargs.get("update_fields")
            if update_fields is not None:
                kwargs["update_fields"] = {*update_fields, "site_power_limit_w"}
        # A GPU saved onto another node than the one it was read on (another node's agent
        # registered it, an admin moved it) is that node's from now: before, the new node's
        # token posted samples stamped while the GPU ran its old node's jobs, and they were
        # charged to those jobs (``telemetry.ingest``, ``telemetry.services``).
        # (A caller that knows when, as registration does, sets ``node_since`` itself.)
        loaded_node, loaded_since = getattr(self, "_loaded_node", (None, None))
        if loaded_node is not None and self.node_id != loaded_node:
            if self.node_since == loaded_since:
                self.node_since = timezone.now()
            update_fields = kwargs.get("update_fields")
            if update_fields is not None:
                kwargs["update_fields"] = {*update_fields, "node_since"}
        super().save(*args, **kwargs)
        self._loaded_node = (self.node_id, self.node_since)

    @classmethod
    def from_db(cls, db, field_names, values):
        gpu = super().from_db(db, field_names, values)
        gpu._loaded_node = (gpu.__dict__.get("node_id"), gpu.__dict__.get("node_since"))
        return gpu

    def clean(self) -> None:
        errors = {}
        # A limit left empty or refused by its own field is None here (the admin's add page
        # runs clean() after such a field error): compared, it was a TypeError, a 500.
        low, high = self.min_power_limit_w, self.max_power_limit_w
        default = self.default_power_limit_w
        if None not in (low, default, high) and not (0 < low <= default <= high):
            errors["default_power_limit_w"] = "Power limits must satisfy 0 < min <= default <= max."
        if high is not None and (message := v.top_power_limit_message(high)):
            errors["max_power_limit_w"] = message
        if (
            self.power_limit_w is not None
            and None not in (low, high)
            and not (low <= self.power_limit_w <= high)
        ):
            errors["power_limit_w"] = f"Must be between {low} and {high} W."
        if (
            self.sm_clock_mhz is not None
            and self.supported_sm_clocks_mhz
            and self.sm_clock_mhz not in self.supported_sm_clocks_mhz
        ):
            errors["sm_clock_mhz"] = "Not one of the GPU's supported SM clocks."
        clocks = sm_clock_conflict(self.max_sm_clock_mhz, self.supported_sm_clocks_mhz)
        if clocks:
            errors["supported_sm_clocks_mhz"] = clocks
        if self.pk is not None:
            # A GPU a job runs on stays on its node under its UUID, as retiring it waits
            # (``services.retire_gpu``): moved by an edit (the API, the admin), its node's
            # agent lost the job and had its exit refused (403), and the other node's agent
            # was told to run the job on a GPU it does not have.
            # A job that left it within ``RECENT_STOP`` counts too: its node's agent may
            # still hold the job's last events (refused, 403, once the GPU is elsewhere).
            stored = Gpu.objects.filter(pk=self.pk).values_list("node_id", "uuid").first()
            if (
                stored is not None
                and stored != (self.node_id, self.uuid)
                and transaction.get_connection().in_atomic_block
            ):
                # Under the row lock ``set_allocation`` takes, held to the edit's commit: a
                # round placing a job here between this check and the save waits for the
                # edit, or the edit for the round and then sees its job. (Every edit path
                # runs this inside a transaction: the admin's change views and the API's.)
                stored = (
                    Gpu.objects.select_for_update(no_key=True)
                    .filter(pk=self.pk)
                    .values_list("node_id", "uuid")
                    .first()
                )
            recent = timezone.now() - RECENT_STOP
            if (
                stored is not None
                and stored != (self.node_id, self.uuid)
                and self.allocations.filter(
                    Q(ended_at__isnull=True) | Q(ended_at__gte=recent)
                ).exists()
            ):
                field = "node" if stored[0] != self.node_id else "uuid"
                errors[field] = (
                    "The GPU runs a job now or ran one within the hour: drain its node and "
                    "change this an hour after the job has moved or ended."
                )
        if errors:
            raise ValidationError(errors)


class Job(models.Model):
    """A training job: what to run, how elastic it is, how much work it has, and where it is.

    ``workload`` names what the job trains, freely: a key of the performance catalog (e.g.
    ``resnet50``) is predicted from its measured model, any other name from an estimate
    (``scheduling.perf_lookup``) that the job's own telemetry corrects. ``resembles`` (a catalog
    workload it is like) and ``param_count`` are the submitter's hints for that estimate;
    ``per_gpu_batch_size`` is the third. ``min_gpus``..
    ``max_gpus`` and ``min_batch_size``..``max_batch_size`` bound what elastic policies may
    choose. ``per_gpu_batch_size``, ``base_lr`` and ``max_lr`` feed the ONES policy;
    ``slowdown_tolerance`` is the slowdown EaCO may trade for energy. ``state`` changes only
    through ``cluster.services.transition_job`` (a conditional update). ``pending_*`` say why a
    queued or paused job waits (codes: ``cluster.choices.WaitCode``).
    """

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(max_length=200, validators=[v.single_line])
    workload = models.CharField(
        max_length=100,
        help_text="What the job trains: a performance catalog key, or any other name.",
        validators=[v.single_line],
    )
    resembles = models.CharField(
        max_length=100,
        blank=True,
        help_text="Hint: the catalog workload this one is most like (its prior when unknown).",
        validators=[v.single_line],
    )
    param_count = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="Hint: the model's number of parameters.",
        validators=[MinValueValidator(v.MIN_PARAM_COUNT), MaxValueValidator(v.MAX_PARAM_COUNT)],
    )
    gpu_model = models.CharField(
        max_length=100, blank=True, help_text="Blank: any GPU model.", validators=[v.single_line]
    )
    command = models.TextField(blank=True, validators=[v.multi_line, v.command_length])
    min_gpus = models.PositiveIntegerField(
        default=1, validators=[MaxValueValidator(v.MAX_GPUS_PER_JOB)]
    )
    max_gpus = models.PositiveIntegerField(
        default=1, validators=[MaxValueValidator(v.MAX_GPUS_PER_JOB)]
    )
    global_batch_size = models.PositiveIntegerField(
        validators=[MaxValueValidator(v.MAX_BATCH_SIZE)]
    )
    min_batch_size = models.PositiveIntegerField(validators=[MaxValueValidator(v.MAX_BATCH_SIZE)])
    max_batch_size = models.PositiveIntegerField(validators=[MaxValueValidator(v.MAX_BATCH_SIZE)])
    per_gpu_batch_size = models.PositiveIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(v.MAX_BATCH_SIZE)]
    )
    base_lr = models.FloatField(
        null=True,
        blank=True,
        validators=[v.finite, MinValueValidator(v.MIN_LEARNING_RATE), MaxValueValidator(10.0)],
    )
    max_lr = models.FloatField(
        null=True,
        blank=True,
        validators=[v.finite, MinValueValidator(v.MIN_LEARNING_RATE), MaxValueValidator(10.0)],
    )
    slowdown_tolerance = models.FloatField(
        default=0.10, validators=[v.finite, MinValueValidator(0.0), MaxValueValidator(10.0)]
    )
    total_iterations = models.PositiveBigIntegerField(
        validators=[MaxValueValidator(v.MAX_ITERATIONS)]
    )
    completed_iterations = models.FloatField(default=0.0, validators=[v.finite])
    priority = models.IntegerField(
        default=0, validators=[MinValueValidator(-100), MaxValueValidator(100)]
    )
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED)
    submitted_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Why the job waits: the one store (the scheduler's round and liveness write it, leaving
    # queued/paused clears it). ``pending_until`` is when the policy expects it to start (or a
    # cleaner hour to begin), ``pending_round`` the round that last said so.
    pending_reason_code = models.CharField(max_length=64, blank=True, choices=WaitCode.choices)
    pending_reason = models.TextField(blank=True)
    pending_until = models.DateTimeField(null=True, blank=True)
    pending_round = models.ForeignKey(
        "scheduling.SchedulingRound",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        editable=False,
    )
    exit_status = models.IntegerField(null=True, blank=True)
    log_tail = models.TextField(blank=True)
    # The gradient statistics the job last reported with its progress (job-events), from
    # which the scheduler derives its statistical efficiency (scheduling/core/goodput.py):
    # grad_sqr ~ |G|^2 and grad_var = the variance of the mini-batch gradient at
    # grad_batch_size, the batch of the allocation it ran in; null until reported.
    grad_sqr = models.FloatField(null=True, blank=True, editable=False)
    grad_var = models.FloatField(null=True, blank=True, editable=False)
    grad_batch_size = models.PositiveIntegerField(null=True, blank=True, editable=False)
    grad_stats_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Cached pointer to the open JobAllocation (the one with ended_at null), kept in step by
    # cluster.services so list pages need no subquery.
    current_allocation = models.OneToOneField(
        "JobAllocation",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        editable=False,
    )
    updated_at = models.DateTimeField(auto_now=True)
    # A client's key for this submission (the API's ``Idempotency-Key`` header, the submit
    # form's hidden key) and a digest of what was sent with it: a retried submit with the
    # same key answers with this job instead of queueing a second one.
    idempotency_key = models.CharField(max_length=128, blank=True, default="", editable=False)
    request_digest = models.CharField(max_length=64, blank=True, default="", editable=False)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["state", "submitted_at"], name="job_state_submitted_idx"),
            models.Index(fields=["team", "state"], name="job_team_state_idx"),
            # The job list's order (the page, the API, the admin): without it an admin's
            # first page sorted all 100,000 jobs of a large cluster's history (420 ms).
            models.Index(fields=["-submitted_at", "-id"], name="job_submitted_id_idx"),
            # Jobs finished lately, by state: each round's average JCT of the last day and
            # the dashboard's week of completions read every completed job without it.
            models.Index(fields=["state", "finished_at"], name="job_state_finished_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=JobState.values), name="job_state_valid"),
            models.CheckConstraint(
                condition=Q(pending_reason_code="") | Q(pending_reason_code__in=WaitCode.values),
                name="job_pending_reason_code_valid",
            ),
            models.CheckConstraint(
                condition=Q(min_gpus__gte=1) & Q(max_gpus__gte=F("min_gpus")),
                name="job_gpu_range_valid",
            ),
            models.CheckConstraint(
                condition=Q(min_batch_size__gte=1)
                & Q(min_batch_size__lte=F("global_batch_size"))
                & Q(global_batch_size__lte=F("max_batch_size")),
                name="job_batch_range_valid",
            ),
            models.CheckConstraint(
                condition=Q(total_iterations__gte=1) & Q(completed_iterations__gte=0),
                name="job_iterations_valid",
            ),
            models.CheckConstraint(
                condition=Q(slowdown_tolerance__gte=0), name="job_slowdown_tolerance_valid"
            ),
            finite_check("base_lr", nullable=True),
            finite_check("max_lr", nullable=True),
            finite_check("slowdown_tolerance"),
            finite_check("completed_iterations"),
            finite_check("grad_sqr", nullable=True),
            finite_check("grad_var", nullable=True),
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="job_owner_idempotency_key_unique",
            ),
            models.CheckConstraint(
                condition=(Q(grad_sqr__isnull=True) | Q(grad_sqr__gte=0))
                & (Q(grad_var__isnull=True) | Q(grad_var__gte=0)),
                name="job_grad_stats_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def state_choice(self) -> JobState:
        return JobState(self.state)

    @property
    def remaining_iterations(self) -> float:
        return max(0.0, self.total_iterations - self.completed_iterations)

    @property
    def noise_scale(self) -> float | None:
        """Gradient noise scale (samples) the scheduler uses: from the reported statistics
        (calibrated), else the workload's learned curve, else None (efficiency unknown)."""
        return load_curves().noise_scale(
            self.workload,
            grad_sqr=self.grad_sqr,
            grad_var=self.grad_var,
            batch=self.grad_batch_size,
        )

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.min_gpus is not None and self.min_gpus < 1:
            errors["min_gpus"] = "A job needs at least 1 GPU."
        if (
            self.min_gpus is not None
            and self.max_gpus is not None
            and self.max_gpus < self.min_gpus
        ):
            errors["max_gpus"] = "Must be at least min_gpus."
        if self.global_batch_size is not None:
            if self.min_batch_size is not None and self.min_batch_size > self.global_batch_size:
                errors["min_batch_size"] = "Must not exceed global_batch_size."
            if self.max_batch_size is not None and self.max_batch_size < self.global_batch_size:
                errors["max_batch_size"] = "Must be at least global_batch_size."
            # Each GPU computes at least one sample of every step (a batch of 3 on 4 GPUs
            # was accepted and run).
            smallest = min(self.min_batch_size or self.global_batch_size, self.global_batch_size)
            if self.min_gpus is not None and "min_batch_size" not in errors:
                if smallest < self.min_gpus:
                    field = "global_batch_size"
                    if smallest != self.global_batch_size:
                        field = "min_batch_size"
                    errors[field] = (
                        f"A batch of {smallest} is smaller than the {self.min_gpus} GPU(s) the "
                        "job needs at least: each GPU computes at least one sample a step."
                    )
        if self.per_gpu_batch_size is not None:
            # 0 read as "not given" in ONES; more than the largest global batch cannot be
            # a share of one.
            largest = self.max_batch_size or self.global_batch_size
            if self.per_gpu_batch_size < 1:
                errors["per_gpu_batch_size"] = "Must be at least 1."
            elif largest is not None and self.per_gpu_batch_size > largest:
                errors["per_gpu_batch_size"] = (
                    f"Must not exceed the largest global batch size ({largest})."
                )
        if self.total_iterations is not None and self.total_iterations < 1:
            errors["total_iterations"] = "A job needs at least 1 iteration."
        if self.completed_iterations is not None and self.completed_iterations < 0:
            errors["completed_iterations"] = "Must not be negative."
        if self.base_lr is not None and self.base_lr <= 0:
            errors["base_lr"] = "Must be positive."
        if self.max_lr is not None and self.base_lr is not None and self.max_lr < self.base_lr:
            errors["max_lr"] = "Must be at least base_lr."
        if errors:
            raise ValidationError(errors)


class JobAllocation(models.Model):
    """What a job ran on for a stretch of time: GPUs, batch size and GPU clock or power limit.

    The history of a job is its allocations; the current one has ``ended_at`` null (at most
    one per job, enforced by a partial unique constraint).
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="allocations")
    gpus = models.ManyToManyField(Gpu, related_name="allocations")
    batch_size = models.PositiveIntegerField()
    sm_clock_mhz = models.PositiveIntegerField(null=True, blank=True)
    power_limit_w = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    iterations_per_submitted = models.FloatField(
        null=True,
        blank=True,
        help_text=(
            "Iterations at this batch that do one iteration of the job's work (at its "
            "submitted batch), fixed when the allocation started: the job is told its work "
            "in these units and its progress is counted back with the same factor. Empty: "
            "an allocation from before it was kept (its job's noise scale now is used)."
        ),
    )

    class Meta:
        ordering = ["job", "started_at"]
        # Each round reads the allocations that ended lately (scheduling.services).
        indexes = [
            models.Index(
                fields=["ended_at"],
                condition=Q(ended_at__isnull=False),
                name="joballocation_ended_at",
            )
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["job"],
                condition=Q(ended_at__isnull=True),
                name="joballocation_one_open_per_job",
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=F("started_at")),
                name="joballocation_ends_after_start",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job} from {self.started_at:%Y-%m-%d %H:%M}"

    @property
    def is_open(self) -> bool:
        return self.ended_at is None


OVERLAP_MESSAGE = (
    "This team already has a budget for part of this period; one budget rules a period, "
    "so end one before the other starts, or edit the existing one."
)


class TsTzRange(Func):
    """``tstzrange(start, end)``: the half-open period ``[start, end)`` of a budget."""

    function = "TSTZRANGE"
    output_field = DateTimeRangeField()


class Budget(models.Model):
    """A team's energy and/or carbon allowance for a period.

    At ``warn_fraction`` of either limit the team is warned; at the limit the scheduler applies
    ``hard_limit_action``.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="budgets")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    energy_limit_kwh = models.FloatField(
        null=True,
        blank=True,
        validators=[v.finite, MaxValueValidator(v.MAX_ENERGY_LIMIT_KWH)],
    )
    carbon_limit_kg = models.FloatField(
        null=True,
        blank=True,
        help_text="kg CO2e",
        validators=[v.finite, MaxValueValidator(v.MAX_CARBON_LIMIT_KG)],
    )
    warn_fraction = models.FloatField(default=0.8, validators=[v.finite])
    hard_limit_action = models.CharField(
        max_length=16, choices=HardLimitAction.choices, default=HardLimitAction.HOLD_QUEUE
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["team__name", "-period_start"]
        constraints = [
            models.CheckConstraint(
                condition=Q(period_end__gt=F("period_start")), name="budget_end_after_start"
            ),
            models.CheckConstraint(
                condition=Q(energy_limit_kwh__isnull=False) | Q(carbon_limit_kg__isnull=False),
                name="budget_has_a_limit",
            ),
            models.CheckConstraint(
                condition=(Q(energy_limit_kwh__isnull=True) | Q(energy_limit_kwh__gt=0))
                & (Q(carbon_limit_kg__isnull=True) | Q(carbon_limit_kg__gt=0)),
                name="budget_limits_positive",
            ),
            models.CheckConstraint(
                condition=Q(warn_fraction__gt=0) & Q(warn_fraction__lte=1),
                name="budget_warn_fraction_valid",
            ),
            models.CheckConstraint(
                condition=Q(hard_limit_action__in=HardLimitAction.values),
                name="budget_hard_limit_action_valid",
            ),
            finite_check("energy_limit_kwh", nullable=True),
            finite_check("carbon_limit_kg", nullable=True),
            finite_check("warn_fraction"),
            # One budget rules a team's period: two that overlap would leave the scheduler to
            # guess which. clean() says so per field; this holds against racing writers.
            ExclusionConstraint(
                name="budget_periods_do_not_overlap",
                expressions=[
                    (TsTzRange("period_start", "period_end"), RangeOperators.OVERLAPS),
                    ("team", RangeOperators.EQUAL),
                ],
                violation_error_message=OVERLAP_MESSAGE,
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.period_start:%Y-%m-%d}..{self.period_end:%Y-%m-%d}"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.energy_limit_kwh is None and self.carbon_limit_kg is None:
            errors["energy_limit_kwh"] = "Set an energy limit, a carbon limit, or both."
        for field, kind in (("energy_limit_kwh", "energy"), ("carbon_limit_kg", "carbon")):
            limit = getattr(self, field)
            error = None if limit is None else v.budget_limit_floor_error(kind, limit)
            if error is not None:
                errors[field] = error
        errors.update(v.period_bound_errors(self.period_start, self.period_end))
        start, end = self.period_start, self.period_end
        if "period_end" not in errors and start and end and end <= start:
            errors["period_end"] = "Must be after period_start."
        if self.warn_fraction is not None and not (v.MIN_WARN_FRACTION <= self.warn_fraction <= 1):
            # The budget form's 1-100 %: a soft limit of 5e-324 warned the team at once.
            errors["warn_fraction"] = (
                f"Must be between {v.MIN_WARN_FRACTION:g} and 1 (1% to 100% of the hard limit)."
            )
        in_range = not {"period_start", "period_end"} & set(errors)
        if in_range and self.team_id and self.period_start and self.period_end:
            overlapping = (
                Budget.objects.filter(
                    team_id=self.team_id,
                    period_start__lt=self.period_end,
                    period_end__gt=self.period_start,
                )
                .exclude(pk=self.pk)
                .order_by("period_start")
                .first()
            )
            if overlapping is not None:
                errors["period_start"] = (
                    f"{OVERLAP_MESSAGE} It overlaps budget #{overlapping.pk} "
                    f"({overlapping.period_start:%Y-%m-%d %H:%M} .. "
                    f"{overlapping.period_end:%Y-%m-%d %H:%M} UTC)."
                )
        if errors:
            raise ValidationError(errors)


class BudgetAlert(models.Model):
    """A budget's hard limit was reached: one alert per budget, so one per team and period.

    Written by the scheduling round that first finds the budget spent
    (``scheduling.budget_alerts``); the team's leads see it on the dashboard and get it by
    e-mail (``emailed_to``, ``emailed_at`` once sent). Admins see every team's. What was spent
    and the limits are kept as they stood then, in the budget's own units."""

    budget = models.OneToOneField(Budget, on_delete=models.CASCADE, related_name="alert")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="budget_alerts")
    at = models.DateTimeField(db_index=True, help_text="The round that found the limit reached.")
    action = models.CharField(
        max_length=16,
        choices=HardLimitAction.choices,
        help_text="The budget's hard-limit action then: what the scheduler does now.",
    )
    energy_used_kwh = models.FloatField()
    energy_limit_kwh = models.FloatField(null=True, blank=True)
    carbon_used_kg = models.FloatField()
    carbon_limit_kg = models.FloatField(null=True, blank=True)
    emailed_to = ArrayField(models.EmailField(), default=list, blank=True)
    emailed_at = models.DateTimeField(
        null=True, blank=True, help_text="Null: no e-mail sent yet (none sent, or it failed)."
    )

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(action__in=HardLimitAction.values), name="budget_alert_action_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team} budget #{self.budget_id} spent at {self.at:%Y-%m-%d %H:%M}"

    @property
    def after_period(self) -> bool:
        """Found once the period had ended: its last minutes were accounted after its last
        round (``scheduling.budget_alerts.record_overruns``), so no round could act on it."""
        return self.at >= self.budget.period_end

    @property
    def consequence(self) -> str:
        """What the scheduler does about it, in words."""
        if self.after_period:
            return AFTER_PERIOD_CONSEQUENCE
        return ALERT_CONSEQUENCES[HardLimitAction(self.action)]


AFTER_PERIOD_CONSEQUENCE = (
    "The period had already ended: its last minutes, accounted after its last scheduling "
    "round, passed the limit, and no round could act on it any more."
)
ALERT_CONSEQUENCES = {
    HardLimitAction.NOTIFY_ONLY: "Jobs keep running and starting: this budget only notifies.",
    HardLimitAction.HOLD_QUEUE: "No new job starts until the period ends; running jobs finish.",
    HardLimitAction.PAUSE_JOBS: "Running jobs are paused and none starts until the period ends.",
}


class AuditEntry(models.Model):
    """One change to an audited setting (budgets, scheduling policy): who, when, before, after.

    Written only through ``cluster.services.record_audit`` in the same transaction as the
    change, so an entry exists exactly when the change committed. ``object_type`` names what
    changed (``budget``, ``scheduling_policy``, ...), ``object_id`` which one; ``before`` and
    ``after`` are JSON snapshots of the fields (``None`` on create and delete respectively).
    ``actor_username`` keeps the name readable after the user is deleted.
    """

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="audit_entries",
    )
    actor_username = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=16, choices=AuditAction.choices)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64, blank=True)
    team = models.ForeignKey(
        Team, on_delete=models.SET_NULL, null=True, blank=True, related_name="audit_entries"
    )
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        constraints = [
            models.CheckConstraint(
                condition=Q(action__in=AuditAction.values), name="auditentry_action_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_username} {self.action} {self.object_type}"

    @property
    def changed_fields(self) -> list[str]:
        """Names of the fields whose value differs between before and after, sorted."""
        before = self.before or {}
        after = self.after or {}
        return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
