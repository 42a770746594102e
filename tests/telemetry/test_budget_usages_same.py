"""``budget_usages`` (all budgets' ledgers in two queries) gives exactly what reading each
budget on its own gave before it (the per-budget ``budget_usage`` of 42dc68f, re-implemented
here plainly): over teams whose budgets are adjacent or (unsaved, as the what-if builds them)
overlapping, periods starting and ending inside an hour, on the hour, inside one hour, and
ledger rows with and without minutes."""

import math
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db.models import Sum

from cluster.models import Budget, Gpu, Team
from scheduling.core.types import J_PER_KWH
from telemetry.models import EnergyLedgerEntry
from telemetry.usage import budget_usage, budget_usages

HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
T0 = datetime(2026, 3, 2, tzinfo=UTC)


def _hour_of(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


def _one_at_a_time(budget: Budget) -> tuple:
    """(hourly, energy_j, co2_g, estimated) of one budget, as the per-budget code read it: the
    team's ledger per hour from the hour the period starts in to its end; of an hour the
    period starts or ends inside, each row's minutes by the share of their seconds inside
    (a row without minutes whole if its hour starts in the period); an edge hour that comes
    to nothing is left out."""
    start, end = budget.period_start, budget.period_end
    first, last = _hour_of(start), _hour_of(end)
    per_hour = (
        EnergyLedgerEntry.objects.filter(team_id=budget.team_id, hour__gte=first, hour__lt=end)
        .values("hour")
        .annotate(e=Sum("energy_j"), c=Sum("co2_g"))
        .order_by("hour")
    )
    edges = set()
    if first < start:
        edges.add(first)
    if last < end:
        edges.add(last)
    hourly, estimated = [], False
    for row in per_hour:
        e, c = row["e"] or 0.0, row["c"] or 0.0
        if row["hour"] in edges:
            e = c = 0.0
            for led in EnergyLedgerEntry.objects.filter(
                team_id=budget.team_id, hour=row["hour"]
            ).order_by("hour", "gpu", "job"):
                if led.minutes_j:
                    part = 0.0
                    for k, j in enumerate(led.minutes_j):
                        lo = led.hour + k * MINUTE
                        inside = (min(lo + MINUTE, end) - max(lo, start)).total_seconds()
                        if inside > 0:
                            part += j * min(inside / 60.0, 1.0)
                    e, c = e + part, c + part / J_PER_KWH * led.ci_g_per_kwh
                elif led.hour >= start:
                    e, c = e + led.energy_j, c + led.co2_g
            if not (e or c):
                continue
        hourly.append((row["hour"], e, c))
        estimated = (
            estimated
            or EnergyLedgerEntry.objects.filter(
                team_id=budget.team_id, hour=row["hour"], ci_estimated=True
            ).exists()
        )
    energy_j = co2_g = 0.0
    for _, e, c in hourly:
        energy_j += e
        co2_g += c
    return tuple(hourly), energy_j, co2_g, estimated


def _same(got: tuple, want: tuple) -> bool:
    """(hourly, energy_j, co2_g, estimated) alike: the same hours and flag, each sum equal
    to within rounding (PostgreSQL's SUM adds a group's rows in no fixed order, so the last
    bit of a sum may differ between two reads of the same rows)."""

    def close(a: float, b: float) -> bool:
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9)

    (hourly, e, c, est), (w_hourly, w_e, w_c, w_est) = got, want
    return (
        est == w_est
        and [h for h, _, _ in hourly] == [h for h, _, _ in w_hourly]
        and all(
            close(a, x) and close(b, y)
            for (_, a, b), (_, x, y) in zip(hourly, w_hourly, strict=True)
        )
        and close(e, w_e)
        and close(c, w_c)
    )


def _random_bound(rng: random.Random) -> datetime:
    hour = T0 + rng.randrange(0, 10) * HOUR
    kind = rng.random()
    if kind < 0.3:
        return hour  # on the hour
    if kind < 0.5:
        return hour + rng.randrange(1, 60) * MINUTE  # on a minute
    return hour + timedelta(seconds=rng.uniform(1, 3599))  # anywhere inside


def _fill_ledger(rng: random.Random, teams: list[Team], gpus: list[Gpu]) -> None:
    rows = []
    for t, team in enumerate(teams):
        own = gpus[3 * t : 3 * t + 3]  # (a GPU's idle row of an hour is unique)
        for h in range(-1, 12):
            if rng.random() < 0.25:
                continue  # an hour with no row
            for gpu in rng.sample(own, rng.randrange(1, len(own) + 1)):
                minutes = []
                if rng.random() < 0.7:
                    minutes = [
                        0.0 if rng.random() < 0.2 else rng.uniform(0, 3e4) for _ in range(60)
                    ]
                energy = sum(minutes) if minutes else rng.uniform(0, 2e6)
                ci = rng.uniform(50, 400)
                rows.append(
                    EnergyLedgerEntry(
                        gpu=gpu, hour=T0 + h * HOUR, team=team, energy_j=energy,
                        co2_g=energy / J_PER_KWH * ci, ci_g_per_kwh=ci,
                        ci_estimated=rng.random() < 0.1, zone="ES", minutes_j=minutes,
                    )
                )  # fmt: skip
    EnergyLedgerEntry.objects.bulk_create(rows)


