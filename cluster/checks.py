"""System checks of stored rows that today's input rules refuse (IDs cluster.W0xx).

The API, the forms and the admin refuse these values now, but a database written before the
rules (or by the ORM, a fixture, a raw update) may hold them; Wattflow does not rewrite them
behind the owner's back. ``manage.py check --database default`` names each row, for an admin
to correct: database-tagged, so a plain ``check`` (builds, start-up) makes no query.
"""

import sys
import unicodedata
from functools import cache

from django.core.checks import Tags, Warning, register
from django.core.exceptions import ValidationError
from django.db.models import Q

from cluster import validators as v

# At most this many rows are named per check and field; the rest are counted.
MAX_NAMED = 20


def _budget_suspects():
    return (
        Q(energy_limit_kwh__lt=v.MIN_ENERGY_LIMIT_KWH)
        | Q(energy_limit_kwh__gt=v.MAX_ENERGY_LIMIT_KWH)
        | Q(carbon_limit_kg__lt=v.MIN_CARBON_LIMIT_KG)
        | Q(carbon_limit_kg__gt=v.MAX_CARBON_LIMIT_KG)
        | Q(period_start__lt=v.EARLIEST_BUDGET_START)
        | Q(period_end__gt=v.LATEST_BUDGET_END)
        | Q(warn_fraction__lt=v.MIN_WARN_FRACTION)
        | Q(warn_fraction__gt=1)
    )


def _migrated(alias: str) -> bool:
    """Whether every migration is applied to ``alias``: ``migrate`` runs the database
    checks before it migrates, when the tables and columns these checks read may not exist
    yet (a fresh database, or an upgrade)."""
    from django.db import connections
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections[alias])
    return not executor.migration_plan(executor.loader.graph.leaf_nodes())


def _first(rows) -> tuple[list, int]:
    """The first ``MAX_NAMED`` of ``rows`` (a queryset) by pk, and how many more there are
    (counted only where there are more)."""
    first = list(rows.order_by("pk")[: MAX_NAMED + 1])
    return first[:MAX_NAMED], (rows.count() - MAX_NAMED if len(first) > MAX_NAMED else 0)


def _capped(problems: list, more: int, what: str, check_id: str) -> list:
    if more > 0:
        problems.append(Warning(f"... and {more} more {what}.", id=check_id))
    return problems


def _stored_budgets(alias: str) -> list:
    """Budgets outside today's bounds: a 5e-324 kWh limit is spent by one joule, a
    year-1..9999 period paces its limit over 8,000 years, a warn_fraction of 5e-324 warns at
    once; their usage reads as null where a number is infinite (``telemetry.usage``)."""
    from cluster.models import Budget

    problems = []
    suspects = Budget.objects.using(alias).filter(_budget_suspects()).select_related("team")
    named, more = _first(suspects)
    for budget in named:
        try:
            budget.full_clean(validate_unique=False, validate_constraints=False)
        except ValidationError as exc:
            why = " ".join(f"{f}: {' '.join(m)}" for f, m in sorted(exc.message_dict.items()))
            problems.append(
                Warning(
                    f"Budget #{budget.pk} of team {budget.team.name!r} is stored outside "
                    f"today's rules: {why}",
                    hint="Correct it in the admin or on the budget page; Wattflow does not "
                    "rewrite stored budgets.",
                    id="cluster.W001",
                )
            )
    _capped(problems, more, "budgets like these", "cluster.W001")
    return problems


def _clock_list_bounds(clocks) -> str | None:
    """What a stored clock list breaks of today's bounds (None: nothing): an edit of the
    GPU, in the admin or the API, would be refused for it."""
    from cluster.validators import MAX_SM_CLOCK_MHZ, MAX_SM_CLOCKS

    if len(clocks) > MAX_SM_CLOCKS:
        return f"it lists {len(clocks)} SM clocks, more than {MAX_SM_CLOCKS}"
    out = [c for c in clocks if not 1 <= c <= MAX_SM_CLOCK_MHZ]
    if out:
        return f"SM clocks outside 1..{MAX_SM_CLOCK_MHZ} MHz: {', '.join(map(str, out[:5]))}"
    return None


def _stored_gpu_clocks(alias: str) -> list:
    """GPUs whose maximum SM clock is below a clock of their list (the scheduler may assign
    the listed clock and the agent cap it, a run unlike the one predicted), or whose list
    breaks today's bounds (stored before them; any edit of the GPU would be refused)."""
    from cluster.models import Gpu, sm_clock_conflict

    problems = []
    gpus = (
        Gpu.objects.using(alias)
        .exclude(supported_sm_clocks_mhz=[])
        .select_related("node")
        .order_by("pk")
    )
    conflicts = [
        (gpu, why)
        for gpu in gpus
        if (
            why := _clock_list_bounds(gpu.supported_sm_clocks_mhz)
            or sm_clock_conflict(gpu.max_sm_clock_mhz, gpu.supported_sm_clocks_mhz)
        )
    ]
    for gpu, why in conflicts[:MAX_NAMED]:
        problems.append(
            Warning(
                f"GPU {gpu} (#{gpu.pk}): {why}",
                hint="Restart the node's agent so it registers both again, or correct "
                "the GPU in the admin.",
                id="cluster.W002",
            )
        )
    _capped(problems, len(conflicts) - MAX_NAMED, "GPUs like these", "cluster.W002")
    return problems


