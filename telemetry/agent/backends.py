"""GPU backends of the node agent: one interface, a real NVML one and (in ``simulated.py``) a
simulated one.

A backend reports what is on the node (``gpus``), reads every GPU once (``read``) and applies or
restores per-GPU settings (``apply_settings`` / ``restore_defaults``). Settings are first held to
what the GPU registered (:func:`capped_settings`): an SM clock above ``max_sm_clock_mhz`` is
lowered to it, a power limit outside ``[min_power_limit_w, max_power_limit_w]`` is moved to the
nearest bound, and one above the site's cap (``site_power_limit_w``) to the cap. The agent
loop drives backends through this interface only; which job runner goes with which backend is
chosen once, in ``runners.py``.

NVML units are converted here, once: NVML speaks milliwatts and millijoules, the wire format
speaks watts and joules.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """A GPU as registered with the server."""

    uuid: str
    index: int
    model: str
    memory_total_mib: int | None  # None: unknown (the server keeps what it has)
    default_power_limit_w: float | None
    min_power_limit_w: float | None
    max_power_limit_w: float | None
    max_sm_clock_mhz: int | None
    # Highest first; empty: unknown (the server keeps what it has).
    supported_sm_clocks_mhz: tuple[int, ...] = ()
    # The limit the GPU enforced when the agent started, before it changed anything: the
    # site's own cap (``nvidia-smi -pl``), else the board's default. No limit the agent sets
    # goes above it, and a GPU told none runs at it. None: not read (or outside the range).
    site_power_limit_w: float | None = None

    def to_wire(self) -> dict[str, Any]:
        wire = {
            "uuid": self.uuid,
            "index": self.index,
            "model": self.model,
            "memory_mb": self.memory_total_mib,
            "default_power_limit_w": self.default_power_limit_w,
            "min_power_limit_w": self.min_power_limit_w,
            "max_power_limit_w": self.max_power_limit_w,
            "max_sm_clock_mhz": self.max_sm_clock_mhz,
            "supported_sm_clocks_mhz": list(self.supported_sm_clocks_mhz),
        }
        if self.site_power_limit_w is not None:
            # (left out where unknown: a server from before it ignores the field anyway,
            # and one that knows it keeps what it has for a GPU that sends none)
            wire["site_power_limit_w"] = self.site_power_limit_w
        return wire

    @property
    def top_power_limit_w(self) -> float | None:
        """The highest limit the agent sets on the GPU: its top, or the site's cap below it."""
        high, cap = self.max_power_limit_w, self.site_power_limit_w
        if cap is not None and (high is None or cap < high):
            return cap
        return high


