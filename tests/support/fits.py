"""Comparing a freshly fitted catalog with the shipped one.

Exact equality is pinned by ``test_fitting_is_deterministic`` on one machine. Across machines
the BLAS rounds differently: on an AMD EPYC (the shipped file was fitted on Intel) the T4's
power exponent came out 1.4e-6 apart, and deepspeech2's A40 draw, which the data leaves flat
in the batch, settles in the other end of its flat valley (``perf_fit.fit_power_limit``), so
its A100 draw is 0.1% apart. Hence 0.2% relative, and 1e-6 absolute for parameters near 0
(``test_perf_fit`` compares the power by its predictions: a flat draw has many parameter sets).
"""

from __future__ import annotations

import pytest


def catalog_approx(value):
    """``value`` (nested dicts and lists of a catalog's JSON) with floats as ``pytest.approx``."""
    if isinstance(value, dict):
        return {k: catalog_approx(v) for k, v in value.items()}
    if isinstance(value, list):
        return [catalog_approx(v) for v in value]
    if isinstance(value, float):
        return pytest.approx(value, rel=2e-3, abs=1e-6)
    return value


# The T4's DVFS shape is the median of five RTX6000 power-limit fits whose data do not pin
# it down: the resnet50 sweep has local minima from k = 1.34 to 2.12 within 0.5% of each
# other's cost, and which one a start ends in depends on the BLAS build's rounding. The
# shipped exponent 1.84 (static share 0.386, peak-to-average 1.090) came out 2.11 (0.391,
# 1.073) on another Intel Xeon (2026-11-26). These three are held to a range, not to the
# digit, by ``pop_unidentified``.
UNIDENTIFIED_T4_DVFS = {
    "power_exp": (1.3, 2.2),
    "power_static_frac": (0.36, 0.41),
    "peak_to_avg": (1.05, 1.11),
}


def pop_unidentified(*gpus: dict) -> None:
    """Check the T4's unidentified DVFS parameters of each catalog's ``gpus`` against their
    ranges and remove them, so the rest compares to the digit (``catalog_approx``)."""
    for g in gpus:
        dvfs = g["T4"]["dvfs"]
        for name, (low, high) in UNIDENTIFIED_T4_DVFS.items():
            value = dvfs.pop(name)
            assert low <= value <= high, (name, value)


# What ``perf_build.zeus_fits`` returned for each set of Zeus rows in this process. It is
# 24 tight least-squares fits, about 47 of the 52 s one catalog build takes on the 2-core CI
# machine, and five tests build the catalog from the same rows (``test_perf_fit``'s shipped
# catalog and progress count, ``test_perf_profiles``' three ``fit_perf_models`` runs).
_ZEUS_FITS: dict[tuple, dict] = {}


def reuse_zeus_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``perf_build.zeus_fits`` fit each distinct set of rows once per process and hand
    later callers with the same rows a copy of that result. Everything else in a catalog
    build (Perseus, the throughput fits, the GPUs, the command's writes) still runs each
    time. That the same rows give the same fits is what ``test_fitting_is_deterministic``
    pins (it calls ``fit_power_limit`` itself, twice, never through this cache), and the
    first build in the process is a real one that ``test_shipped_catalog_is_what_the_data_
    gives`` or ``test_fit_perf_models_writes_the_json_and_the_profiles`` compares with the
    shipped file, whichever runs first."""
    from scheduling.fitting import perf_build

    real = perf_build.zeus_fits

    def zeus_fits(rows):
        key = tuple(rows)
        if key not in _ZEUS_FITS:
            _ZEUS_FITS[key] = real(rows)
        return dict(_ZEUS_FITS[key])

    monkeypatch.setattr(perf_build, "zeus_fits", zeus_fits)
