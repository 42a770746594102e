"""Django admin for every cluster model. State changes of jobs still go through services."""

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ObjectDoesNotExist
from django.db import IntegrityError, transaction
from django.db import models as db_models
from django.forms.boundfield import BoundField
from django.http import Http404
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from cluster import folded_names, services
from cluster.admin_readonly import BoundedCountPaginator, ReadOnlyAdmin, RecordAdmin
from cluster.choices import AuditAction, JobState
from cluster.models import (
    AuditEntry,
    Budget,
    BudgetAlert,
    Gpu,
    Job,
    JobAllocation,
    Membership,
    Node,
    Team,
)
from cluster.workloads import catalog_name, gpu_model_spelling, workload_errors
from config.admin_site import ReadableAutocomplete
from telemetry.agent.backends import gpu_model_key

LATEST_SAMPLES = 10


def _plain(value):
    """A form value as the audit log stores it (JSON): an object by its key, a time as text."""
    if isinstance(value, db_models.Model):
        return value.pk
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def _audit_form(request, form, *, created: bool, deleted: bool = False) -> None:
    """One audit entry for what an admin form (a page or an inline row) changed: the fields
    it changed, before and after; a new object with what it was given; a deleted row with
    what it held."""
    obj = form.instance
    if deleted:
        action, names = AuditAction.DELETED, [n for n in form.fields if n != "DELETE"]
    else:
        action = AuditAction.CREATED if created else AuditAction.UPDATED
        names = list(form.changed_data)
        if not names and not created:
            return
    names = [n for n in names if n in form.fields]
    before = None if created else {n: _plain(form.initial.get(n)) for n in names}
    after = None if deleted else {n: _plain(form.cleaned_data.get(n)) for n in names}
    team = obj if isinstance(obj, Team) else getattr(obj, "team", None)
    services.record_audit(
        actor=request.user,
        action=action,
        object_type=obj._meta.model_name,
        object_id=obj.pk,
        team=team if isinstance(team, Team) else None,
        before=before,
        after=after,
    )


class _AuditedEdits:
    """Every change made on the page and in its inline rows lands in the audit log (a
    team's memberships: who was made its lead; a node's status and labels; a GPU's limits):
    they were saved without a trace."""

    def save_model(self, request, obj, form, change):
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            _audit_form(request, form, created=not change)

    def save_formset(self, request, form, formset, change):
        with transaction.atomic():
            rows = [r for r in formset.forms if getattr(r, "cleaned_data", None)]
            deleted = [r for r in rows if formset.can_delete and formset._should_delete_form(r)]
            changed = [
                (r, r.instance.pk is None) for r in rows if r not in deleted and r.has_changed()
            ]
            for row in deleted:  # (recorded while the row still has its key)
                _audit_form(request, row, created=False, deleted=True)
            super().save_formset(request, form, formset, change)
            for row, created in changed:
                _audit_form(request, row, created=created)


class RefusesLookalikeRaces:
    """A name stored by someone else while this page saved (two admins adding ``Vision`` and
    ``vision`` at once: the form's look-alike check looked before either row was there) is
    refused as the form refuses any look-alike, not a 500. The database's folded-name index
    (``cluster.folded_names``) made this page's insert wait for the other row's commit and
    then refused it; the page's transaction is rolled back whole (inline rows and audit
    entries too) and the form is validated again, now seeing the other row."""

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except IntegrityError as exc:
            if folded_names.field_of_error(exc, self.model._meta.db_table) is None:
                raise
        return super().changeform_view(request, object_id, form_url, extra_context)


class EditedUnderLock:
    """The change form's POST reads its object under lock (``lock``: the object read again
    under its row lock, raising DoesNotExist when gone), held to the save's commit (Django
    runs ``changeform_view`` in one transaction), as the API's edits do: the page saves the
    whole row, and one read before a retire committed wrote ``retired_at`` back to empty,
    or an edit beside a delete inserted the object again (fifth live probe).
    What the form posts is checked against the locked row by ``RefusesStaleEdits``."""

    lock: Callable

    def get_object(self, request, object_id, from_field=None):
        obj = super().get_object(request, object_id, from_field)
        if (
            obj is None
            or request.method != "POST"
            or not transaction.get_connection().in_atomic_block
        ):
            return obj
        try:
            return self.lock(obj)
        except ObjectDoesNotExist:
            return None  # deleted meanwhile: the admin's "does not exist" page


