"""Wire format of the agent API. Registration and job events are validated by these
serializers; sample batches are validated by ``telemetry.ingest`` (for speed) and these
classes only document them in the OpenAPI schema."""

import math

from django.core.validators import MaxValueValidator, MinValueValidator
from django.utils.dateparse import parse_datetime
from rest_framework import serializers

from cluster.api.serializers import NumberFloatField
from cluster.models import sm_clock_conflict, sm_clocks_in_order
from cluster.validators import (
    MAX_GPU_INDEX,
    MAX_SM_CLOCK_MHZ,
    MAX_SM_CLOCKS,
    MIN_TOP_POWER_LIMIT_W,
    REPORTED_TOP_POWER_LIMIT_MESSAGE,
    multi_line,
    single_line,
    whole_watts,
)
from cluster.workloads import gpu_model_spelling
from scheduling.core.goodput import MAX_NOISE_SCALE, ratio_beyond_measurement
from telemetry.agent.backends import gpu_model_key
from telemetry.choices import ExitReason, JobEventKind

# Bounds of the columns agent messages land in: a value outside them is a 400 here, not a
# database error (500) later.
_BIGINT_MAX = 2**63 - 1
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
# The largest job (Job.total_iterations is a bigint); progress beyond a job's total is capped,
# and beyond all its work with some to spare counts nothing (``services.most_iterations``).
MAX_ITERATIONS = float(_BIGINT_MAX)


class FiniteFloatField(NumberFloatField):
    """A float that refuses NaN and the infinities (DRF's FloatField takes "NaN"), and, as
    ``NumberFloatField``, JSON's true and false ("iterations": true was stored as 1)."""

    default_error_messages = {"not_finite": "A finite number is required."}

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            self.fail("not_finite")
        return value


# The highest power limit a GPU may register, in the whole watts stored (no board tops out
# near it; the largest have a 1000-1200 W limit).
MAX_POWER_LIMIT_W = 2000


class StoredWattsField(FiniteFloatField):
    """A power limit an agent reports (NVML's milliwatts as watts, a float), judged as the
    GPU row stores it (``whole_watts``, half to even): stored between ``least_w`` and
    ``most_w``. Judged on the float, a limit the row would hold was refused (0.6 W, stored as
    1 W; 2000.4 W, stored as 2000 W) and the top limit alone was judged as stored. The
    schema's bounds are the floats stored at the ends: ``least_w - 0.5`` (exclusive where
    it rounds down, as 0.5 W does) and ``most_w + 0.5`` (exclusive where it rounds up)."""

    default_error_messages = {
        "below_stored": "Must be at least {least_w} W once rounded to whole watts, as it is "
        "stored.",
        "above_stored": "Must be at most {most_w} W once rounded to whole watts, as it is stored.",
    }

    def __init__(self, *, least_w: int, most_w: int, **kwargs):
        self.least_w, self.most_w = least_w, most_w
        super().__init__(min_value=least_w - 0.5, max_value=most_w + 0.5, **kwargs)
        # (the bounds are for the schema, ``config.openapi``: the float's are not the rule)
        self.validators = [
            v for v in self.validators if not isinstance(v, MinValueValidator | MaxValueValidator)
        ]
        self.exclusive_minimum = whole_watts(self.min_value) < least_w
        self.exclusive_maximum = whole_watts(self.max_value) > most_w

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        stored = whole_watts(value)
        if stored < self.least_w:
            self.fail("below_stored", least_w=self.least_w)
        if stored > self.most_w:
            self.fail("above_stored", most_w=self.most_w)
        return value