@pytest.mark.parametrize("seed", range(6))
def test_many_budgets_read_at_once_are_each_what_one_read_alone_gave(
    seed, team, other_team, make_node
):
    rng = random.Random(seed)
    node = make_node("node-01", gpus=6)
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    teams = [team, other_team]
    _fill_ledger(rng, teams, gpus)
    budgets = []
    for team_ in teams:
        # adjacent stored budgets: each ends where the next starts, often inside an hour
        t = _random_bound(rng) - 3 * HOUR
        for _ in range(rng.randrange(1, 5)):
            end = t + rng.choice([timedelta(seconds=rng.uniform(1, 3 * 3600)), HOUR, 30 * MINUTE])
            budgets.append(
                Budget.objects.create(
                    team=team_, period_start=t, period_end=end, energy_limit_kwh=1.0
                )
            )
            t = end
        # overlapping ones, unsaved as the what-if's is, each its own id
        for k in range(rng.randrange(0, 3)):
            a, b = sorted((_random_bound(rng), _random_bound(rng)))
            if a == b:
                b = a + timedelta(seconds=rng.uniform(1, 600))
            budgets.append(
                Budget(
                    pk=10_000 + 10 * team_.pk + k, team=team_, period_start=a, period_end=b,
                    carbon_limit_kg=1.0,
                )
            )  # fmt: skip
    rng.shuffle(budgets)

    together = budget_usages(budgets)

    assert [u.budget_id for u in together] == [b.pk for b in budgets]
    for budget, usage in zip(budgets, together, strict=True):
        got = (usage.hourly, usage.energy_j, usage.co2_g, usage.estimated)
        assert _same(got, _one_at_a_time(budget)), (budget.period_start, budget.period_end)
        alone = budget_usage(budget)
        assert _same(got, (alone.hourly, alone.energy_j, alone.co2_g, alone.estimated))
        sums = dict(hourly=(), energy_j=0.0, co2_g=0.0, energy=None, carbon=None)
        assert replace(usage, **sums) == replace(alone, **sums)
        for a, b in ((usage.energy, alone.energy), (usage.carbon, alone.carbon)):
            assert (a is None) == (b is None)
            if a is not None:
                assert replace(a, used=0.0) == replace(b, used=0.0)
                assert math.isclose(a.used, b.used, rel_tol=1e-12, abs_tol=1e-9)


def _kilojoule_a_minute(team, node) -> None:
    """The ledger of ``team`` on ``node``'s GPU: 1 kJ a minute over T0's hour and the next."""
    for hour in (T0, T0 + HOUR):
        EnergyLedgerEntry.objects.create(
            gpu=Gpu.objects.get(node=node), hour=hour, team=team, energy_j=60 * 1000.0,
            co2_g=60 * 1000.0 / J_PER_KWH * 100.0, ci_g_per_kwh=100.0, zone="ES",
            minutes_j=[1000.0] * 60,
        )  # fmt: skip


def test_unsaved_budgets_read_together_each_keep_their_own_period(team, make_node):
    # (keyed by id, every unsaved budget took the hours the last one starts or ends inside)
    _kilojoule_a_minute(team, make_node("node-01", gpus=1))
    first_half = Budget(team=team, period_start=T0, period_end=T0 + 30 * MINUTE)
    last_ten = Budget(team=team, period_start=T0 + 110 * MINUTE, period_end=T0 + 3 * HOUR)

    halves = budget_usages([first_half, last_ten])

    assert [u.energy_j for u in halves] == [30 * 1000.0, 10 * 1000.0]
    assert halves == [budget_usage(first_half), budget_usage(last_ten)]


def test_a_period_given_in_another_utc_offset_is_read_on_the_ledgers_utc_hours(team, make_node):
    # given a ledger of 1 kJ a minute over two UTC hours, and one period from 00:15 to 01:45
    # UTC given once in UTC and once at +05:30 (05:45 to 07:15 there: its hours fall on the
    # half hour)
    _kilojoule_a_minute(team, make_node("node-01", gpus=1))
    india = timezone(timedelta(hours=5, minutes=30))
    start, end = T0 + 15 * MINUTE, T0 + 105 * MINUTE
    in_utc = Budget(team=team, period_start=start, period_end=end)
    offset = Budget(
        team=team, period_start=start.astimezone(india), period_end=end.astimezone(india)
    )

    # when both are read, then each is the 90 minutes inside, on the UTC hours
    both = budget_usages([in_utc, offset])
    assert [u.energy_j for u in both] == [90 * 1000.0, 90 * 1000.0]
    co2 = pytest.approx(45e3 / J_PER_KWH * 100.0)
    assert both[0].hourly == both[1].hourly == ((T0, 45e3, co2), (T0 + HOUR, 45e3, co2))