def _shown(value) -> str:
    """A stored value as a refusal names it."""
    return "empty" if value in (None, "") else str(value)


class _SeenBoundField(BoundField):
    """A field whose hidden ``initial-`` input, on a page shown again after a refusal,
    keeps what the page first showed. Django keeps it only for a field of one input; a date
    and time's two were rendered with what the admin had typed, so the page posted again
    took that for unchanged and dropped it without a word."""

    def as_widget(self, widget=None, attrs=None, only_initial=False):
        hidden = widget or self.field.hidden_widget()
        if not only_initial or not self.form.is_bound:
            return super().as_widget(widget, attrs, only_initial)
        attrs = self.build_widget_attrs(attrs or {}, hidden)
        if self.auto_id and "id" not in hidden.attrs:
            attrs.setdefault("id", self.html_initial_id)
        return hidden.render(
            name=self.html_initial_name,
            value=self.form._widget_data_value(hidden, self.html_initial_name),
            attrs=attrs,
            renderer=self.form.renderer,
        )


class _SeenValuesForm(forms.BaseForm):
    """A change page's form that carries the values it showed (each field's hidden
    ``initial-`` input: Django's ``show_hidden_initial``), so what the admin changed is what
    differs from them, not from the row as stored at the save. Under the page's row lock
    (``EditedUnderLock``) ``clean`` refuses a field the admin changed that another writer
    (the API, an agent, a round, another admin) changed too since the page was rendered,
    naming it; the row stays as it is. A field the admin left as shown is not written
    (``_post_clean``): the other writer's change to it stays. The page posted every field
    as it showed it, and the save wrote each back over whatever was stored meanwhile.
    A post without a field's shown value (a script's) compares that field with the row
    as stored, as before."""

    bound_field_class = _SeenBoundField

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk is None:
            return  # (a new object, or an inline's new row)
        for name, field in self.fields.items():
            if field.disabled or field.widget.is_hidden:
                continue
            # (set either way: Django shows it for a field whose default is a callable)
            field.show_hidden_initial = not (
                self.is_bound
                and field.hidden_widget().value_omitted_from_data(
                    self.data, self.files, self.add_initial_prefix(name)
                )
            )

    def _changed_meanwhile(self) -> list[str]:
        """The fields the admin changed whose stored value is no longer what the page
        showed, nor what the admin chose."""
        stale = []
        for name in self.changed_data:
            field, bound = self.fields[name], self[name]
            if not field.show_hidden_initial:
                continue
            shown = self._widget_data_value(field.hidden_widget(), bound.html_initial_name)
            # ``bound.initial``: the row as read under its lock (the form's instance)
            if field.has_changed(bound.initial, shown) and field.has_changed(
                bound.initial, bound.data
            ):
                stale.append(name)
        return stale

    def clean(self):
        cleaned = super().clean()
        if self.instance.pk is None:
            return cleaned
        stale = self._changed_meanwhile()
        for name in stale:
            self.add_error(
                name,
                "Changed by someone else since this page was opened (now: "
                f"{_shown(getattr(self.instance, name, None))}).",
            )
        if stale:
            labels = ", ".join(str(self.fields[n].label or n) for n in stale)
            raise forms.ValidationError(
                f"Someone changed {labels} since you opened this page; nothing was saved. "
                "Reload the page to see the change, then edit again.",
                code="stale",
            )
        return cleaned

    def _post_clean(self):
        # A field left as the page showed it keeps the row's value (the form's instance is
        # the locked row): Django puts every cleaned value on the instance here.
        if self.instance.pk is not None:
            for name in [n for n in self.cleaned_data if n not in self.changed_data]:
                if self.fields[name].show_hidden_initial:
                    del self.cleaned_data[name]
        super()._post_clean()


