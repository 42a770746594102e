"""Serializers of the cluster API. Fields are listed explicitly; model ``clean()`` is the one
place where cross-field rules live, so both the admin and the API apply the same checks."""

from functools import cached_property

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, models, transaction
from django.db.models import Q
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.validators import UniqueTogetherValidator

from cluster import folded_names, services
from cluster.choices import JobState, WaitCode
from cluster.models import Budget, Gpu, Job, JobAllocation, Membership, Node, Team
from cluster.queries import (
    can_manage_budgets_of,
    managed_teams,
    priority_refusal,
    submittable_teams,
    teams_visible_to,
)
from cluster.validators import MIN_TOP_POWER_LIMIT_W, TOP_POWER_LIMIT_MESSAGE
from cluster.workloads import catalog_name, gpu_model_spelling, known_workloads, workload_errors
from scheduling.choices import PerfModelKind
from scheduling.feasibility import submit_refusals
from scheduling.perf_lookup import job_models
from scheduling.workload_profiles import JobHints
from telemetry.agent.backends import gpu_model_key
from telemetry.usage import budget_usage


def run_model_clean(model_class, attrs: dict, instance=None) -> None:
    """Check ``attrs`` as the model would before saving (nothing is saved) and turn Django's
    errors into DRF's per-field 400 errors: each given field's own validators (ranges, finite
    numbers, control characters, lengths: ``cluster.validators``), then ``model.clean()`` on
    ``instance`` updated with ``attrs`` for the cross-field rules."""
    values = {}
    if instance is not None:
        values = {
            field.attname: getattr(instance, field.attname)
            for field in model_class._meta.concrete_fields
        }
    probe = model_class(**values)
    errors: dict[str, list[str]] = {}
    fields = {field.name: field for field in model_class._meta.concrete_fields}
    for name, value in attrs.items():
        setattr(probe, name, value)
        field = fields.get(name)
        if field is None or field.is_relation:
            continue
        try:
            field.run_validators(value)
        except DjangoValidationError as exc:
            errors[name] = exc.messages
    try:
        probe.clean()
    except DjangoValidationError as exc:
        for key, messages in exc.message_dict.items():
            errors.setdefault("non_field_errors" if key == "__all__" else key, messages)
    if errors:
        raise serializers.ValidationError(errors)


