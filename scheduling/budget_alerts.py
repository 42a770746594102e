"""A team's leads hear when its budget is spent: on the dashboard and by e-mail.

The scheduling round is where a spent budget takes effect (``round.admit`` honours its
``hard_limit_action``), so the round is also where it is announced: ``record_spent`` turns
each budget of the round's snapshot whose limit is reached into a ``BudgetAlert``, once per
budget, hence once per team and period (the row is unique per budget; later rounds find it and
add nothing). This holds for every action: a ``notify_only`` budget does nothing else, a
``hold_queue`` or ``pause_jobs`` one also stops work, and its leads learn why.

A budget can also be found spent only after its period: the ledger a round reads lags the
GPUs by up to the accounting interval, so a budget that crosses its limit in its last minute
(a short period, a job finishing) shows it after the period's last round. ``record_overruns``
looks back ``OVERRUN_LOOKBACK`` (15 minutes) for budgets that ended with no alert and whose
ledger now shows the limit reached, and records their alert, marked as found after the period
(``BudgetAlert.after_period``): no round can act on it any more, but the leads learn it
(a 2-minute demo period ended at 161.6% with no alert before this).

E-mail goes through Django's mail backend (``EMAIL_BACKEND``) after the round commits, to the
team's leads with an address. An alert whose e-mail failed keeps ``emailed_at`` empty and is
sent again after a later round, while its period runs (an alert found after its period: for
``AFTER_PERIOD_SHOWN`` after it was found, as long as the dashboard shows it).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from cluster.choices import Role
from cluster.models import Budget, BudgetAlert, Membership, Team
from cluster.queries import admin_sees, teams_led_by
from scheduling.core import types as core
from scheduling.core.round import active_budgets
from telemetry.usage import budget_usage

log = logging.getLogger(__name__)

# How far back a round looks for a budget that ended with no alert whose ledger, accounted
# since, shows its limit reached: the accounting interval and the samples' lag are minutes
# (each round re-reads every such budget's ledger while it is in the window).
OVERRUN_LOOKBACK = timedelta(minutes=15)
# How long an alert found after its period stays on the dashboard and is (re)tried by e-mail.
AFTER_PERIOD_SHOWN = timedelta(days=1)


def record(budgets: Iterable[core.Budget], *, now: datetime) -> int:
    """The round's alerts: ``record_spent`` of the snapshot's budgets, then
    ``record_overruns``; returns how many were created. Call it inside the round's
    transaction. The teams of both are locked first, together and in pk order, as an edit
    locks its teams (locked in two passes, an edit moving a budget between a team of each
    could deadlock with the round). Only those teams: a budget of another team found by the
    reads after the lock (committed meanwhile, or moved) is left to the next round, whose
    first lock takes its team in order (locked behind the teams held, it deadlocked with an
    edit that held it and waited on one of them)."""
    budgets = tuple(budgets)
    candidates = _spent_ids(budgets, now=now)
    locked = {
        *Budget.objects.filter(pk__in=candidates).values_list("team_id", flat=True),
        *_ended_without_alert(now).values_list("team_id", flat=True),
    }
    _lock_teams(locked)
    return record_spent(budgets, now=now, locked=locked) + record_overruns(now=now, locked=locked)


def _spent_ids(budgets: tuple[core.Budget, ...], *, now: datetime) -> set[int]:
    return {
        int(b.budget_id)
        for b in active_budgets(budgets, now.timestamp())
        if b.exhausted and b.team is not None
    }


def _ended_without_alert(now: datetime) -> QuerySet[Budget]:
    return Budget.objects.filter(
        period_end__lte=now, period_end__gt=now - OVERRUN_LOOKBACK, alert__isnull=True
    )


def _lock_teams(team_ids: set[int]) -> None:
    list(
        Team.objects.select_for_update(no_key=True)
        .filter(pk__in=team_ids)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def record_spent(
    budgets: Iterable[core.Budget], *, now: datetime, locked: set[int] | None = None
) -> int:
    """Create the alert of each budget in force at ``now`` whose limit is reached and that has
    none yet; returns how many were created. Call it inside the round's transaction.

    The alert follows the budget as stored, read under the locks an edit takes (its team's,
    then its row; ``_lock_budgets``): an edit committed since the round's snapshot gives the
    alert its action and limits (none, if the snapshot's use no longer reaches them; none
    either where its team or period changed: the next round reads its ledger anew), and an
    edit that comes later waits for the round's commit, then finds the alert and keeps it
    true (``cluster.services.save_budget``). Without the locks, an edit committed between
    this read and the round's commit found no alert to follow, and the round's kept the old
    action."""
    spent = {
        int(b.budget_id): b
        for b in active_budgets(tuple(budgets), now.timestamp())
        if b.exhausted and b.team is not None
    }
    if not spent:
        return 0
    known = set(BudgetAlert.objects.filter(budget_id__in=spent).values_list("budget_id", flat=True))
    alerts = []
    for row in _lock_budgets(Budget.objects.filter(pk__in=set(spent) - known), locked=locked):
        read = spent[row.pk]
        if (
            row.team.slug != read.team
            or row.period_start.timestamp() != read.period_start_s
            or row.period_end.timestamp() != read.period_end_s
        ):
            continue  # its ledger is another: the next round reads it
        stored = _as_stored(read, row)
        if not stored.exhausted:
            continue  # a limit raised since the snapshot: not spent as it stands
        alerts.append(_alert(row, now, energy_j=stored.energy_used_j, co2_g=stored.co2_used_g))
    # The round lock keeps rounds apart; the unique budget column holds regardless.
    BudgetAlert.objects.bulk_create(alerts, ignore_conflicts=True)
    return len(alerts)


def _alert(row: Budget, now: datetime, *, energy_j: float, co2_g: float) -> BudgetAlert:
    """The alert of budget ``row`` at ``now``: its stored action and limits, the use given."""
    return BudgetAlert(
        budget=row,
        team_id=row.team_id,
        at=now,
        action=row.hard_limit_action,
        energy_used_kwh=energy_j / core.J_PER_KWH,
        energy_limit_kwh=row.energy_limit_kwh,
        carbon_used_kg=co2_g / core.G_PER_KG,
        carbon_limit_kg=row.carbon_limit_kg,
    )


def _as_stored(read: core.Budget, row: Budget) -> core.Budget:
    """The snapshot's budget with the limits and action stored now (its use as read)."""
    return replace(
        read,
        energy_limit_j=None
        if row.energy_limit_kwh is None
        else core.decimal_product(row.energy_limit_kwh, core.J_PER_KWH),
        co2_limit_g=None
        if row.carbon_limit_kg is None
        else core.decimal_product(row.carbon_limit_kg, core.G_PER_KG),
        hard_limit_action=core.HardLimitAction(row.hard_limit_action),
    )


