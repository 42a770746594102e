"""The floating-point path of a simulation, pinned so that its figures reproduce.

A learned-knowledge run fits every job's performance model with numpy, and numpy and
OpenBLAS choose their kernels for the CPU when they are imported: numpy its AVX-512 loops
(``exp``, ``log``, sums, sorts), OpenBLAS its per-architecture kernels. The results differ
in the last bits, and a schedule is a long chain of decisions taken on such numbers: one
learned team-budget run gave 1.566x, 1.587x, 1.723x or 1.792x against its baseline with the
kernels as the only difference (docs/benchmarks.md, "The numeric path").

So ``python -m scheduling.simulator`` runs with the kernels of an x86-64-v3 CPU without
AVX-512 (AVX2 and FMA: Intel since Haswell, AMD since Zen): on any x86-64 CPU with AVX2 and
FMA it starts itself again, once, with numpy's AVX-512 loops off and OpenBLAS on its Haswell
kernels (OpenBLAS picks other kernels for other CPUs, AMD's Zen among them), so the same
command gives the same figures on any such machine with the same numpy and OpenBLAS (the
versions ``requirements.txt`` pins). Elsewhere (no AVX2 or FMA, not x86, or a user's own
``NPY_ENABLE_CPU_FEATURES``, which numpy refuses beside the setting used here) it runs as it
is and says so. The pinned settings replace a user's own ``OPENBLAS_CORETYPE`` and
``NPY_DISABLE_CPU_FEATURES``; ``WATTFLOW_NUMERICS=native`` keeps the CPU's own kernels. Only
the commands re-execute (``python -m scheduling.simulator`` and ``manage.py simulate``); the
simulator imported as a library (the tests, the benchmark scripts that load a scenario
themselves) runs with whatever numpy the process loaded, and ``describe`` says which.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path

ENV = "WATTFLOW_NUMERICS"
PINNED = "x86-64-v3"
NATIVE = "native"

# Every AVX-512 group numpy dispatches to (a group the CPU lacks is ignored).
_AVX512 = (
    "AVX512F,AVX512CD,AVX512_KNL,AVX512_KNM,AVX512_SKX,AVX512_CLX,AVX512_CNL,AVX512_ICL,AVX512_SPR"
)
PINNED_ENV = {"NPY_DISABLE_CPU_FEATURES": _AVX512, "OPENBLAS_CORETYPE": "Haswell"}
_NEEDS = frozenset({"avx2", "fma"})


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first CPU's feature flags (empty where /proc/cpuinfo is not there)."""
    try:
        with cpuinfo.open(encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def pinned_environ(
    environ: Mapping[str, str], *, machine: str, flags: frozenset[str]
) -> dict[str, str] | None:
    """The environment to start the command again with, or None to run as it is: already
    pinned or asked to stay native, or a CPU the pinned kernels do not run on."""
    if environ.get(ENV) in (PINNED, NATIVE):
        return None
    if environ.get("NPY_ENABLE_CPU_FEATURES"):
        # numpy refuses both at once (ImportError): the user's choice of kernels stands
        return None
    if machine.lower() not in ("x86_64", "amd64") or not _NEEDS <= flags:
        return None
    return {**environ, **PINNED_ENV, ENV: PINNED}


def reexec_pinned() -> None:
    """Start this command again with the pinned kernels, where ``pinned_environ`` says to
    (it does not return then); otherwise return at once."""
    env = pinned_environ(os.environ, machine=platform.machine(), flags=cpu_flags())
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    # (argv[0] as the interpreter's path: a bare "python" could resolve elsewhere on PATH)
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def describe(environ: Mapping[str, str] = os.environ) -> str:
    """The kernels this process runs with, for a run's report: pinned only where the
    settings are in place and numpy, asked, has no AVX-512 loop switched on (a numpy that
    names its groups otherwise, as later versions do, would keep them and is not pinned)."""
    if (
        environ.get(ENV) == PINNED
        and all(environ.get(k) == v for k, v in PINNED_ENV.items())
        and not _numpy_avx512_on()
    ):
        return f"{PINNED} (numpy without AVX-512, OpenBLAS Haswell)"
    return f"{NATIVE} ({platform.machine() or 'unknown'})"


def _numpy_avx512_on() -> bool:
    """Whether numpy dispatches to any AVX-512 (or x86-64-v4) loop in this process: a
    dispatch target it was built with that the CPU has and the settings left on."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__ as targets
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # (another numpy layout: cannot tell, so not claimed pinned)
        return True
    return any(
        features.get(name) and (name.startswith("AVX512") or name == "X86_V4") for name in targets
    )
