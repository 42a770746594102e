"""Pages of a budget stored before its limits had bounds: no 'inf %', and no Infinity in the
JSON the dashboard parses (one Infinity made JSON.parse throw, so no figure was drawn)."""

import json
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from cluster.models import Budget
from telemetry.models import EnergyLedgerEntry

pytestmark = pytest.mark.django_db

NOT_A_NUMBER = re.compile(r"(?<![\w.])(inf|-inf|nan|Infinity|NaN)(?![\w])")


@pytest.mark.parametrize(
    "limits", [{"energy_limit_kwh": 5e-324}, {"carbon_limit_kg": 1e308, "energy_limit_kwh": 10.0}]
)
def test_pages_of_a_stored_out_of_range_budget_show_no_infinity(lead, team, make_node, limits):
    # given a budget the ORM stored past today's bounds, and a team that used energy
    now = timezone.now()
    Budget.objects.create(
        team=team, period_start=now - timedelta(hours=2), period_end=now + timedelta(days=1),
        **limits,
    )  # fmt: skip
    EnergyLedgerEntry.objects.create(
        gpu=make_node("node-01", gpus=1).gpus.get(), team=team, energy_j=3600.0, co2_g=1.0,
        hour=now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1),
        ci_g_per_kwh=250.0, zone="ES",
    )  # fmt: skip
    client = Client()
    client.force_login(lead)

    data = client.get(reverse("frontend:dashboard-data"))
    dashboard = client.get(reverse("frontend:dashboard"))
    budgets = client.get(reverse("frontend:budget-list"))

    assert data.status_code == dashboard.status_code == budgets.status_code == 200
    json.loads(data.content, parse_constant=pytest.fail)  # strict JSON: no Infinity, no NaN
    script = re.search(r'id="budget-figures"[^>]*>(.*?)</script>', dashboard.content.decode(), re.S)
    json.loads(script.group(1), parse_constant=pytest.fail)
    for page in (dashboard, budgets):
        assert NOT_A_NUMBER.findall(page.content.decode()) == []