def _lock_budgets(budgets: QuerySet[Budget], *, locked: set[int] | None = None) -> list[Budget]:
    """The budgets of ``budgets`` as stored, locked until the round commits, in pk order.

    Locked as an edit locks them (``cluster.services.save_budget``: the teams in pk order,
    then the budget's row), so that a round and an edit queue instead of deadlocking (the
    alert's insert checks its team's row, which an edit holding the team would block). No
    key update locks: jobs and ledger rows naming the team or budget are still inserted
    meanwhile. A budget moved to another team between the two reads is left out (its
    team's round announces it)."""
    team_ids = set(budgets.values_list("team_id", flat=True))
    if locked is not None:
        team_ids &= locked  # (``record``'s teams, held already: no team locked behind them)
    if not team_ids:
        return []
    if locked is None:
        _lock_teams(team_ids)
    rows = (
        budgets.filter(team_id__in=team_ids)
        .select_for_update(no_key=True, of=("self",))
        .select_related("team")
    )
    return [row for row in rows.order_by("pk") if row.team_id in team_ids]


def record_overruns(*, now: datetime, locked: set[int] | None = None) -> int:
    """Create the alert of each budget that ended within ``OVERRUN_LOOKBACK`` before ``now``
    with none, whose ledger shows a limit reached (accounted after its last round); returns
    how many were created. Call it inside the round's transaction. Read under the locks an
    edit takes, as ``record_spent`` reads (an edit waits for the round's commit, then keeps
    the alert true)."""
    alerts = []
    for row in _lock_budgets(_ended_without_alert(now), locked=locked):
        used = budget_usage(row)
        if not any(limit.over_hard for limit in used.limits):
            continue
        log.warning(
            "budget %s of team %s: found over its limit after its period ended (%s)",
            row.pk,
            row.team_id,
            ", ".join(f"{limit.kind} {limit.percent:.1f}%" for limit in used.limits),
        )
        alerts.append(_alert(row, now, energy_j=used.energy_j, co2_g=used.co2_g))
    BudgetAlert.objects.bulk_create(alerts, ignore_conflicts=True)
    return len(alerts)