class NumberFloatField(serializers.FloatField):
    """DRF's FloatField, refusing JSON's true and false: ``float(True)`` is 1.0, and a
    budget sent as ``"energy_limit_kwh": true`` was stored as 1 kWh (found by probing)."""

    def to_internal_value(self, data):
        if isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class _NumbersOnly(serializers.ModelSerializer):
    """A ModelSerializer whose model float fields refuse booleans."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.FloatField: NumberFloatField,
    }


class TeamSlugField(serializers.SlugRelatedField):
    """A team named by its slug. A value that cannot be a slug is refused before the lookup:
    PostgreSQL refuses a NUL in a query parameter, which answered 500. To a user who is not
    an admin, a team they are not a member of does not exist: its error is an absent
    team's, so other teams' names cannot be told apart from names nobody uses.

    ``writable`` (``(user, serializer) -> teams``): the teams the user may write the row for
    beyond those they see (``submittable_teams`` for jobs, ``managed_teams`` for budgets).
    A staff user holding ``add_job`` or ``add_budget`` but not ``view_team`` was told that
    another team does not exist through the API, while the pages and the Django admin let
    them submit and budget for it."""

    def __init__(self, *, writable=None, **kwargs):
        self.writable = writable
        super().__init__(slug_field="slug", queryset=Team.objects.all(), **kwargs)

    def get_queryset(self):
        # The teams the field knows are the ones the user may see: it also lists them as the
        # choices of the browsable API's form (``Accept: text/html``), which offered every
        # team's slug and name to a member of one.
        request = self.context.get("request")
        user = getattr(request, "user", None)
        if user is None:
            return Team.objects.all()
        visible = teams_visible_to(user)
        if self.writable is None:
            return visible
        writable = self.writable(user, self.parent)
        return Team.objects.filter(Q(pk__in=visible.values("pk")) | Q(pk__in=writable.values("pk")))

    def to_internal_value(self, data):
        if not isinstance(data, str) or not data.isprintable() or len(data) > 50:
            self.fail("does_not_exist", slug_name=self.slug_field, value=str(data)[:50])
        return super().to_internal_value(data)


class JobAllocationSerializer(serializers.ModelSerializer):
    gpus = serializers.PrimaryKeyRelatedField(many=True, read_only=True)

    class Meta:
        model = JobAllocation
        fields = [
            "id",
            "gpus",
            "batch_size",
            "sm_clock_mhz",
            "power_limit_w",
            "started_at",
            "ended_at",
        ]
        read_only_fields = fields


class ExplorationProbeSerializer(serializers.Serializer):
    limit_w = serializers.FloatField(help_text="Power limit tried (W).")
    n_gpus = serializers.IntegerField(help_text="GPUs it ran on while tried.")
    seconds = serializers.FloatField(help_text="How long it ran there.")
    cost_s = serializers.FloatField(help_text="Seconds lost against the fastest limit tried.")
    energy_j = serializers.FloatField(help_text="Energy per iteration there, as learned (J).")


class GpuProbeSerializer(serializers.Serializer):
    from_gpus = serializers.IntegerField(help_text="GPUs it ran on before the probe.")
    n_gpus = serializers.IntegerField(help_text="GPUs it ran on for the probe's round.")
    since_s = serializers.FloatField(help_text="When the probe started (scheduler clock, s).")
    cost_s = serializers.FloatField(help_text="Seconds it was predicted to cost.")
    sm_clock_mhz = serializers.IntegerField(
        allow_null=True,
        default=None,
        help_text="The clock a probe a budget pays for ran at, to draw no more than the "
        "round it replaced; null: the plan's.",
    )


class ExplorationBatchProbeSerializer(serializers.Serializer):
    """The batch probe (exploration.BATCH_PROBE): one round at a larger global batch on the
    same GPUs at the default limit, once the limit search is over."""

    batch = serializers.IntegerField(help_text="The global batch probed.")
    from_batch = serializers.IntegerField(help_text="The batch the limits were explored at.")
    n_gpus = serializers.IntegerField(help_text="GPUs it ran on.")
    limit_w = serializers.FloatField(help_text="The power limit it ran at (W).")
    since_s = serializers.FloatField(help_text="When it started (scheduler clock, s).")
    seconds = serializers.FloatField(help_text="How long it ran (0: it did not run).")
    cost_s = serializers.FloatField(
        help_text="Seconds of completion time it cost (where it did not run because the "
        "cost would not fit the bound: what it was predicted to cost)."
    )
    energy_j = serializers.FloatField(
        allow_null=True, help_text="Energy per iteration there, as learned (J); null if unknown."
    )
    runnable = serializers.BooleanField(
        allow_null=True,
        help_text="true: the job made progress there; false: it did not (that batch is not "
        "given again); null: not run (see reason).",
    )
    reason = serializers.CharField(allow_blank=True, help_text="Why not runnable or not run.")


class JobModelSerializer(serializers.Serializer):
    """What the scheduler's model of a job is on one GPU model (``perf_lookup.job_models``)."""

    gpu_model = serializers.CharField()
    kind = serializers.ChoiceField(
        choices=["own", "prior"],
        help_text="own: fitted to the job's own measured iteration times; prior: still its "
        "prior (see prior_kind).",
    )
    observations = serializers.FloatField(
        help_text="The job's own iteration-time measurements behind it (weights summed)."
    )
    prior = serializers.CharField(help_text="What it started from, e.g. 'profile v2'.")
    prior_kind = serializers.ChoiceField(
        choices=PerfModelKind.choices,
        allow_null=True,
        help_text="catalog: measured offline; learned: a workload profile; estimated: carried "
        "from another workload or GPU model.",
    )