class GpuRegistrationSerializer(serializers.Serializer):
    # No control characters: a terminal escape in a GPU's model or uuid was stored and
    # shown on the node pages (found by probing the API).
    uuid = serializers.CharField(max_length=64, validators=[single_line])
    index = serializers.IntegerField(min_value=0, max_value=MAX_GPU_INDEX)
    model = serializers.CharField(
        max_length=100,
        validators=[single_line],
        help_text="NVML's product name or a GPU model key; stored as the key "
        "(NVIDIA H200 -> H200), so an older agent's GPUs join a newer one's model.",
    )
    memory_mb = serializers.IntegerField(
        min_value=0,
        max_value=_INT_MAX,
        allow_null=True,
        help_text="Null: unknown; a registered value is kept.",
    )
    # Each limit is judged in the whole watts the row stores (``StoredWattsField``): the top
    # one against the 10 W floor ``Gpu.clean`` holds too (so the admin's GPU API and the
    # Django admin), the others against the 1 W the table's constraint asks (a limit above 0).
    default_power_limit_w = StoredWattsField(least_w=1, most_w=MAX_POWER_LIMIT_W)
    min_power_limit_w = StoredWattsField(least_w=1, most_w=MAX_POWER_LIMIT_W)
    max_power_limit_w = StoredWattsField(
        least_w=MIN_TOP_POWER_LIMIT_W,
        most_w=MAX_POWER_LIMIT_W,
        error_messages={"below_stored": REPORTED_TOP_POWER_LIMIT_MESSAGE},
    )
    site_power_limit_w = StoredWattsField(
        least_w=1,
        most_w=MAX_POWER_LIMIT_W,
        required=False,
        allow_null=True,
        help_text="The limit the GPU enforced when the agent started, before it changed "
        "anything: the site's own cap (nvidia-smi -pl), else its default; within min..max. "
        "Rounds plan no limit above it, and a job told none runs at it. Null or absent "
        "(an older agent): unknown; a registered value is kept.",
    )
    max_sm_clock_mhz = serializers.IntegerField(
        min_value=1,
        max_value=MAX_SM_CLOCK_MHZ,
        required=False,
        allow_null=True,
        help_text="Highest SM clock. Null or absent: unknown; a registered value is kept.",
    )
    supported_sm_clocks_mhz = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_SM_CLOCK_MHZ),
        max_length=MAX_SM_CLOCKS,
        required=False,
        allow_null=True,
        help_text="SM clocks the GPU can be locked at. Null, empty or absent: unknown; "
        "a registered list is kept.",
    )

    def validate_model(self, value):
        # the catalog's (or the cluster's) spelling: "a100" is the catalog's A100
        return gpu_model_spelling(gpu_model_key(value))

    def validate(self, attrs):
        # (on the values stored: 70.4 <= 70.2 W is false, 70 <= 70 W is not)
        low, default, top = (
            whole_watts(attrs[k])
            for k in ("min_power_limit_w", "default_power_limit_w", "max_power_limit_w")
        )
        if not low <= default <= top:
            raise serializers.ValidationError(
                {"default_power_limit_w": "Power limits must satisfy min <= default <= max."}
            )
        site = attrs.get("site_power_limit_w")
        if site is not None and not low <= whole_watts(site) <= top:
            raise serializers.ValidationError(
                {"site_power_limit_w": "Must be within min..max power limit (as stored)."}
            )
        clocks = attrs.get("supported_sm_clocks_mhz")
        if clocks:
            # Against the values registered before: ``services.register_gpus``.
            conflict = sm_clock_conflict(attrs.get("max_sm_clock_mhz"), clocks)
            if conflict:
                raise serializers.ValidationError({"supported_sm_clocks_mhz": conflict})
            # Stored highest first, once each (as every write of a GPU stores them).
            attrs["supported_sm_clocks_mhz"] = sm_clocks_in_order(clocks)
        return attrs


class RegistrationSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, required=False, help_text="Agent's host name.")
    gpus = GpuRegistrationSerializer(many=True, allow_empty=False, max_length=256)

    def validate_gpus(self, gpus):
        for key in ("uuid", "index"):
            values = [g[key] for g in gpus]
            if len(set(values)) != len(values):
                raise serializers.ValidationError(f"Duplicate GPU {key}.")
        return gpus


class RegisteredGpuSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    uuid = serializers.CharField()
    index = serializers.IntegerField()


class RegistrationResultSerializer(serializers.Serializer):
    node_id = serializers.IntegerField()
    node_name = serializers.CharField()
    gpus = RegisteredGpuSerializer(many=True)


class AwareDateTimeField(serializers.DateTimeField):
    """A time with its UTC offset, as samples require (``ingest``): a bare local time was
    read as UTC, so an agent sending local times shifted its events only (a live probe)."""

    default_error_messages = {
        "naive": "An ISO 8601 timestamp with a UTC offset is required.",
    }

    def to_internal_value(self, value):
        if isinstance(value, str):
            try:
                parsed = parse_datetime(value.strip())
            except ValueError:  # shaped like a time but none (Feb 30): DRF's own message
                parsed = None
            if parsed is not None and parsed.tzinfo is None:
                self.fail("naive")
        return super().to_internal_value(value)