def _still_shown(now: datetime) -> Q:
    """Alerts whose budget period runs, and those found after their period, for a day."""
    return Q(budget__period_end__gt=now) | Q(
        at__gte=F("budget__period_end"), at__gt=now - AFTER_PERIOD_SHOWN
    )


def lead_addresses(team_id: int) -> list[str]:
    """E-mail addresses of the team's active leads, sorted."""
    return sorted(
        {
            address
            for address in Membership.objects.filter(
                team_id=team_id, role=Role.LEAD, user__is_active=True
            ).values_list("user__email", flat=True)
            if address
        }
    )


def unsent(*, now: datetime) -> QuerySet[BudgetAlert]:
    """Alerts not e-mailed yet that are still shown (``_still_shown``)."""
    return BudgetAlert.objects.filter(_still_shown(now), emailed_at__isnull=True)


def send_pending(*, now: datetime | None = None) -> int:
    """E-mail every alert of ``unsent``; returns how many were sent. A team with no lead
    address is recorded as sent to nobody (and logged)."""
    now = now or timezone.now()
    sent = 0
    for alert in unsent(now=now).select_related("team", "budget").order_by("pk"):
        to = lead_addresses(alert.team_id)
        if not to:
            log.warning("budget alert %s: team %s has no lead with an e-mail", alert.pk, alert.team)
        else:
            try:
                send_mail(_subject(alert), _body(alert), settings.DEFAULT_FROM_EMAIL, to)
            except Exception:  # a mail server down must not stop the others; retried later
                log.exception("budget alert %s: e-mail to %s failed", alert.pk, ", ".join(to))
                continue
            sent += 1
        BudgetAlert.objects.filter(pk=alert.pk).update(emailed_to=to, emailed_at=timezone.now())
    return sent


def visible_alerts(user, *, now: datetime) -> QuerySet[BudgetAlert]:
    """Alerts still shown (of budgets whose period runs, or found after their period within
    a day) that ``user`` may see: an admin who may view alerts every team's, a lead those of
    the teams they lead, anyone else none."""
    alerts = BudgetAlert.objects.filter(_still_shown(now)).select_related("team", "budget")
    if not (user and user.is_authenticated):
        return alerts.none()
    if admin_sees(user, "cluster.view_budgetalert"):
        return alerts
    return alerts.filter(team__in=teams_led_by(user))


def amount(value: float) -> str:
    """Three significant digits, no exponent, no trailing zeros: 0.0334, 48.7, 1,234 (one
    decimal printed a 0.033 kg budget's 0.033 kg spent as 0.0); past 10^15, as ``:g``
    does (a limit stored before limits had bounds)."""
    if not math.isfinite(value) or value == 0 or abs(value) >= 1e15:
        return f"{value:g}"
    decimals = min(max(2 - math.floor(math.log10(abs(value))), 0), 9)
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def describe(alert: BudgetAlert) -> str:
    """What was spent against which limit, in words."""
    parts = []
    if alert.energy_limit_kwh is not None:
        used, limit = amount(alert.energy_used_kwh), amount(alert.energy_limit_kwh)
        parts.append(f"energy {used} of {limit} kWh")
    if alert.carbon_limit_kg is not None:
        used, limit = amount(alert.carbon_used_kg), amount(alert.carbon_limit_kg)
        parts.append(f"carbon {used} of {limit} kg CO2e")
    return ", ".join(parts)


def headline(alert: BudgetAlert) -> str:
    """What happened, in a few words (the dashboard's and the e-mail subject's)."""
    if alert.after_period:
        return "budget found over its limit after its period ended"
    return "budget used up"


def _subject(alert: BudgetAlert) -> str:
    return f"[Wattflow] {alert.team.name}: {headline(alert)} ({describe(alert)})"


def _body(alert: BudgetAlert) -> str:
    budget = alert.budget
    found = (
        "was found over its limit, once its last minutes were accounted, at"
        if alert.after_period
        else "reached its limit at"
    )
    return (
        f"The budget of team {alert.team.name} for {budget.period_start:%Y-%m-%d %H:%M} .. "
        f"{budget.period_end:%Y-%m-%d %H:%M} UTC {found} "
        f"{alert.at:%Y-%m-%d %H:%M} UTC: {describe(alert)}.\n\n"
        f"{alert.consequence}\n\n"
        "You receive this as a lead of the team. Wattflow sends it once per budget period, "
        "and again if the budget's action at its limit is changed while the period runs.\n"
    )