def _stored_gpu_top_limits(alias: str) -> list:
    """GPUs stored with a top power limit below today's floor (``MIN_TOP_POWER_LIMIT_W``):
    every draw above 1.5 x it is refused at ingest, so their jobs' teams are not charged,
    and the agent's next registration reporting it is refused."""
    from cluster.models import Gpu
    from cluster.validators import MIN_TOP_POWER_LIMIT_W

    rows = Gpu.objects.using(alias).filter(max_power_limit_w__lt=MIN_TOP_POWER_LIMIT_W)
    first, more = _first(rows.select_related("node"))
    problems = [
        Warning(
            f"GPU {gpu} (#{gpu.pk}): max_power_limit_w {gpu.max_power_limit_w} W is below "
            f"{MIN_TOP_POWER_LIMIT_W} W; its draw above 1.5 x it is refused from the ledger",
            hint="Correct its power limits in the admin (what NVML reports for the board).",
            id="cluster.W004",
        )
        for gpu in first
    ]
    return _capped(problems, more, "GPUs like these", "cluster.W004")


@cache
def _refused_characters() -> str:
    """A PostgreSQL bracket expression of what ``validators.single_line`` refuses: control
    characters (NUL aside: PostgreSQL stores none) and ``validators.refused_in_names``."""
    chars = [
        chr(c)
        for c in range(1, sys.maxunicode + 1)
        if unicodedata.category(chr(c)) == "Cc" or v.refused_in_names(chr(c))
    ]
    return "[" + "".join(chars) + "]"


# (label, model, name field for the message, fields validated by ``single_line``)
NAMED_FIELDS = (
    ("team", "Team", "name", ("name",)),
    ("node", "Node", "name", ("name", "switch_label", "rack_label", "gpu_model")),
    ("GPU", "Gpu", "uuid", ("uuid", "model")),
    ("job", "Job", "name", ("name", "workload", "resembles", "gpu_model")),
)


def _stored_names(alias: str) -> list:
    """Names holding control, invisible or direction control characters: two names look
    alike and differ, or a page and a log show one reordered (U+202E)."""
    from django.apps import apps

    pattern = _refused_characters()
    problems = []
    for label, model_name, shown, fields in NAMED_FIELDS:
        model = apps.get_model("cluster", model_name)
        for field in fields:
            rows = model.objects.using(alias).filter(**{f"{field}__regex": pattern})
            named, more = _first(rows)
            for row in named:
                try:
                    v.single_line(getattr(row, field))
                except ValidationError as exc:
                    problems.append(
                        Warning(
                            f"{label} {getattr(row, shown)!r} (#{row.pk}): {field}: "
                            f"{' '.join(exc.messages)}",
                            hint="Rename it in the admin; Wattflow does not rewrite stored names.",
                            id="cluster.W003",
                        )
                    )
            _capped(problems, more, f"{label} {field}s like these", "cluster.W003")
    return problems


def _stored_lookalikes(alias: str) -> list:
    """Team names, team slugs and node names that read alike (``models.team_name_fold``),
    stored before the rule, and the folded unique indexes their migration therefore left
    out (``cluster.folded_names``): two such teams stand side by side in the reports."""
    from django.db import connections

    from cluster.folded_names import missing_indexes
    from cluster.models import Node, Team, team_name_fold

    problems = []
    for label, model, field, fold in (
        ("team", Team, "name", team_name_fold),
        ("team", Team, "slug", str.casefold),
        ("node", Node, "name", team_name_fold),
    ):
        groups: dict[str, list[str]] = {}
        for value in model.objects.using(alias).order_by("pk").values_list(field, flat=True):
            groups.setdefault(fold(value), []).append(value)
        alike = [names for names in groups.values() if len(names) > 1]
        for names in alike[:MAX_NAMED]:
            problems.append(
                Warning(
                    f"{label} {field}s {' / '.join(repr(n) for n in names)} read alike "
                    "(in case or compatibility form)",
                    hint="Rename all but one in the admin (Wattflow does not rewrite stored "
                    "names), then run `manage.py migrate cluster 0028 && manage.py migrate "
                    "cluster` to add the unique index that refuses new ones.",
                    id="cluster.W005",
                )
            )
        _capped(problems, len(alike) - MAX_NAMED, f"{label} {field}s like these", "cluster.W005")
    missing = missing_indexes(connections[alias])
    if missing and not problems:
        problems.append(
            Warning(
                f"the folded unique indexes {', '.join(missing)} are missing",
                hint="Run `manage.py migrate cluster 0028 && manage.py migrate cluster`.",
                id="cluster.W005",
            )
        )
    return problems


@register(Tags.database)
def check_stored_rows(app_configs, databases=None, **kwargs):
    """Rows stored outside today's input rules, in each migrated database: budgets
    (``cluster.W001``), GPU clocks (``W002``), names (``W003``), GPU top power limits
    (``W004``) and look-alike team and node names (``W005``)."""
    problems = []
    for alias in databases or ():
        if _migrated(alias):
            problems += _stored_budgets(alias) + _stored_gpu_clocks(alias) + _stored_names(alias)
            problems += _stored_gpu_top_limits(alias) + _stored_lookalikes(alias)
    return problems
