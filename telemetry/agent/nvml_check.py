"""``python -m telemetry.agent.nvml_check [--gpu 0] [--samples 3] [--read-only]``: the agent's
NVML backend on the real GPUs of this machine, printed, for the first run on real hardware (the
tests only ever drive it through a fake of ``pynvml``).

It prints what the agent would register, a few readings of every GPU, then on one GPU sets the
power limit to the middle of its range and locks the SM clock below its maximum, reads back what
the driver enforces, puts back what it changed and reads again. Setting limits and clocks needs
root; where the driver refuses, the refusal is printed and the run goes on (exit status 1).
``--read-only`` stops after the readings and changes nothing: for a GPU that is not yours to
retune (a shared or borrowed machine).
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from typing import Any, TextIO

from telemetry.agent.backends import NoUsableGpu, NvmlBackend, Reading


def _reading(r: Reading) -> str:
    energy = "-" if r.energy_j is None else f"{r.energy_j:.1f} J"
    return (
        f"  {r.gpu_uuid}: {r.power_w:.1f} W, energy counter {energy}, util {r.util_pct}%, "
        f"mem {'-' if r.mem_used_mib is None else f'{r.mem_used_mib:.0f}'} MiB, {r.temp_c} C, "
        f"SM {r.sm_clock_mhz} MHz, "
        f"limit {r.power_limit_w} W"
    )


def run(
    nvml: Any | None,
    *,
    gpu: int,
    samples: int,
    out: TextIO,
    pause_s: float = 1.0,
    read_only: bool = False,
) -> int:
    backend = NvmlBackend(nvml=nvml)
    failures = 0
    try:
        gpus = backend.gpus()
        out.write(f"{len(gpus)} GPU(s)\n")
        for info in gpus:
            out.write(f"  {info.to_wire()}\n")
        by_index = {g.index: g for g in gpus}
        if gpu not in by_index:
            out.write(f"no GPU {gpu} on this machine\n")
            return 2
        for n in range(samples):
            out.write(f"reading {n + 1}\n")
            for r in backend.read(datetime.now(UTC)):
                out.write(_reading(r) + "\n")
            time.sleep(pause_s)
        if read_only:
            out.write(f"GPU {gpu}: read-only, its power limit and clocks left as they are\n")
            return 0
        info = by_index[gpu]
        before = _reading_of(backend, info.uuid)
        limit = None
        if info.min_power_limit_w is not None and info.max_power_limit_w is not None:
            limit = round((info.min_power_limit_w + info.max_power_limit_w) / 2)
        clock = None if info.max_sm_clock_mhz is None else round(info.max_sm_clock_mhz * 0.7)
        out.write(f"GPU {gpu}: set power limit {limit} W, lock SM clock {clock} MHz\n")
        try:
            backend.apply_settings(gpu, sm_clock_mhz=clock, power_limit_w=limit)
        except Exception as exc:  # noqa: BLE001 - report the driver's answer, whatever it is
            failures += 1
            out.write(f"  refused: {exc!r}\n")
        time.sleep(pause_s)
        now = _reading_of(backend, info.uuid)
        out.write("  " + (_reading(now).strip() if now else "its draw cannot be read") + "\n")
        out.write(f"GPU {gpu}: put back what was changed\n")
        backend.restore_defaults(gpu)
        time.sleep(pause_s)
        after = _reading_of(backend, info.uuid)
        if after is None:
            out.write("  its draw cannot be read after the restore\n")
            return 1
        out.write("  " + _reading(after).strip() + "\n")
        # Back at what it had before (a site's own cap is not the board's default).
        if before is not None and after.power_limit_w != before.power_limit_w:
            failures += 1
            out.write(f"  limit not back at its {before.power_limit_w} W before the check\n")
    finally:
        backend.close()
    return 1 if failures else 0


def _reading_of(backend: NvmlBackend, uuid: str):
    """This GPU's reading now; None where NVML cannot read its draw (left out of a read)."""
    return next((r for r in backend.read(datetime.now(UTC)) if r.gpu_uuid == uuid), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m telemetry.agent.nvml_check")
    parser.add_argument("--gpu", type=int, default=0, help="the GPU to set and restore")
    parser.add_argument("--samples", type=int, default=3, help="readings of every GPU")
    parser.add_argument(
        "--read-only", action="store_true", help="only read: set no power limit or clock"
    )
    args = parser.parse_args(argv)
    if args.samples < 0:
        parser.error("--samples must not be negative")
    import pynvml

    try:
        return run(
            None, gpu=args.gpu, samples=args.samples, out=sys.stdout, read_only=args.read_only
        )
    except pynvml.NVMLError as exc:
        sys.stderr.write(f"nvml_check: NVML is not usable here: {exc}\n")
        return 2
    except NoUsableGpu as exc:
        sys.stderr.write(f"nvml_check: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
