"""The simulator command runs on pinned floating-point kernels, so that a learned run's
figures are the same on every x86-64-v3 machine (``scheduling.simulator.numerics``)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from scheduling.simulator import numerics

ROOT = Path(__file__).resolve().parents[2]
V3 = frozenset({"avx2", "fma", "sse4_2"})


@pytest.mark.parametrize(
    ("environ", "machine", "flags", "pinned"),
    [
        ({}, "x86_64", V3, True),
        ({}, "AMD64", V3 | {"avx512f"}, True),
        ({"WATTFLOW_NUMERICS": "native"}, "x86_64", V3, False),
        ({"WATTFLOW_NUMERICS": "x86-64-v3"}, "x86_64", V3, False),  # already started again
        ({}, "x86_64", frozenset({"sse4_2", "avx"}), False),  # Haswell kernels would not run
        ({}, "aarch64", frozenset({"asimd"}), False),
    ],
)
def test_the_command_starts_again_pinned_only_where_the_pinned_kernels_run(
    environ, machine, flags, pinned
):
    env = numerics.pinned_environ({"PATH": "/bin", **environ}, machine=machine, flags=flags)
    if not pinned:
        assert env is None
        return
    assert env["PATH"] == "/bin"
    assert env["WATTFLOW_NUMERICS"] == "x86-64-v3"
    assert env["OPENBLAS_CORETYPE"] == "Haswell"
    assert "AVX512F" in env["NPY_DISABLE_CPU_FEATURES"].split(",")


def test_a_run_is_called_pinned_only_where_numpy_has_no_avx512_loop_on(monkeypatch):
    env = {"WATTFLOW_NUMERICS": "x86-64-v3", **numerics.PINNED_ENV}
    monkeypatch.setattr(numerics, "_numpy_avx512_on", lambda: False)
    assert numerics.describe(env).startswith("x86-64-v3")
    assert numerics.describe({}).startswith("native")
    # the settings in place but numpy still on AVX-512 (a numpy naming its groups otherwise)
    monkeypatch.setattr(numerics, "_numpy_avx512_on", lambda: True)
    assert numerics.describe(env).startswith("native")


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n\nprocessor\t: 1\n")
    assert numerics.cpu_flags(info) == frozenset({"fpu", "sse2", "avx2", "fma"})
    assert numerics.cpu_flags(tmp_path / "missing") == frozenset()


def _simulate(tmp_path: Path, *, command: tuple[str, ...] = ("-m", "scheduling.simulator"),
              **env: str) -> tuple[dict, str]:  # fmt: skip
    out = tmp_path / (env.get("WATTFLOW_NUMERICS", "default") + "-" + command[-1])
    probe = (
        "import numpy._core._multiarray_umath as m; "
        "print('AVX512F', m.__cpu_features__.get('AVX512F'))"
    )
    inherited = {k: v for k, v in os.environ.items() if k not in ("WATTFLOW_NUMERICS",)}
    child_env = {**inherited, "PYTHONPATH": str(ROOT), **env}
    subprocess.run(
        [sys.executable, *command, "--trace",
         str(ROOT / "data/trace/pollux_workload-1.csv"), "--cluster",
         str(ROOT / "data/clusters/n16g4_t4.json"), "--policy", "fifo", "--max-jobs", "3",
         "--knowledge", "oracle", "--no-progress", "--out", str(out)],
        check=True, capture_output=True, text=True, env=child_env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    (report,) = out.glob("*_report.json")
    features = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True,
        env={**child_env, **numerics.PINNED_ENV},
    ).stdout  # fmt: skip
    return json.loads(report.read_text())["scenario"], features


@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64")
    or not {"avx2", "fma"} <= numerics.cpu_flags(),
    reason="the pinned kernels need an x86-64 CPU with AVX2 and FMA",
)
def test_the_command_reports_the_kernels_it_ran_on(tmp_path):
    meta, features = _simulate(tmp_path)
    assert meta["numerics"].startswith("x86-64-v3 (numpy without AVX-512")
    # and numpy under the pinned environment has its AVX-512 loops off (False), or the CPU
    # has none (False too), never on
    assert features.strip() in ("AVX512F False", "AVX512F None")
    native, _ = _simulate(tmp_path, WATTFLOW_NUMERICS="native")
    assert native["numerics"].startswith("native")
    # and so does the same command inside Django (it ran on the CPU's own kernels before)
    managed, _ = _simulate(tmp_path, command=("manage.py", "simulate"))
    assert managed["numerics"].startswith("x86-64-v3 (numpy without AVX-512")


def test_a_user_choice_of_numpy_features_is_not_pinned_over():
    # numpy refuses NPY_ENABLE_CPU_FEATURES and NPY_DISABLE_CPU_FEATURES together with an
    # ImportError: pinned over, the command could not start at all
    env = {"NPY_ENABLE_CPU_FEATURES": "AVX2"}
    assert numerics.pinned_environ(env, machine="x86_64", flags=V3) is None