class HeartbeatSerializer(serializers.Serializer):
    ts = AwareDateTimeField(
        required=False,
        help_text="The agent's clock when it sent the heartbeat: the server stores its offset "
        "from its own clock as the node's agent_clock_skew_s (the node API, the nodes page, "
        "the admin) and logs a warning past TELEMETRY_MAX_FUTURE_S, the lead at which "
        "samples are refused. Left out, the node's skew is unknown (null).",
    )
    spooled = serializers.IntegerField(
        min_value=0, max_value=_INT_MAX, required=False, help_text="Messages in the spool."
    )
    quarantined = serializers.IntegerField(
        min_value=0,
        max_value=_INT_MAX,
        required=False,
        help_text="Messages the server refused, kept aside by the agent.",
    )
    last_quarantine_reason = serializers.CharField(
        max_length=500,
        allow_blank=True,
        required=False,
        validators=[multi_line],
        help_text="The server's answer to the newest quarantined message.",
    )


class HeartbeatResultSerializer(serializers.Serializer):
    server_time = serializers.DateTimeField()


class SampleSerializer(serializers.Serializer):
    """One reading of one GPU. Nullable fields are values the agent could not read; left out,
    they are null (``telemetry.ingest``, which this describes: it validates samples itself)."""

    gpu_uuid = serializers.CharField()
    ts = serializers.DateTimeField(
        help_text="ISO 8601 with UTC offset; unique per GPU (twice in one batch: a 400)."
    )
    power_w = serializers.FloatField(min_value=0, max_value=2000)
    energy_j = serializers.FloatField(
        min_value=0, allow_null=True, required=False, help_text="Cumulative NVML energy counter, J."
    )
    util_pct = serializers.FloatField(min_value=0, max_value=100, allow_null=True, required=False)
    mem_used_mib = serializers.FloatField(min_value=0, allow_null=True, required=False)
    temp_c = serializers.FloatField(min_value=-50, max_value=150, allow_null=True, required=False)
    sm_clock_mhz = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    power_limit_w = serializers.FloatField(
        min_value=0, max_value=2000, allow_null=True, required=False
    )


class SampleBatchSerializer(serializers.Serializer):
    samples = SampleSerializer(many=True)


class IngestResultSerializer(serializers.Serializer):
    """What a batch stored. A sample whose GPU and time are stored already (an agent's retry)
    is a duplicate: the stored one is kept. ``conflicts`` counts the duplicates whose values
    differed from it, so a contradiction is reported, not dropped silently. (Two samples of
    one GPU at one time within one batch are refused: 400 on the second's ``ts``.)"""

    received = serializers.IntegerField()
    inserted = serializers.IntegerField()
    duplicates = serializers.IntegerField(help_text="Samples already stored: not inserted.")
    conflicts = serializers.IntegerField(
        help_text="Of the duplicates, samples stored with other values: ignored, the stored "
        "sample kept."
    )


class AssignmentSerializer(serializers.Serializer):
    allocation_id = serializers.IntegerField()
    job_id = serializers.IntegerField()
    workload = serializers.CharField()
    resembles = serializers.CharField(
        allow_blank=True,
        help_text="The catalog workload the job says it is like (blank: none given).",
    )
    param_count = serializers.IntegerField(
        allow_null=True, help_text="The job's number of parameters, if given (a hint)."
    )
    command = serializers.CharField(allow_blank=True)
    gpu_uuids = serializers.ListField(child=serializers.CharField(), help_text="This node's.")
    gpu_count = serializers.IntegerField(help_text="GPUs of the job on all nodes.")
    gpus_per_node = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="The job's GPUs on each of its nodes, most first (e.g. [4, 4]).",
    )
    batch_size = serializers.IntegerField(help_text="Global batch size.")
    sm_clock_mhz = serializers.IntegerField(allow_null=True)
    power_limit_w = serializers.IntegerField(allow_null=True)
    checkpoint_dir = serializers.CharField()
    total_iterations = serializers.FloatField(
        help_text="The job's work in iterations at this allocation's batch_size."
    )
    completed_iterations = serializers.FloatField(
        help_text="Work done so far, in iterations at this allocation's batch_size."
    )
    env = serializers.DictField(child=serializers.CharField())


class AssignmentsSerializer(serializers.Serializer):
    assignments = AssignmentSerializer(many=True)
    stop = serializers.ListField(child=serializers.IntegerField(), help_text="Job ids.")


