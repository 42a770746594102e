"""Template helpers: the user's role for the navigation, and unit formatting."""

from __future__ import annotations

from django import template

from cluster.queries import admin_sees, teams_led_by, teams_of
from frontend import labels
from frontend.admin_views import NODES_PERMISSION, REPORTS_PERMISSION

register = template.Library()


@register.simple_tag
def user_role(user) -> dict:
    """What the navigation may offer: ``admin``, ``lead`` (of some team), ``member``; the
    reports and nodes pages only to staff who may read them (``admin_sees``: a staff user
    granted nothing was offered two links that answer 403)."""
    if not (user and user.is_authenticated):
        return {
            "name": "anonymous", "admin": False, "lead": False, "teams": [],
            "reports": False, "nodes": False,
        }  # fmt: skip
    admin = bool(user.is_staff)
    lead = teams_led_by(user).exists()
    teams = list(teams_of(user).values_list("name", flat=True))
    name = "admin" if admin else ("lead" if lead else "member")
    return {
        "name": name, "admin": admin, "lead": lead, "teams": teams,
        "reports": admin_sees(user, REPORTS_PERMISSION),
        "nodes": admin_sees(user, NODES_PERMISSION),
    }  # fmt: skip


@register.filter
def duration(seconds) -> str:
    """Seconds as ``2 h 05 min`` / ``4 min 10 s``; ``—`` for None."""
    if seconds is None:
        return "—"
    total = int(round(float(seconds)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


@register.filter
def kwh(energy_j) -> str:
    """Joules as kWh with 3 decimals."""
    if energy_j is None:
        return "—"
    return f"{float(energy_j) / 3.6e6:.3f}"


@register.filter
def wait_label(code) -> str:
    """A wait code (``budget_exhausted``) in words (``Budget used up``)."""
    return labels.wait_label(code or "")


@register.filter
def amount(value) -> str:
    """A quantity readable at any size: ``2,304`` / ``12.50`` / ``0.0912`` (3 significant
    digits below 1, so a small use never reads as 0.00)."""
    if value is None:
        return "—"
    v = float(value)
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1 or v == 0:
        return f"{v:.2f}"
    return f"{v:.3g}"


@register.filter
def reason_sentence(text) -> str:
    return labels.reason_sentence(text or "")