class ExplorationSerializer(serializers.Serializer):
    """A job's just-in-time exploration of power limits (scheduling/core/exploration.py)
    and of larger GPU counts (scheduling/core/gpu_probe.py)."""

    status = serializers.ChoiceField(choices=["exploring", "done"])
    spent_s = serializers.FloatField(help_text="Seconds of completion time exploring cost.")
    budget_s = serializers.FloatField(help_text="Its bound: budget_frac x predicted JCT.")
    budget_frac = serializers.FloatField()
    tried = ExplorationProbeSerializer(many=True)
    other_gpus = serializers.IntegerField(
        allow_null=True, help_text="The other GPU count tried (elastic jobs), if any."
    )
    result_w = serializers.FloatField(
        allow_null=True, help_text="The energy-optimal limit exploration found."
    )
    reason = serializers.CharField(allow_blank=True, help_text="Why exploration stopped.")
    gpu_probes = GpuProbeSerializer(
        many=True,
        default=list,
        help_text="Larger GPU counts tried for a round each on GPUs that stood idle.",
    )
    other_batch = ExplorationBatchProbeSerializer(
        allow_null=True,
        default=None,
        help_text="The batch probe, once tried or judged; null otherwise (or off).",
    )


class JobSerializer(_NumbersOnly):
    """A training job: what was submitted, its state, and why it waits (``pending_*``)."""

    team = TeamSlugField(writable=lambda user, serializer: submittable_teams(user))
    owner = serializers.CharField(source="owner.username", read_only=True)
    min_gpus = serializers.IntegerField(min_value=1, default=1)
    max_gpus = serializers.IntegerField(min_value=1, required=False)
    global_batch_size = serializers.IntegerField(min_value=1)
    min_batch_size = serializers.IntegerField(min_value=1, required=False)
    max_batch_size = serializers.IntegerField(min_value=1, required=False)
    total_iterations = serializers.IntegerField(min_value=1)
    state_colour = serializers.SerializerMethodField()
    current_allocation = JobAllocationSerializer(read_only=True)
    exploration = serializers.SerializerMethodField()
    models = serializers.SerializerMethodField()
    # Why is my job pending: ``pending_*`` are the job's own fields (the one store), written by
    # the latest round (reason, expected start or cleaner hour, the round) or by liveness.
    # Blank while the job does not wait (the schema must say "" is a value too).
    pending_reason_code = serializers.ChoiceField(
        choices=WaitCode.choices, allow_blank=True, read_only=True
    )

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "team",
            "owner",
            "workload",
            "gpu_model",
            "resembles",
            "param_count",
            "command",
            "min_gpus",
            "max_gpus",
            "global_batch_size",
            "min_batch_size",
            "max_batch_size",
            "per_gpu_batch_size",
            "base_lr",
            "max_lr",
            "slowdown_tolerance",
            "total_iterations",
            "completed_iterations",
            "priority",
            "state",
            "state_colour",
            "submitted_at",
            "started_at",
            "finished_at",
            "pending_reason_code",
            "pending_reason",
            "pending_until",
            "pending_round",
            "exit_status",
            "log_tail",
            "current_allocation",
            "exploration",
            "models",
        ]
        extra_kwargs = {
            "priority": {
                "help_text": (
                    "Orders the jobs of every team a policy considers for starting: a "
                    "higher one first (a preemptive policy such as tiresias may stop "
                    "another team's running jobs for it). Default 0; from -100 to 100. "
                    "Only a lead of the job's team or an admin may set more than 0 "
                    "(400 naming this field otherwise); a member may rank their own "
                    "work below the default."
                )
            }
        }
        read_only_fields = [
            "id",
            "owner",
            "completed_iterations",
            "state",
            "submitted_at",
            "started_at",
            "finished_at",
            "pending_reason_code",
            "pending_reason",
            "pending_until",
            "pending_round",
            "exit_status",
            "log_tail",
        ]

    def get_state_colour(self, job: Job) -> str:
        return JobState(job.state).colour

    @extend_schema_field(JobModelSerializer(many=True))
    def get_models(self, job: Job) -> list[dict]:
        """The scheduler's model of the job per GPU model it ran on: learned from its own
        measurements, or still its prior (and of which kind); empty before it ran."""
        return job_models(getattr(job, "scheduling", None) if job.pk else None)

    @extend_schema_field(ExplorationSerializer(allow_null=True))
    def get_exploration(self, job: Job) -> dict | None:
        """The job's exploration of power limits and GPU counts; null if it explored none."""
        state = getattr(job, "scheduling", None) if job.pk else None
        record = state.exploration if state is not None else None
        if not record:
            return None
        return ExplorationSerializer(record).data

    @cached_property
    def _known_workloads(self) -> tuple[str, ...]:
        """The catalog's workloads, read once a submit (every check below asks)."""
        return known_workloads()

    def validate_workload(self, value: str) -> str:
        return catalog_name(value, self._known_workloads)

    def validate_resembles(self, value: str) -> str:
        return catalog_name(value, self._known_workloads) if value else value

    def validate_gpu_model(self, value: str) -> str:
        # As the agents register GPUs: a name copied from nvidia-smi ("NVIDIA H200")
        # asks for the model key its GPUs are stored under (H200), in any case ("l40s").
        # The catalog's spelling first ("a100" before any A100 registered asked for a
        # model no GPU would ever be), else the first registered one.
        return gpu_model_spelling(gpu_model_key(value))

    def validate_team(self, team: Team) -> Team:
        # An admin sees every team (the field's choices); submitting to one they are not in
        # is what Django's ``add_job`` grants, as the pages ask (``submittable_teams``).
        request = self.context.get("request")
        user = getattr(request, "user", None)
        if user is not None and not submittable_teams(user).filter(pk=team.pk).exists():
            raise PermissionDenied(
                f"Only members of team {team.slug}, and admins allowed to add jobs, submit "
                "jobs to it."
            )
        return team

    def validate(self, attrs: dict) -> dict:
        # The same defaults as services.submit_job, so clean() sees the values to be stored.
        attrs.setdefault("max_gpus", attrs["min_gpus"])
        attrs.setdefault("min_batch_size", attrs["global_batch_size"])
        attrs.setdefault("max_batch_size", attrs["global_batch_size"])
        errors = workload_errors(
            attrs["workload"],
            attrs.get("gpu_model", ""),
            resembles=attrs.get("resembles", ""),
            param_count=attrs.get("param_count"),
            known=self._known_workloads,
        )
        if errors:
            raise serializers.ValidationError({field: [msg] for field, msg in errors.items()})
        run_model_clean(Job, attrs)
        request = self.context.get("request")
        refusal = priority_refusal(
            getattr(request, "user", None), attrs["team"], attrs.get("priority")
        )
        if refusal:
            raise serializers.ValidationError({"priority": [refusal]})
        errors = submit_refusals(
            team=attrs["team"],
            workload=attrs["workload"],
            gpu_model=attrs.get("gpu_model", ""),
            min_gpus=attrs["min_gpus"],
            max_gpus=attrs["max_gpus"],
            min_batch_size=attrs["min_batch_size"],
            total_iterations=attrs["total_iterations"],
            now=timezone.now(),
            hints=JobHints(attrs.get("resembles", ""), attrs.get("param_count")),
        )
        if errors:
            raise serializers.ValidationError({field: [msg] for field, msg in errors.items()})
        return attrs

    def create(self, validated_data: dict) -> Job:
        try:
            return services.submit_job(owner=self.context["request"].user, **validated_data)
        except DjangoValidationError as exc:  # (what changed since ``validate``: the team)
            raise serializers.ValidationError(exc.message_dict) from None


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "role"]
        read_only_fields = fields