class RefusesStaleEdits:
    """The change page's form carries what it showed and refuses a stale edit
    (``_SeenValuesForm``); with ``EditedUnderLock`` before it, checked under the row's
    lock."""

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        if obj is None:
            return form
        return type(form)(form.__name__, (_SeenValuesForm, form), {})


class MembershipInlineForm(_SeenValuesForm, forms.ModelForm):
    """A membership row of its team's page: refuses a stale edit as the membership's own
    page does, and a row left as shown keeps a change made meanwhile (a lead promoted on the
    membership's page was demoted again by a team page opened before)."""


class _RowsReadUnderLock(forms.BaseInlineFormSet):
    """A page's inline rows read under their locks, all of the object's rows (which ones
    the page changed is known only once they are read), in id order, after ``lock_first``:
    each row's check of a stale edit (``_SeenValuesForm``) compares what the page showed
    with the row as it is. Taken before the rows are read: the formset reads them when its
    forms are built."""

    def lock_first(self) -> None:
        """Rows to lock before the inline's (by default none: the page's ``get_object``
        has locked its object)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if (
            self.is_bound
            and self.instance.pk is not None
            and transaction.get_connection().in_atomic_block
        ):
            self.lock_first()
            list(
                self.model.objects.select_for_update(no_key=True)
                .filter(**{self.fk.name: self.instance})
                .order_by("pk")
                .values_list("pk", flat=True)
            )


class MembershipInlineFormSet(_RowsReadUnderLock):
    """The team page's membership rows, locked after the team's (``TeamAdmin.get_object``).
    (A membership's own page locks only its row; it waits here, or this on it.)"""


class MembershipInline(ReadableAutocomplete, admin.TabularInline):
    model = Membership
    form = MembershipInlineForm
    formset = MembershipInlineFormSet
    extra = 1
    autocomplete_fields = ["user"]


class _AuditedDelete:
    """Deleting goes through the audited service (``delete_service``), which refuses an
    object with history (``history``; the service raises ``refused``): such an object
    offers no delete, and the bulk delete reports each refusal."""

    delete_service: Callable
    history: Callable
    refused: type[Exception] = services.GpuInUse

    def has_delete_permission(self, request, obj=None):
        if obj is not None and self.history(obj):
            return False
        return super().has_delete_permission(request, obj)

    def each(self, request, objects, service: Callable) -> None:
        """``service`` on each object, a refusal reported on the page."""
        for obj in objects:
            try:
                service(obj, actor=request.user)
            except self.refused as exc:
                self.message_user(request, str(exc), level=messages.ERROR)

    def delete_model(self, request, obj):
        self.each(request, [obj], self.delete_service)

    def delete_queryset(self, request, queryset):
        self.each(request, queryset, self.delete_service)


@admin.register(Team)
class TeamAdmin(
    RefusesLookalikeRaces,
    EditedUnderLock,
    RefusesStaleEdits,
    _AuditedEdits,
    _AuditedDelete,
    admin.ModelAdmin,
):
    lock = staticmethod(services.lock_team)  # (as its delete and the API's edit lock it)
    # a team whose jobs or energy records name it is not deleted
    delete_service = staticmethod(services.delete_team)
    history = staticmethod(services.team_history)
    refused = services.TeamInUse

    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(EditedUnderLock, RefusesStaleEdits, _AuditedEdits, admin.ModelAdmin):
    lock = staticmethod(lambda m: Membership.objects.select_for_update().get(pk=m.pk))
    list_display = ["user", "team", "role"]
    list_filter = ["role", "team"]
    search_fields = ["user__username", "team__name"]
    autocomplete_fields = ["user", "team"]


class _GpuModelKeyForm(forms.ModelForm):
    """A GPU's model stored as the agents' registration and the admin GPU API store it: the
    model key in the catalog's (or the cluster's) spelling. Typed here, "a100" or "NVIDIA
    A100-SXM4-40GB" was stored as typed, a GPU model of its own beside the catalog's A100
    (estimated from the nearest catalog GPU, never given a job that asked for A100)."""

    def clean_model(self):
        model = self.cleaned_data.get("model")
        return gpu_model_spelling(gpu_model_key(model)) if model else model


class GpuInlineForm(_SeenValuesForm, _GpuModelKeyForm):
    """A GPU row of its node's page. A GPU with history keeps its model, as on its own page
    (``GpuAdmin.get_readonly_fields``) and over the API: the inline changed it (a probe set a
    GPU with ledger rows from A100 to H100), moving its allocations, ledger and learned
    models to another model's predictions. A row refuses a stale edit as the GPU's own page
    does (``_SeenValuesForm``; the rows are read under lock, ``GpuInlineFormSet``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None and services.gpu_history(self.instance):
            self.fields["model"].disabled = True


class GpuInlineFormSet(_RowsReadUnderLock):
    """The node page's GPU rows. Each renamed GPU's check (``Gpu.clean``) takes its row lock,
    and each changed GPU's UPDATE its row lock, in the page's order (by index); a round
    placing a job takes its GPUs' locks in id order (``services.set_allocation``), so a page
    changing two GPUs whose ids run against their indexes (a replaced board) could wait on a
    round that waited on it (the database then aborts one of them). The rows are locked
    here first, together, in id order (locking only the renamed ones left two changed power
    limits to lock in the page's order), and read under those locks: each row's check of a
    stale edit (``GpuInlineForm``) compares what the page showed with the row as it is.
    All of the node's rows: which ones the page changed is known only once they are read.
    The node's row is locked before them (``NodeAdmin.get_object`` has, at the post): the
    page saves it (``save_model``) after these checks, and a GPU edit or a retire
    (``services.lock_gpu``) and a registration lock the node first, then the GPU; locked at
    the save, a page and an edit of one of its GPUs waited on each other (the database
    aborted one)."""

    def lock_first(self) -> None:
        list(
            Node.objects.select_for_update(no_key=True)
            .filter(pk=self.instance.pk)
            .values_list("pk", flat=True)
        )


class GpuInline(admin.TabularInline):
    model = Gpu
    form = GpuInlineForm
    formset = GpuInlineFormSet
    extra = 0
    fields = [
        "index", "uuid", "model", "memory_mb", "power_limit_w", "sm_clock_mhz", "reported_at",
    ]  # fmt: skip
    readonly_fields = ["reported_at", "retired_at", "missing_since"]
    fields = [*fields, "retired_at", "missing_since"]
    # Deleting a GPU would delete its history with it: the GPU's own page deletes one that
    # has none, or retires it, through the audited services.
    can_delete = False

    def has_add_permission(self, request, obj=None):
        # A row here has no power limits, which a GPU must have: "Add another GPU" was a
        # 500 (a null power limit) on every save. Agents register GPUs; an admin adds one
        # on the GPU's own page, which has every field.
        return False


@admin.register(Node)
class NodeAdmin(
    RefusesLookalikeRaces,
    EditedUnderLock,
    RefusesStaleEdits,
    _AuditedEdits,
    _AuditedDelete,
    admin.ModelAdmin,
):
    # (FOR NO KEY UPDATE, as its GPU rows' check takes it: ``GpuInlineFormSet``; taken
    # first, before its GPUs', as a GPU edit, a retire and a registration take them)
    lock = staticmethod(lambda node: Node.objects.select_for_update(no_key=True).get(pk=node.pk))
    delete_service = staticmethod(services.delete_node)
    history = staticmethod(services.node_history)

    list_display = [
        "name",
        "switch_label",
        "rack_label",
        "gpu_model",
        "status",
        "last_heartbeat_at",
        "agent_spooled",
        "agent_quarantined",
    ]
    list_filter = ["status", "switch_label", "gpu_model"]
    search_fields = ["name", "switch_label", "rack_label"]
    readonly_fields = [
        "last_heartbeat_at",
        "agent_token_issued_at",
        "agent_spooled",
        "agent_quarantined",
        "agent_quarantine_reason",
        "agent_clock_skew_s",
    ]
    inlines = [GpuInline]
    actions = ["issue_agent_tokens"]

    # Every action here asks for "change": Django offers an action without
    # ``allowed_permissions`` to whoever may view the list, so a view-only staff user could
    # issue tokens (each agent locked out, the new tokens shown to them), retire GPUs and
    # cancel any team's jobs.
    @admin.action(description="Issue new agent tokens (shown once)", permissions=["change"])
    def issue_agent_tokens(self, request, queryset):
        now = timezone.now()
        for node in queryset:
            token = services.issue_agent_token(node, actor=request.user, at=now)
            self.message_user(request, f"{node.name}: {token}", level=messages.WARNING)


@admin.register(Gpu)
class GpuAdmin(EditedUnderLock, RefusesStaleEdits, _AuditedEdits, _AuditedDelete, admin.ModelAdmin):
    lock = staticmethod(services.lock_gpu)  # its node's row first, as a retire locks them
    form = _GpuModelKeyForm  # (the admin builds its form on it, with the GPU's fields)
    delete_service = staticmethod(services.delete_gpu)
    history = staticmethod(services.gpu_history)
    actions = ["retire"]
    list_display = [
        "__str__",
        "uuid",
        "model",
        "memory_mb",
        "min_power_limit_w",
        "max_power_limit_w",
        "power_limit_w",
        "sm_clock_mhz",
        "max_sm_clock_mhz",
        "reported_at",
        "retired_at",
        "missing_since",
    ]
    list_filter = ["model", "node__switch_label", ("retired_at", admin.EmptyFieldListFilter)]
    search_fields = ["uuid", "node__name"]
    list_select_related = ["node"]
    # Written by the agent (its registration: maximum clock, the site's power cap it read;
    # its newest sample), and the samples themselves. (A cap typed here would not be the
    # one the agent holds its limits to: rounds would plan above or below what it sets.)
    readonly_fields = [
        "max_sm_clock_mhz", "site_power_limit_w", "reported_at", "retired_at", "node_since",
        "missing_since", "latest_samples",
    ]  # fmt: skip

    def get_readonly_fields(self, request, obj=None):
        # A GPU with history keeps its model (as registration and the API refuse a change):
        # its allocations, ledger and learned models would move to another model's.
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and services.gpu_history(obj):
            fields.append("model")
        return fields

    @admin.action(
        description="Retire (gone from its node; keeps its history)", permissions=["change"]
    )
    def retire(self, request, queryset):
        self.each(request, queryset, services.retire_gpu)

    @admin.display(description=f"latest {LATEST_SAMPLES} samples")
    def latest_samples(self, gpu: Gpu) -> str:
        """The GPU's newest telemetry samples (they have no admin page of their own: Django's
        admin refuses their composite primary key, see ``telemetry/admin.py``)."""
        if gpu.pk is None:
            return "-"
        samples = gpu.samples.order_by("-ts")[:LATEST_SAMPLES]
        if not samples:
            return "none yet"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td><td>{}</td></tr>",
            (
                (s.ts.isoformat(timespec="seconds"), s.power_w, _or_dash(s.energy_j),
                 _or_dash(s.util_pct), _or_dash(s.mem_used_mib), _or_dash(s.temp_c),
                 _or_dash(s.sm_clock_mhz), _or_dash(s.power_limit_w))
                for s in samples
            ),
        )  # fmt: skip
        return format_html(
            "<table><thead><tr><th>time (UTC)</th><th>power (W)</th><th>energy counter (J)</th>"
            "<th>util (%)</th><th>memory (MiB)</th><th>temp (°C)</th><th>SM clock (MHz)</th>"
            "<th>power limit (W)</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )


def _or_dash(value) -> object:
    return "-" if value is None else value


class JobAllocationInline(admin.TabularInline):
    model = JobAllocation
    extra = 0
    fields = ["started_at", "ended_at", "batch_size", "sm_clock_mhz", "power_limit_w"]
    readonly_fields = fields
    can_delete = False
    show_change_link = True


class JobAdminForm(forms.ModelForm):
    """A queued job's workload changed in the admin passes the submit's workload check: a
    near miss of a catalog workload without a hint is refused (``workload_errors``)."""

    class Meta:
        model = Job
        fields = "__all__"  # noqa: DJ007 - the admin's own field choice applies on top

    # A workload or GPU model typed here is read as a submit reads it (the API, the job
    # form): "a100" was stored as typed, a model no GPU is registered as (the job waited for
    # good), and a catalog workload in fullwidth was refused as a near miss of itself.
    def clean_workload(self):
        value = self.cleaned_data["workload"]
        return catalog_name(value) if "workload" in self.changed_data and value else value

    def clean_gpu_model(self):
        value = self.cleaned_data["gpu_model"]
        if "gpu_model" not in self.changed_data or not value:
            return value
        return gpu_model_spelling(gpu_model_key(value))

    def clean(self):
        cleaned = super().clean()
        if "workload" in self.changed_data and cleaned.get("workload"):

            def value(name):
                # A hint the admin shows read-only, or left as shown, is the stored one: a
                # field left as shown keeps the row's value (``_SeenValuesForm``), which
                # another admin may have changed since the page was opened.
                if name in cleaned and name in self.changed_data:
                    return cleaned[name]
                return getattr(self.instance, name)

            errors = workload_errors(
                cleaned["workload"],
                resembles=value("resembles") or "",
                param_count=value("param_count"),
            )
            for field, message in errors.items():
                self.add_error(field if field in self.fields else "workload", message)
        return cleaned


@admin.register(Job)
class JobAdmin(EditedUnderLock, RefusesStaleEdits, admin.ModelAdmin):
    lock = staticmethod(lambda job: Job.objects.select_for_update(no_key=True).get(pk=job.pk))
    form = JobAdminForm
    list_display = [
        "id",
        "name",
        "team",
        "owner",
        "workload",
        "state",
        "min_gpus",
        "max_gpus",
        "submitted_at",
        "finished_at",
    ]
    list_filter = ["state", "team", "workload"]
    search_fields = ["name", "owner__username", "workload"]
    date_hierarchy = "submitted_at"
    list_select_related = ["team", "owner"]
    # Jobs are never deleted: the list counts what its filters select up to a bound, and
    # not the whole table a second time (``RecordAdmin``).
    paginator = BoundedCountPaginator
    show_full_result_count = False
    autocomplete_fields = ["owner", "team"]
    # The state machine is enforced by cluster.services; the admin shows but never edits state.
    readonly_fields = [
        "state",
        "completed_iterations",
        "started_at",
        "finished_at",
        "pending_reason_code",
        "pending_reason",
        "pending_until",
        "pending_round",
        "exit_status",
        "log_tail",
        # What the job reported about its gradients, and the noise scale the scheduler uses.
        "grad_sqr",
        "grad_var",
        "grad_batch_size",
        "grad_stats_at",
        "noise_scale",
    ]
    inlines = [JobAllocationInline]
    actions = ["cancel_jobs"]
    # What a job asked for is fixed once it is submitted under its owner and team (moving it
    # to a team its owner is not in hid it from its owner), and once it has started (a
    # running job edited to 2 total iterations was completed at 905 of 2 by the next round,
    # found by a live probe). Only its name and priority stay editable.
    _SPEC = [
        "owner",
        "team",
        "workload",
        "resembles",
        "param_count",
        "gpu_model",
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
        "submitted_at",
    ]

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is None:
            return fields
        # A job that has run is fixed even when queued again (a lost node, a paused job
        # handed back): it keeps its completed iterations.
        started = obj.started_at is not None or obj.completed_iterations > 0
        if obj.state != JobState.QUEUED or started:
            return fields + [f for f in self._SPEC if f not in fields]
        return fields + ["owner", "team"]

    def save_model(self, request, obj, form, change):
        if not change:
            return super().save_model(request, obj, form, change)
        # Only the fields the form changed: a whole save wrote back a state or a count of
        # completed iterations that a round changed while the page was open.
        changed = [f for f in form.changed_data if f in {c.name for c in Job._meta.fields}]
        if changed:
            obj.save(update_fields=[*changed, "updated_at"])

    @admin.action(description="Cancel selected jobs", permissions=["change"])
    def cancel_jobs(self, request, queryset):
        now = timezone.now()
        cancelled, refused = 0, []
        for job in queryset:
            try:
                services.cancel_job(job, at=now)
                cancelled += 1
            except services.InvalidTransition:
                refused.append(f"#{job.pk} ({job.state})")
        self.message_user(request, f"Cancelled {cancelled} job(s).", level=messages.SUCCESS)
        if refused:
            self.message_user(
                request, f"Already finished: {', '.join(refused)}.", level=messages.WARNING
            )


@admin.register(JobAllocation)
class JobAllocationAdmin(ReadOnlyAdmin):
    # The scheduler's record of which GPUs a job held and when, by which the ledger charges:
    # written by cluster.services only (an editable ended_at or GPU set corrupted it).
    list_display = [
        "id",
        "job",
        "batch_size",
        "sm_clock_mhz",
        "power_limit_w",
        "started_at",
        "ended_at",
    ]
    list_filter = ["ended_at"]
    search_fields = ["job__name"]
    list_select_related = ["job"]
    # Newest first, on the primary key: the model's order (job, start) is the jobs' order
    # (-submitted_at), a join and sort of every allocation.
    ordering = ["-id"]


@admin.register(Budget)
class BudgetAdmin(EditedUnderLock, RefusesStaleEdits, admin.ModelAdmin):
    lock = staticmethod(services.lock_budget)  # its team's row first, as an edit locks them
    list_display = [
        "team",
        "period_start",
        "period_end",
        "energy_limit_kwh",
        "carbon_limit_kg",
        "warn_fraction",
        "hard_limit_action",
    ]
    list_filter = ["team", "hard_limit_action"]
    date_hierarchy = "period_start"

    # Budget changes made here go through the same audited services as the API and pages.
    def save_model(self, request, obj, form, change):
        changes = None
        # Only what the form changed, onto the row as stored (the form refused a change to
        # a field someone changed since the page was opened: ``RefusesStaleEdits``).
        if change:
            columns = {f.name for f in Budget._meta.concrete_fields}
            changes = {f: getattr(obj, f) for f in form.changed_data if f in columns}
        try:
            services.save_budget(obj, actor=request.user, changes=changes)
        except services.BudgetGone:
            raise Http404("This budget was deleted while you edited it.") from None

    def delete_model(self, request, obj):
        try:
            services.delete_budget(obj, actor=request.user)
        except services.BudgetGone:
            pass  # another writer deleted it first (and audited that)

    def delete_queryset(self, request, queryset):
        # The list page's bulk delete: one entry per budget, like deleting them one by one.
        for budget in queryset.select_related("team"):
            self.delete_model(request, budget)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """Read-only: the log is written by ``cluster.services.record_audit`` alone."""

    list_display = ["at", "actor_username", "action", "object_type", "object_id", "team"]
    list_filter = ["action", "object_type", "team"]
    # The team may be null, so the admin does not join it by itself: a query a row.
    list_select_related = ["team"]
    search_fields = ["actor_username", "object_id"]
    date_hierarchy = "at"


@admin.register(BudgetAlert)
class BudgetAlertAdmin(RecordAdmin):
    """Read-only: written by the scheduling round (``scheduling.budget_alerts``)."""

    list_display = ["at", "team", "budget", "action", "emailed_at"]
    list_filter = ["action", "team"]
    date_hierarchy = "at"
    list_select_related = ["team", "budget__team"]