class UuidStringField(serializers.UUIDField):
    """DRF's UUIDField, refusing what is not a string: it read an int (and ``true``) as a
    UUID's 128 bits, so 0, 1 and 2**63 were event ids (a live probe), and an agent counting
    its events would have had them dropped as replays of another node's."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


class JobEventSerializer(serializers.Serializer):
    event_id = UuidStringField(help_text="Chosen by the agent; a replay is applied once.")
    job_id = serializers.IntegerField(min_value=1, max_value=_BIGINT_MAX)
    allocation_id = serializers.IntegerField(
        min_value=1,
        max_value=_BIGINT_MAX,
        help_text="The allocation the event is about: the job's, holding GPUs of this node.",
    )
    kind = serializers.ChoiceField(choices=JobEventKind.choices)
    ts = AwareDateTimeField(
        help_text="Up to TELEMETRY_MAX_CLOCK_SKEW_S before the allocation's start is clamped "
        "to it; further before, or more than TELEMETRY_MAX_FUTURE_S ahead, is refused."
    )
    iterations = FiniteFloatField(
        min_value=0,
        max_value=MAX_ITERATIONS,
        required=False,
        allow_null=True,
        help_text="Iterations done, counted at the batch_size of the event's allocation "
        "(progress and exit events; a start carries none).",
    )
    grad_sqr = FiniteFloatField(
        min_value=0,
        required=False,
        allow_null=True,
        help_text="Squared norm of the gradient (AdaptDL's grad_sqr), with a progress event "
        f"and grad_var: above 0, and grad_var / grad_sqr at most {MAX_NOISE_SCALE:g} (a 400 on "
        "grad_sqr otherwise).",
    )
    grad_var = FiniteFloatField(
        min_value=0,
        required=False,
        allow_null=True,
        help_text="Variance of the mini-batch gradient at the allocation's batch_size.",
    )
    exit_status = serializers.IntegerField(
        min_value=_INT_MIN, max_value=_INT_MAX, required=False, allow_null=True
    )
    reason = serializers.ChoiceField(choices=ExitReason.choices, required=False)
    log_tail = serializers.CharField(
        required=False, allow_blank=True, max_length=20000, trim_whitespace=False
    )
    gpu_uuids = serializers.ListField(
        child=serializers.CharField(max_length=64), required=False, max_length=256
    )

    def validate(self, attrs):
        if attrs["kind"] == JobEventKind.EXITED and not attrs.get("reason"):
            raise serializers.ValidationError({"reason": "An exit needs a reason."})
        status = attrs.get("exit_status")
        if attrs.get("reason") == ExitReason.COMPLETED and status not in (None, 0):
            # the agent says completed only for status 0; taken, a killed job (137) was
            # marked completed with its work undone (a probe, reading the code)
            raise serializers.ValidationError(
                {"exit_status": f"A completed job exits with status 0, not {status}."}
            )
        # The two statistics only mean something together (their ratio is the noise scale).
        if attrs["kind"] == JobEventKind.STARTED and attrs.get("iterations") is not None:
            # a start has counted nothing yet; taken, it raised the job's completed count
            raise serializers.ValidationError(
                {"iterations": "A start carries no count: progress and exit events do."}
            )
        sqr, var = attrs.get("grad_sqr"), attrs.get("grad_var")
        if attrs["kind"] != JobEventKind.PROGRESS and (sqr is not None or var is not None):
            # what the schema says; on a start or an exit they replaced the job's statistics
            field = "grad_sqr" if sqr is not None else "grad_var"
            raise serializers.ValidationError(
                {field: "Gradient statistics come with a progress event."}
            )
        if (sqr is None) != (var is None):
            missing = "grad_var" if var is None else "grad_sqr"
            raise serializers.ValidationError(
                {missing: "grad_sqr and grad_var are reported together."}
            )
        if sqr is not None and ratio_beyond_measurement(sqr, var):
            # The noise scale is var / sqr times the batch (at least 1). Stored, a ratio that
            # overflowed (or that the calibration took past a float) made the job's noise
            # scale infinite, which the scheduler reads as "any batch size is free"
            # (scheduling/core/goodput.py).
            raise serializers.ValidationError(
                {
                    "grad_sqr": "grad_sqr must be above 0 and grad_var / grad_sqr at most "
                    f"{MAX_NOISE_SCALE:g}: the noise scale would be no measurement."
                }
            )
        return attrs


class JobEventBatchSerializer(serializers.Serializer):
    events = JobEventSerializer(many=True, allow_empty=False, max_length=1000)


class JobEventResultSerializer(serializers.Serializer):
    received = serializers.IntegerField()
    new = serializers.IntegerField()