def _folded_unique(serializer: serializers.ModelSerializer, kwargs: dict):
    """``serializer.save``, with a look-alike stored beside it (after ``validate`` looked:
    two admins creating ``Vision`` and ``vision`` at once) refused as ``validate`` refuses
    it, a 400 naming the field, where the database's folded index
    (``cluster.folded_names``) or unique constraint refused it."""
    try:
        with transaction.atomic():
            return serializers.ModelSerializer.save(serializer, **kwargs)
    except IntegrityError as exc:
        field = folded_names.field_of_error(exc, serializer.Meta.model._meta.db_table)
        if field is None:
            raise
        raise serializers.ValidationError(
            {
                field: [
                    f"Another {serializer.Meta.model._meta.verbose_name} was stored with a "
                    f"{field} that reads as this one meanwhile: choose another {field}."
                ]
            }
        ) from None


class TeamSerializer(serializers.ModelSerializer):
    members = MembershipSerializer(source="memberships", many=True, read_only=True)

    class Meta:
        model = Team
        fields = ["id", "name", "slug", "members"]
        read_only_fields = ["id", "members"]

    def validate(self, attrs: dict) -> dict:
        run_model_clean(Team, attrs, instance=self.instance)  # (a look-alike of another team)
        return attrs

    def save(self, **kwargs):
        return _folded_unique(self, kwargs)