@dataclass(frozen=True, slots=True)
class Reading:
    """One sample of one GPU. ``energy_j`` is the GPU's cumulative energy counter (None where the
    GPU has none); the server integrates ``power_w`` in that case. Other None fields are values
    the backend cannot know (the simulated one models only power, clock and progress)."""

    gpu_uuid: str
    ts: datetime
    power_w: float
    energy_j: float | None
    util_pct: float | None
    mem_used_mib: float | None
    temp_c: float | None
    sm_clock_mhz: int | None
    power_limit_w: float | None

    def to_wire(self) -> dict[str, Any]:
        return {
            "gpu_uuid": self.gpu_uuid,
            "ts": self.ts.isoformat(),
            "power_w": round(self.power_w, 3),
            "energy_j": _round(self.energy_j, 3),
            "util_pct": _round(self.util_pct, 2),
            "mem_used_mib": _round(self.mem_used_mib, 1),
            "temp_c": _round(self.temp_c, 1),
            "sm_clock_mhz": self.sm_clock_mhz,
            "power_limit_w": _round(self.power_limit_w, 3),
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def capped_settings(
    gpu: GpuInfo, *, sm_clock_mhz: int | None, power_limit_w: float | None
) -> tuple[int | None, float | None]:
    """The clock and power limit to apply to ``gpu``: an SM clock no higher than the GPU's
    ``max_sm_clock_mhz``, a power limit within its range and no higher than the site's cap
    (``site_power_limit_w``; None stays None: leave it alone). A driver refuses values
    outside the range; holding them here keeps a bad assignment or a hand-edited Slurm
    comment from failing the whole setting, and a site's cap from being raised."""
    if sm_clock_mhz is not None and gpu.max_sm_clock_mhz is not None:
        if sm_clock_mhz > gpu.max_sm_clock_mhz:
            log.warning(
                "GPU %s: SM clock %s MHz capped at its maximum %s MHz",
                gpu.uuid, sm_clock_mhz, gpu.max_sm_clock_mhz,
            )  # fmt: skip
            sm_clock_mhz = gpu.max_sm_clock_mhz
    if power_limit_w is not None:
        low, high = gpu.min_power_limit_w, gpu.top_power_limit_w
        held = power_limit_w
        if high is not None:
            held = min(held, high)
        if low is not None:
            held = max(held, low)
        if held != power_limit_w:
            log.warning(
                "GPU %s: power limit %s W held to its range [%s, %s] W: %s W",
                gpu.uuid, power_limit_w, low, high, held,
            )  # fmt: skip
        power_limit_w = held
    return sm_clock_mhz, power_limit_w


class GpuBackend(Protocol):
    def gpus(self) -> list[GpuInfo]: ...

    def read(self, now: datetime) -> list[Reading]:
        """One reading per GPU, stamped ``now`` (the agent passes the tick's time)."""
        ...

    def apply_settings(
        self, index: int, *, sm_clock_mhz: int | None, power_limit_w: float | None
    ) -> None:
        """Lock the SM clock and set the power limit of one GPU; a None setting is the GPU's
        own (what it had before the agent changed it)."""
        ...

    def restore_defaults(self, index: int) -> None:
        """Put back what the agent changed on one GPU (its clock unlocked, its own limit)."""
        ...

    def close(self) -> None: ...


class NoUsableGpu(RuntimeError):
    """NVML works, but none of the node's GPUs can be scheduled (the message says why)."""


class SettingsRefused(RuntimeError):
    """The driver refused one or more of a GPU's settings (the message says which)."""


class NvmlBackend:
    """Real GPUs through nvidia-ml-py. ``nvml`` is the ``pynvml`` module; tests pass a fake of
    its functions instead (never a GPU in CI).

    Settings: the agent changes a GPU's power limit and locks its SM clock for a job, and
    puts back what the GPU had before, never the board's boot default (a site's own cap,
    set with ``nvidia-smi -pl``, stays). The limit each GPU enforces at the start, once
    what a killed agent left is put back and before anything else is changed, is taken as
    the site's cap (``GpuInfo.site_power_limit_w``, registered with the server, which plans
    no limit above it): no limit set goes above it. Where none of the agent's limits is in
    force on a GPU, its enforced limit is read again before one is set, so a cap the site
    set or lifted since is the one held (the registered one stays until the next start);
    one the site sets while the agent's limit is in force is found changed at the next
    setting or put-back, taken as the cap and left in force (nothing is put back over it).
    A setting an allocation leaves out
    (None) is the GPU's own: a retune from a locked clock to a power limit alone unlocks
    the clock. What the agent changed is kept in ``state_file`` until it is put back, so an
    agent started after one that was killed puts back what the killed one left (a clock
    lock outlives its process)."""

    def __init__(self, nvml: Any | None = None, *, state_file: Path | None = None) -> None:
        if nvml is None:
            import pynvml as nvml  # imported late: the simulated agent must run without a driver
        self._nvml = nvml
        # GPUs whose draw NVML could not read at the last tick (warned once, not every tick).
        self._unreadable: set[str] = set()
        # What the agent changed, per GPU UUID: "limit_mw", the limit to put back (absent
        # where the limit is untouched), and "locked", whether it locked the clock.
        self._state_file = state_file
        self._changed: dict[str, dict[str, Any]] = {}
        # The limit (mW) this agent last set on each GPU where it is in force: one found
        # otherwise was set by the site meanwhile (``_site_cap_now``).
        self._set_mw: dict[str, int] = {}
        self._nvml.nvmlInit()
        try:
            self._find_gpus()
            self._put_back_what_was_left()
            self._read_site_caps()
        except BaseException:
            self._nvml.nvmlShutdown()
            raise

    def _find_gpus(self) -> None:
        """Every GPU NVML can describe; one it cannot (hidden by a cgroup, lost from the bus)
        is left out with a warning, and the agent runs the others; so is one in MIG mode.
        None at all raises the last NVMLError (the agent says NVML is not usable here), or
        ``NoUsableGpu`` where every GPU is in MIG mode."""
        nvml = self._nvml
        self._handles: dict[int, Any] = {}
        self._info: dict[int, GpuInfo] = {}
        failed: Exception | None = None
        in_mig = 0  # GPUs left out for MIG mode
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                info = self._describe(index, handle)
            except nvml.NVMLError as exc:
                log.warning("GPU %d: NVML cannot describe it, left out: %s", index, exc)
                failed = exc
                continue
            mig = self._optional("nvmlDeviceGetMigMode", handle)
            if mig and mig[0] == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
                # Its slices are CUDA devices of their own (MIG-<uuid>): a job given the
                # GPU's index would see none of them, and the scheduler plans whole GPUs.
                log.warning(
                    "GPU %s: MIG mode is on; left out (Wattflow schedules whole GPUs)", info.uuid
                )
                in_mig += 1
                continue
            self._handles[index], self._info[index] = handle, info
        if failed is not None and not self._info:
            raise failed
        if in_mig and not self._info:
            raise NoUsableGpu(
                f"every GPU here is in MIG mode ({in_mig}); Wattflow schedules whole GPUs"
            )

    def _read_site_caps(self) -> None:
        """Take each GPU's enforced limit, read before the agent changes anything (what a
        killed agent left is put back first), as the site's cap (``site_power_limit_w``).
        A GPU whose limit a killed agent left changed and that could not be put back has
        its noted limit taken instead (the one it had before that agent). One NVML cannot
        read, or outside the GPU's range (a power brake holding the board below its
        bottom), is not taken: the GPU is registered without a cap, as before."""
        for index, info in list(self._info.items()):
            noted = self._changed.get(info.uuid, {}).get("limit_mw")
            if noted is not None:
                cap_mw = noted
            else:
                cap_mw = self._optional("nvmlDeviceGetEnforcedPowerLimit", self._handles[index])
            cap_w = self._cap_w(info, cap_mw)
            if cap_w is None:
                continue
            high = info.max_power_limit_w
            if high is not None and cap_w < high:
                log.info("GPU %s: the site's power cap is %g W (no limit set above it)",
                         info.uuid, cap_w)  # fmt: skip
            self._info[index] = replace(info, site_power_limit_w=cap_w)

    @staticmethod
    def _cap_w(info: GpuInfo, cap_mw: Any) -> float | None:
        """``cap_mw`` (an enforced limit NVML read, mW) as a site's cap in W; None where
        unread, not finite or outside the GPU's range (warned)."""
        if cap_mw is None:
            return None
        cap_w = cap_mw / 1000.0
        low, high = info.min_power_limit_w, info.max_power_limit_w
        if (
            not math.isfinite(cap_w)
            or (low is not None and cap_w < low)
            or (high is not None and cap_w > high)
        ):
            log.warning(
                "GPU %s: its enforced power limit, %.0f W, is outside its range "
                "[%s, %s] W; not taken as a site cap", info.uuid, cap_w, low, high,
            )  # fmt: skip
            return None
        return cap_w

    def _site_cap_now(self, index: int) -> GpuInfo:
        """GPU ``index``'s info with the site's cap read again, where the agent has no
        limit of its own in force on it (the limit it enforces is then the site's: a cap
        set or lifted with ``nvidia-smi -pl`` since the start, which the agent would
        otherwise have set limits over or held them under); as it was where the agent's
        limit is in force, or the limit cannot be read. A limit the agent set and finds
        changed (the site's ``nvidia-smi -pl`` while a job ran) is the site's: nothing of
        the agent's is in force any more, and nothing is put back over it."""
        info, handle = self._info[index], self._handles[index]
        if self._has(info.uuid, "limit_mw"):
            set_mw = self._set_mw.get(info.uuid)
            now_mw = (
                None
                if set_mw is None
                else self._optional("nvmlDeviceGetPowerManagementLimit", handle)
            )
            if now_mw is None or abs(now_mw - set_mw) < 500:
                return info  # the agent's own limit (or not known to be otherwise)
            log.warning(
                "GPU %s: its power limit is %g W, not the %g W the agent set: the site's, "
                "not put back", info.uuid, now_mw / 1000.0, set_mw / 1000.0,
            )  # fmt: skip
            self._set_mw.pop(info.uuid, None)
            self._note(info.uuid, limit_mw=None)
        cap_w = self._cap_w(
            info, self._optional("nvmlDeviceGetEnforcedPowerLimit", self._handles[index])
        )
        if cap_w is not None and cap_w != info.site_power_limit_w:
            log.info("GPU %s: the site's power cap is now %g W (it was %s W)",
                     info.uuid, cap_w, info.site_power_limit_w)  # fmt: skip
            info = self._info[index] = replace(info, site_power_limit_w=cap_w)
        return info

    def _optional(self, fn: str, *args: Any) -> Any:
        """Call an NVML query that older GPUs do not support; None when unsupported."""
        try:
            return getattr(self._nvml, fn)(*args)
        except self._nvml.NVMLError as exc:
            log.debug("NVML %s unsupported: %s", fn, exc)
            return None

    def _describe(self, index: int, handle: Any) -> GpuInfo:
        uuid = self._nvml.nvmlDeviceGetUUID(handle)
        name = self._nvml.nvmlDeviceGetName(handle)
        mem = self._optional("nvmlDeviceGetMemoryInfo", handle)
        default_mw = self._optional("nvmlDeviceGetPowerManagementDefaultLimit", handle)
        max_clock = self._optional("nvmlDeviceGetMaxClockInfo", handle, self._nvml.NVML_CLOCK_SM)
        limits_mw = self._optional("nvmlDeviceGetPowerManagementLimitConstraints", handle)
        if limits_mw is None or default_mw is None:
            enforced_mw = self._optional("nvmlDeviceGetEnforcedPowerLimit", handle)
            if enforced_mw is not None and limits_mw is None:
                # A board whose limit cannot be managed still enforces one: registered as
                # a range of that one value, so the server plans it at its fixed limit.
                log.warning(
                    "GPU %s: NVML gives no power-limit range; registered as fixed at its "
                    "enforced limit, %.0f W", _text(uuid), enforced_mw / 1000.0,
                )  # fmt: skip
                limits_mw, default_mw = (enforced_mw, enforced_mw), enforced_mw
            elif enforced_mw is not None:
                # A range but no default: the enforced limit, held to the range (it may be
                # what the last job left), is where a restore goes back to.
                default_mw = min(max(enforced_mw, limits_mw[0]), limits_mw[1])
                log.warning(
                    "GPU %s: NVML gives no default power limit; %.0f W (its enforced limit) "
                    "taken as the default", _text(uuid), default_mw / 1000.0,
                )  # fmt: skip
        return GpuInfo(
            uuid=_text(uuid),
            index=index,
            model=gpu_model_key(_text(name)),
            memory_total_mib=None if mem is None else int(mem.total // (1024 * 1024)),
            default_power_limit_w=None if default_mw is None else default_mw / 1000.0,
            min_power_limit_w=None if limits_mw is None else limits_mw[0] / 1000.0,
            max_power_limit_w=None if limits_mw is None else limits_mw[1] / 1000.0,
            max_sm_clock_mhz=max_clock,
            supported_sm_clocks_mhz=self._sm_clocks(handle),
        )

    def _sm_clocks(self, handle: Any) -> tuple[int, ...]:
        """The SM clocks the GPU can be locked at, over all its memory clocks, highest first;
        empty where the GPU cannot list them."""
        memory = self._optional("nvmlDeviceGetSupportedMemoryClocks", handle) or []
        clocks: set[int] = set()
        for mem_mhz in memory:
            sm = self._optional("nvmlDeviceGetSupportedGraphicsClocks", handle, mem_mhz)
            clocks.update(int(c) for c in sm or ())
        return tuple(sorted(clocks, reverse=True))

    def gpus(self) -> list[GpuInfo]:
        return list(self._info.values())

    def read(self, now: datetime) -> list[Reading]:
        """One reading per GPU whose draw NVML can read. What else a GPU cannot report is
        None (utilisation under MIG, a board without a temperature sensor); a GPU whose
        draw cannot be read this tick (lost from the bus, a driver reset) is left out of
        it with one warning, and the others are read: one GPU's error must not stop the
        agent, which would stop every job on the node."""
        nvml, optional = self._nvml, self._optional
        readings = []
        for index, info in self._info.items():
            handle = self._handles[index]
            try:
                power_mw = nvml.nvmlDeviceGetPowerUsage(handle)
            except nvml.NVMLError as exc:
                if info.uuid not in self._unreadable:
                    log.warning("GPU %s: NVML cannot read its draw, left out: %s", info.uuid, exc)
                    self._unreadable.add(info.uuid)
                continue
            if info.uuid in self._unreadable:
                log.warning("GPU %s: its draw reads again", info.uuid)
                self._unreadable.discard(info.uuid)
            energy_mj = optional("nvmlDeviceGetTotalEnergyConsumption", handle)
            util = optional("nvmlDeviceGetUtilizationRates", handle)
            memory = optional("nvmlDeviceGetMemoryInfo", handle)
            temp = optional("nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)
            clock = optional("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM)
            limit_mw = optional("nvmlDeviceGetEnforcedPowerLimit", handle)
            readings.append(
                Reading(
                    gpu_uuid=info.uuid,
                    ts=now,
                    power_w=power_mw / 1000.0,
                    energy_j=None if energy_mj is None else energy_mj / 1000.0,
                    util_pct=None if util is None else float(util.gpu),
                    mem_used_mib=None if memory is None else memory.used / (1024 * 1024),
                    temp_c=None if temp is None else float(temp),
                    sm_clock_mhz=None if clock is None else int(clock),
                    power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
                )
            )
        return readings

    # --- settings -----------------------------------------------------------------------

    def apply_settings(
        self, index: int, *, sm_clock_mhz: int | None, power_limit_w: float | None
    ) -> None:
        """Set the GPU's power limit and lock its SM clock; a None setting is the GPU's own
        (what it had before the agent changed it). Each setting is tried whatever the other
        did; what the driver refused is raised afterwards, as one ``SettingsRefused``."""
        handle = self._handles[index]
        info = self._site_cap_now(index)
        sm_clock_mhz, power_limit_w = capped_settings(
            info, sm_clock_mhz=sm_clock_mhz, power_limit_w=power_limit_w
        )
        errors: list[str] = []
        # A board registered at a fixed limit (no range from NVML) cannot have it set.
        fixed = info.max_power_limit_w is not None and (
            info.min_power_limit_w == info.max_power_limit_w
        )
        nvml = self._nvml
        if power_limit_w is not None and not fixed:
            before = None  # what to put back, read at its first change only
            if not self._has(info.uuid, "limit_mw"):
                # the limit set now (a site's cap), else the default
                before = self._optional("nvmlDeviceGetPowerManagementLimit", handle)
                if before is None and info.default_power_limit_w is not None:
                    before = info.default_power_limit_w * 1000.0
            set_mw = int(round(power_limit_w * 1000))
            refused = self._change(
                info, "limit_mw", None if before is None else int(before),
                f"power limit {power_limit_w:g} W",
                lambda: nvml.nvmlDeviceSetPowerManagementLimit(handle, set_mw),
            )  # fmt: skip
            if not refused and self._has(info.uuid, "limit_mw"):
                self._set_mw[info.uuid] = set_mw
            errors += refused
        elif power_limit_w is None:
            errors += self._put_back_limit(info, handle)
        if sm_clock_mhz is not None:
            # Lock min = max: the frequency the perf model was asked about, not a range.
            errors += self._change(
                info, "locked", True, f"SM clock {sm_clock_mhz} MHz",
                lambda: nvml.nvmlDeviceSetGpuLockedClocks(
                    handle, int(sm_clock_mhz), int(sm_clock_mhz)
                ),
            )  # fmt: skip
        else:
            errors += self._unlock(info, handle)
        if errors:
            raise SettingsRefused(f"GPU {info.uuid}: " + "; ".join(errors))

    def restore_defaults(self, index: int) -> None:
        """Put back what the agent changed on this GPU (a refusal is logged); a GPU it never
        changed is left alone: a non-root agent or a board without power management would
        otherwise warn at every job's end."""
        info = self._info.get(index)
        if info is None or info.uuid not in self._changed:
            return
        handle = self._handles[index]
        info = self._site_cap_now(index)  # (a limit the site set meanwhile is left)
        for message in self._unlock(info, handle) + self._put_back_limit(info, handle):
            log.warning("GPU %s: could not put back %s", info.uuid, message)

    def close(self) -> None:
        for index in list(self._info):
            self.restore_defaults(index)
        self._nvml.nvmlShutdown()

    def _has(self, uuid: str, key: str) -> bool:
        return key in self._changed.get(uuid, {})

    def _change(
        self, info: GpuInfo, key: str, put_back: Any, what: str, setting: Callable[[], Any]
    ) -> list[str]:
        """Apply ``setting`` to a GPU, noting ``put_back`` under ``key`` first unless a
        change of it is noted already (an agent killed in between knows what to put back;
        None: nothing to note); a refusal's message returned, and a note it made dropped."""
        first = put_back is not None and not self._has(info.uuid, key)
        if first:
            self._note(info.uuid, **{key: put_back})
        try:
            setting()
        except self._nvml.NVMLError as exc:
            if first:
                self._note(info.uuid, **{key: None})  # nothing changed
            return [f"{what}: {exc}"]
        return []

    def _put_back_limit(self, info: GpuInfo, handle: Any) -> list[str]:
        """Put back the limit the GPU had before the agent changed it (a refusal's message
        returned; the change is then kept, to be tried again)."""
        if not self._has(info.uuid, "limit_mw"):
            return []
        limit_mw = int(self._changed[info.uuid]["limit_mw"])
        return self._put_back(
            info, "limit_mw", f"its power limit, {limit_mw / 1000.0:g} W",
            lambda: self._nvml.nvmlDeviceSetPowerManagementLimit(handle, limit_mw),
        )  # fmt: skip

    def _unlock(self, info: GpuInfo, handle: Any) -> list[str]:
        return self._put_back(
            info, "locked", "its unlocked clock",
            lambda: self._nvml.nvmlDeviceResetGpuLockedClocks(handle),
        )  # fmt: skip

    def _put_back(self, info: GpuInfo, key: str, what: str, action: Callable[[], Any]) -> list[str]:
        """Undo the change noted under ``key`` with ``action`` and forget it; where the
        driver refuses, its message is returned and the note kept (tried again later)."""
        if not self._has(info.uuid, key):
            return []
        try:
            action()
        except self._nvml.NVMLError as exc:
            return [f"{what}: {exc}"]
        self._note(info.uuid, **{key: None})
        return []

    def _note(self, uuid: str, **change: Any) -> None:
        """Record a change (a value of None or False: put back) and keep it on disk."""
        entry = self._changed.setdefault(uuid, {})
        for key, value in change.items():
            if value is None or value is False:
                entry.pop(key, None)
                if key == "limit_mw":
                    self._set_mw.pop(uuid, None)  # none of its limits in force
            else:
                entry[key] = value
        if not entry:
            del self._changed[uuid]
        self._save()

    def _save(self) -> None:
        """Keep what was changed on disk. A write that fails is logged and the agent goes
        on: the settings themselves were put back (or set) all the same, and a shutdown
        must still put back the other GPUs and send its events."""
        if self._state_file is None:
            return
        tmp = self._state_file.with_name(self._state_file.name + ".tmp")
        try:
            tmp.write_text(json.dumps(self._changed, sort_keys=True))
            os.replace(tmp, self._state_file)
        except OSError as exc:
            log.warning("cannot keep the GPU settings changed in %s: %s", self._state_file, exc)

    def _put_back_what_was_left(self) -> None:
        """Put back what an agent that did not shut down cleanly left changed (its state
        file). An entry of a GPU not described this time (lost for the moment) is kept for
        the next start; an entry that is not what this class writes is dropped."""
        if self._state_file is None or not self._state_file.exists():
            return
        try:
            left = json.loads(self._state_file.read_text())
        except (OSError, ValueError) as exc:
            log.warning("cannot read %s, nothing put back: %s", self._state_file, exc)
            left = {}
        for uuid, entry in left.items() if isinstance(left, dict) else ():
            kept = {}
            if isinstance(entry, dict):
                limit = entry.get("limit_mw")
                if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
                    kept["limit_mw"] = limit
                if entry.get("locked") is True:
                    kept["locked"] = True
            if kept:
                self._changed[str(uuid)] = kept
            else:
                log.warning("%s: an unreadable entry for GPU %s, dropped", self._state_file, uuid)
        for index, info in self._info.items():
            if info.uuid in self._changed:
                log.warning("GPU %s: putting back the settings a previous agent left", info.uuid)
                self.restore_defaults(index)
        self._save()


def _text(value: str | bytes) -> str:
    # Older nvidia-ml-py releases return bytes.
    return value.decode() if isinstance(value, bytes) else value


# NVML product names -> GPU model keys, the perf catalog's for the models it has. The vendor's
# brand words and the tokens that name a board's memory, form factor, variant, vGPU profile
# or MIG slice are dropped; what is left is the model ("NVIDIA A100-SXM4-80GB" -> A100,
# "NVIDIA H100 80GB HBM3" -> H100, "GRID V100-16Q" -> V100, "NVIDIA H200" -> H200, "Quadro
# RTX 6000" -> RTX6000). Model codes are written together, as the catalog writes them; a name
# with an ordinary word left is kept spaced as NVML spells it ("RTX 6000 Ada Generation" is
# not the RTX6000).
#
# Three board tokens are kept, each as a suffix, because each names a card with another
# power range (and so other speeds and draws) than the model's SXM board, which is the one a
# catalog entry or a profile of the bare key was measured on:
# - the PCIe form factor, ``-PCIe`` ("NVIDIA A100-PCIE-40GB" -> A100-PCIe): an A100 PCIe
#   is 250-300 W against the SXM4's 400 W (the catalog's A100), an H100 PCIe 350 W against
#   700 W;
# - the full-height half-length board, ``-FHHL`` ("Tesla V100-FHHL-16GB" -> V100-FHHL): a
#   150 W card against the V100 SXM2's 300 W and the V100 PCIe's 250 W;
# - the NVL board, ``-NVL`` ("NVIDIA H100 NVL" -> H100-NVL): a 350-400 W dual-slot PCIe
#   card with 94 GB, against the H100 SXM's 700 W and 80 GB (and not the 350 W, 80 GB
#   H100 PCIe either).
# Keyed as the bare model, such a board shared everything the service keeps by GPU model
# with the SXM one: its catalog entry, called measured; the learned workload profiles; the
# NVML power range the round reads from the model's first registered GPU (a 150 W FHHL
# board offered the SXM2's 300 W limits, or the other way round); its idle draw; and jobs
# asking for the model were placed on either. As a model of its own it gets the estimated
# prior any GPU model the catalog lacks gets (``scheduling.core.gpu_estimates``), from the
# range NVML reports. The other board tokens stay dropped: they name memory sizes, vGPU
# profiles and MIG slices of one board, or boards with the SXM board's power (a V100-DGXS
# is an SXM2 V100 at 300 W in a DGX Station).
_BRANDS = frozenset({"NVIDIA", "TESLA", "QUADRO", "GEFORCE", "GRID"})
_BOARD_TOKEN = re.compile(
    r"\d+(\.\d+)?[GT]B|SXM\d*|PCIE|HBM\d*E?|NVL|NVLINK|DGXS|FHHL|LS|PASSIVE|\d+[QCAB]",
    re.IGNORECASE,
)


def _code_like(word: str) -> bool:
    """A token of a model code: capitals and digits, or with a digit, or a suffix (Ti)."""
    return word.isalnum() and (
        word.upper() == word or any(c.isdigit() for c in word) or len(word) <= 2
    )


PCIE_SUFFIX = "-PCIe"
# NVML's token (upper case) -> the key's suffix, in the order one is looked for: a name
# keeps one suffix, the first of these its words hold.
BOARD_SUFFIXES = {"PCIE": PCIE_SUFFIX, "FHHL": "-FHHL", "NVL": "-NVL"}


def gpu_model_key(product_name: str) -> str:
    """Map an NVML product name (``NVIDIA A100-SXM4-40GB``) to a GPU model key (``A100``;
    ``A100-PCIe`` for ``NVIDIA A100-PCIE-40GB``, ``V100-FHHL``, ``H100-NVL``: see
    ``BOARD_SUFFIXES``). A key maps to itself."""
    name = product_name.strip()
    words = re.split(r"[\s\-]+", name.split(" MIG ")[0])
    kept = [w for w in words if w and w.upper() not in _BRANDS and not _BOARD_TOKEN.fullmatch(w)]
    if not kept:
        return name
    tokens = {w.upper() for w in words}
    suffix = next((s for token, s in BOARD_SUFFIXES.items() if token in tokens), "")
    if all(_code_like(w) for w in kept):
        return "".join(kept) + suffix
    return " ".join(kept) + suffix


def is_board_split(before: str, after: str) -> bool:
    """True where GPU model key ``after`` is ``before``'s board of its own (``A100`` ->
    ``A100-PCIe``, ``V100`` -> ``V100-FHHL``, ``H100`` -> ``H100-NVL``): a GPU registered
    under ``before`` by a server that dropped the board token (see ``BOARD_SUFFIXES``). Once
    moved, a board does not move back, nor to another board."""
    suffixes = BOARD_SUFFIXES.values()
    return not before.endswith(tuple(suffixes)) and any(after == before + s for s in suffixes)
