"""System checks of the telemetry settings (IDs telemetry.E0xx / W0xx)."""

import math

from django.conf import settings
from django.core.checks import Error, Warning, register

# The longest gap between two samples that accounting may bridge: a year.
MAX_GAP_S = 365 * 86400.0


@register()
def check_telemetry_settings(app_configs, **kwargs):
    from telemetry.carbon import CarbonUnavailable, static_mean_g_per_kwh

    problems = []
    if settings.TELEMETRY_CARBON_PROVIDER not in ("stored", "http"):
        problems.append(
            Error(
                "TELEMETRY_CARBON_PROVIDER must be 'stored' or 'http'.",
                id="telemetry.E002",
            )
        )
    try:
        static_mean_g_per_kwh(settings.TELEMETRY_CARBON_ZONE)
    except CarbonUnavailable:
        problems.append(
            Error(
                f"TELEMETRY_CARBON_ZONE={settings.TELEMETRY_CARBON_ZONE!r} has no static fallback "
                "(no data/carbon/em_<zone>_2022_hourly.csv): carbon could not be priced when the "
                "provider fails.",
                hint="Use ES, NO, BR or US-CAL-CISO, or vendor that zone's yearly file.",
                id="telemetry.E001",
            )
        )
    if settings.TELEMETRY_MAX_GAP_S <= 0 or settings.TELEMETRY_RETENTION_S <= 3600:
        problems.append(
            Warning(
                "TELEMETRY_MAX_GAP_S must be positive and TELEMETRY_RETENTION_S above an hour, "
                "or accounting loses samples.",
                id="telemetry.W001",
            )
        )
    if not (
        # (NaN passed the warning's "<= 0" above; NaN or infinity then made every sample
        # batch a 500 and every accounting fail, in timedelta())
        math.isfinite(settings.TELEMETRY_MAX_GAP_S)
        # (and finite but past dates: 1e11 s put the expiry's cutoff before year 1, an
        # OverflowError every run; a year is room for any sampling)
        and settings.TELEMETRY_MAX_GAP_S <= MAX_GAP_S
        and math.isfinite(settings.TELEMETRY_MAX_CLOCK_SKEW_S)
        and settings.TELEMETRY_MAX_CLOCK_SKEW_S >= 0
        and math.isfinite(settings.TELEMETRY_COUNTER_TOLERANCE)
        and settings.TELEMETRY_COUNTER_TOLERANCE >= 0
    ):
        problems.append(
            Error(
                "TELEMETRY_MAX_CLOCK_SKEW_S and TELEMETRY_COUNTER_TOLERANCE must be finite and "
                "not negative, and TELEMETRY_MAX_GAP_S finite and at most a year "
                f"({MAX_GAP_S:.0f} s).",
                id="telemetry.E003",
            )
        )
    return problems