class LimitUsageSerializer(serializers.Serializer):
    """One limit of a budget against its use, in base units (J for energy, g for carbon)."""

    kind = serializers.ChoiceField(choices=["energy", "carbon"])
    unit = serializers.ChoiceField(choices=["J", "g"])
    # Null where the number is not finite: a budget stored before its limits had bounds
    # (``telemetry.usage.finite_or_none``).
    used = serializers.FloatField(allow_null=True)
    limit = serializers.FloatField(allow_null=True)
    soft_limit = serializers.FloatField(allow_null=True)
    remaining = serializers.FloatField(
        allow_null=True, help_text="Negative once the limit is overspent."
    )
    percent = serializers.FloatField(
        allow_null=True, help_text="Use over limit in percent, not capped at 100."
    )
    over_soft = serializers.BooleanField()
    over_hard = serializers.BooleanField()


class BudgetUsageSerializer(serializers.Serializer):
    """What a budget has used (``telemetry.usage.budget_usage``: the scheduler's number)."""

    energy_used_j = serializers.FloatField()
    co2_used_g = serializers.FloatField()
    # The same use in the units the budget's limits are typed in (energy_limit_kwh,
    # carbon_limit_kg): the budget said 0.141 kWh beside 3451518 J used.
    energy_used_kwh = serializers.FloatField(help_text="energy_used_j in kWh.")
    co2_used_kg = serializers.FloatField(help_text="co2_used_g in kg CO2e.")
    estimated = serializers.BooleanField(
        help_text="Some carbon was priced with a fallback grid intensity."
    )
    limits = LimitUsageSerializer(many=True)


class BudgetSerializer(_NumbersOnly):
    """A team's energy and/or carbon limit over a period, and what it has used."""

    team = TeamSlugField(
        writable=lambda user, serializer: managed_teams(
            user, "add" if serializer.instance is None else "change"
        )
    )
    usage = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = [
            "id",
            "team",
            "period_start",
            "period_end",
            "energy_limit_kwh",
            "carbon_limit_kg",
            "warn_fraction",
            "hard_limit_action",
            "created_at",
            "usage",
        ]
        read_only_fields = ["id", "created_at"]

    @extend_schema_field(BudgetUsageSerializer)
    def get_usage(self, budget: Budget) -> dict:
        # A list's page reads them all at once (``BudgetViewSet.list``).
        usage = self.context.get("usages", {}).get(budget.pk) or budget_usage(budget)
        usage = usage.as_dict()
        fields = ("energy_used_j", "co2_used_g", "energy_used_kwh", "co2_used_kg")
        return {k: usage[k] for k in (*fields, "estimated", "limits")}

    def validate_team(self, team: Team) -> Team:
        # A permission, not a validation error: the user names a team they may not manage.
        verb = "add" if self.instance is None else "change"
        if not can_manage_budgets_of(self.context["request"].user, team, verb):
            raise PermissionDenied("Only the team's leads and admins manage its budgets.")
        return team

    def validate(self, attrs: dict) -> dict:
        run_model_clean(Budget, attrs, instance=self.instance)
        return attrs


class NodeSerializer(serializers.ModelSerializer):
    gpu_count = serializers.SerializerMethodField()
    has_agent_token = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "switch_label",
            "rack_label",
            "gpu_model",
            "status",
            "last_heartbeat_at",
            "agent_spooled",
            "agent_quarantined",
            "agent_quarantine_reason",
            "agent_clock_skew_s",
            "gpu_count",
            "has_agent_token",
        ]
        read_only_fields = [
            "id",
            "last_heartbeat_at",
            "agent_spooled",
            "agent_quarantined",
            "agent_quarantine_reason",
            "agent_clock_skew_s",
            "gpu_count",
            "has_agent_token",
        ]

    def get_gpu_count(self, node: Node) -> int:
        """The GPUs in service (retired ones are history)."""
        return sum(1 for gpu in node.gpus.all() if gpu.retired_at is None)

    def get_has_agent_token(self, node: Node) -> bool:
        return bool(node.agent_token_hash)

    def validate(self, attrs: dict) -> dict:
        run_model_clean(Node, attrs, instance=self.instance)  # (a look-alike of another node)
        return attrs

    def save(self, **kwargs):
        return _folded_unique(self, kwargs)


class AgentTokenSerializer(serializers.Serializer):
    token = serializers.CharField(read_only=True, help_text="Shown once; only its hash is kept.")


class GpuSerializer(serializers.ModelSerializer):
    class Meta:
        model = Gpu
        fields = [
            "id",
            "node",
            "index",
            "uuid",
            "model",
            "memory_mb",
            "default_power_limit_w",
            "min_power_limit_w",
            "max_power_limit_w",
            "supported_sm_clocks_mhz",
            "max_sm_clock_mhz",
            "power_limit_w",
            "sm_clock_mhz",
            "reported_at",
            "retired_at",
            "node_since",
            "missing_since",
        ]
        # What only the agent knows: its registration and newest sample write these;
        # retiring is its own action (``/retire/``), audited.
        read_only_fields = [
            "id", "max_sm_clock_mhz", "reported_at", "retired_at", "node_since", "missing_since",
        ]  # fmt: skip
        # The floor ``Gpu.clean`` holds, as the field's minimum so that the schema says it
        # (it said 0, and a schema-valid 1-9 W was refused); its message is clean's.
        extra_kwargs = {
            "max_power_limit_w": {
                "min_value": MIN_TOP_POWER_LIMIT_W,
                "error_messages": {"min_value": TOP_POWER_LIMIT_MESSAGE},
            }
        }
        # One GPU in service per (node, index): a retired one has given its index up (the
        # constraint's condition names the read-only ``retired_at``, which DRF's own
        # validator for it would read from the request).
        validators = [
            UniqueTogetherValidator(queryset=Gpu.objects.in_service(), fields=["node", "index"])
        ]

    def validate_model(self, value: str) -> str:
        # stored as the agents' registrations store it: a product name or another case is
        # the catalog's (or the cluster's) model key ("a100" is the catalog's A100)
        return gpu_model_spelling(gpu_model_key(value))

    def validate(self, attrs: dict) -> dict:
        gpu = self.instance
        if gpu is not None and "model" in attrs and attrs["model"] != gpu.model:
            # (as the agent's registration refuses: the GPU's allocations, ledger and
            # learned models would move to another model's predictions)
            history = services.gpu_history(gpu)
            if history:
                raise serializers.ValidationError(
                    {"model": [f"GPU {gpu} has {history} as a {gpu.model}: its model "
                               "cannot change; retire it and register the new GPU."]}
                )  # fmt: skip
        run_model_clean(Gpu, attrs, instance=self.instance)
        return attrs


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
