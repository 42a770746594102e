"""The NVML backend against a fake of the ``pynvml`` functions (never a GPU in tests).

The fake is a plain module-like object with the handful of NVML functions the backend calls;
it keeps per-device state in NVML's own units (mW, mJ, bytes) so unit conversion is tested,
and it uses pynvml's real error class and constants.
"""

import json
from datetime import UTC, datetime
from types import SimpleNamespace

import pynvml
import pytest

from telemetry.agent.backends import NoUsableGpu, NvmlBackend, SettingsRefused, gpu_model_key


class FakeNvml:
    NVMLError = pynvml.NVMLError
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU

    def __init__(self, devices):
        self.devices = devices
        self.calls = []
        self.initialised = False

    def _unsupported(self):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    @staticmethod
    def _may_fail(h, name):
        """Raise the NVML error the test set for this device and function, if any."""
        code = h.get("fail", {}).get(name)
        if code is not None:
            raise pynvml.NVMLError(code)

    def nvmlInit(self):
        self.initialised = True

    def nvmlShutdown(self):
        self.initialised = False

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._may_fail(self.devices[index], "nvmlDeviceGetHandleByIndex")
        return self.devices[index]

    def nvmlDeviceGetUUID(self, h):
        self._may_fail(h, "nvmlDeviceGetUUID")
        return h["uuid"]

    def nvmlDeviceGetMigMode(self, h):
        if h.get("mig") is None:
            self._unsupported()  # boards without MIG
        return [h["mig"], h["mig"]]

    def nvmlDeviceGetName(self, h):
        return h["name"]

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=h["mem_total_b"], used=h["mem_used_b"])

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        self._may_fail(h, "nvmlDeviceGetPowerManagementDefaultLimit")
        return h["default_limit_mw"]

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        self._may_fail(h, "nvmlDeviceGetPowerManagementLimitConstraints")
        return h["limits_mw"]

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        assert clock == pynvml.NVML_CLOCK_SM
        return h["max_clock"]

    def nvmlDeviceGetSupportedMemoryClocks(self, h):
        if h.get("sm_clocks") is None:
            self._unsupported()
        return list(h["sm_clocks"])

    def nvmlDeviceGetSupportedGraphicsClocks(self, h, memory_clock_mhz):
        return list(h["sm_clocks"][memory_clock_mhz])

    def nvmlDeviceGetPowerUsage(self, h):
        self._may_fail(h, "nvmlDeviceGetPowerUsage")
        return h["power_mw"]

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if h["energy_mj"] is None:
            self._unsupported()
        return h["energy_mj"]

    def nvmlDeviceGetUtilizationRates(self, h):
        self._may_fail(h, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=h["util"], memory=0)

    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        self._may_fail(h, "nvmlDeviceGetTemperature")
        return h["temp"]

    def nvmlDeviceGetClockInfo(self, h, clock):
        self._may_fail(h, "nvmlDeviceGetClockInfo")
        return h["clock"]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        self._may_fail(h, "nvmlDeviceGetEnforcedPowerLimit")
        return h["limit_mw"]

    def nvmlDeviceGetPowerManagementLimit(self, h):
        self._may_fail(h, "nvmlDeviceGetPowerManagementLimit")
        return h["limit_mw"]

    def nvmlDeviceSetPowerManagementLimit(self, h, limit_mw):
        self._may_fail(h, "nvmlDeviceSetPowerManagementLimit")
        lo, hi = h["limits_mw"]
        if not lo <= limit_mw <= hi:  # as the driver answers a limit outside the range
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self.calls.append(("set_power_limit", h["uuid"], limit_mw))
        h["limit_mw"] = limit_mw

    def nvmlDeviceSetGpuLockedClocks(self, h, lo, hi):
        self._may_fail(h, "nvmlDeviceSetGpuLockedClocks")
        self.calls.append(("lock_clocks", h["uuid"], lo, hi))
        h["locked"] = (lo, hi)
        h["clock"] = hi

    def nvmlDeviceResetGpuLockedClocks(self, h):
        self._may_fail(h, "nvmlDeviceResetGpuLockedClocks")
        self.calls.append(("reset_clocks", h["uuid"]))
        h.pop("locked", None)
        h["clock"] = h["max_clock"]


def _device(uuid, *, energy_mj, sm_clocks=None):
    return {
        "sm_clocks": sm_clocks,  # memory clock -> SM clocks; None: NVML cannot list them
        "uuid": uuid,
        "name": b"NVIDIA A100-SXM4-40GB",
        "mem_total_b": 40 * 1024**3,
        "mem_used_b": 3 * 1024**3,
        "default_limit_mw": 400_000,
        "limits_mw": (100_000, 400_000),
        "max_clock": 1410,
        "power_mw": 251_500,
        "energy_mj": energy_mj,
        "util": 87,
        "temp": 61,
        "clock": 1410,
        "limit_mw": 400_000,
    }


@pytest.fixture
def fake():
    # Two memory clocks whose SM clock lists overlap (as NVML reports them: highest first).
    clocks = {1215: [1410, 1395, 1380, 210], 405: [420, 405, 210]}
    return FakeNvml(
        [
            _device("GPU-aaa", energy_mj=123_456_789, sm_clocks=clocks),
            _device("GPU-bbb", energy_mj=None),
        ]
    )


def test_registration_info_is_converted_to_watts_and_mib(fake):
    backend = NvmlBackend(nvml=fake)
    first = backend.gpus()[0]
    assert fake.initialised
    assert first.to_wire() == {
        "uuid": "GPU-aaa",
        "index": 0,
        "model": "A100",
        "memory_mb": 40960,
        "default_power_limit_w": 400.0,
        "min_power_limit_w": 100.0,
        "max_power_limit_w": 400.0,
        "max_sm_clock_mhz": 1410,
        "supported_sm_clocks_mhz": [1410, 1395, 1380, 420, 405, 210],
        # the limit it enforced at the start (no site cap: its top)
        "site_power_limit_w": 400.0,
    }


def test_a_gpu_that_cannot_list_its_clocks_registers_none(fake):
    second = NvmlBackend(nvml=fake).gpus()[1]
    assert second.supported_sm_clocks_mhz == ()
    assert second.to_wire()["supported_sm_clocks_mhz"] == []


def test_readings_convert_units_and_leave_out_a_missing_energy_counter(fake):
    backend = NvmlBackend(nvml=fake)
    now = datetime(2026, 11, 22, 3, 0, 1, tzinfo=UTC)
    with_counter, without = backend.read(now)
    assert with_counter.to_wire() == {
        "gpu_uuid": "GPU-aaa",
        "ts": "2026-11-22T03:00:01+00:00",
        "power_w": 251.5,
        "energy_j": 123456.789,
        "util_pct": 87.0,
        "mem_used_mib": 3072.0,
        "temp_c": 61.0,
        "sm_clock_mhz": 1410,
        "power_limit_w": 400.0,
    }
    assert without.gpu_uuid == "GPU-bbb"
    assert without.energy_j is None
    assert without.power_w == 251.5


def test_a_gpu_reports_none_for_what_nvml_cannot_read(fake):
    # given a GPU in MIG mode (NVML gives no utilisation for the whole board) on a board
    # without a readable temperature sensor or clock
    fake.devices[1]["fail"] = {
        "nvmlDeviceGetUtilizationRates": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetTemperature": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetClockInfo": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetEnforcedPowerLimit": pynvml.NVML_ERROR_NOT_SUPPORTED,
    }
    # then its reading carries its draw and memory, and None for the rest (the wire and
    # the server take null for each), and the other GPU reads whole
    _, mig = NvmlBackend(nvml=fake).read(datetime(2026, 11, 28, tzinfo=UTC))
    assert (mig.power_w, mig.mem_used_mib) == (251.5, 3072.0)
    assert (mig.util_pct, mig.temp_c, mig.sm_clock_mhz, mig.power_limit_w) == (None,) * 4


def test_a_gpu_whose_draw_cannot_be_read_is_left_out_with_one_warning(fake, caplog):
    # given a node whose second GPU fell off the bus
    backend = NvmlBackend(nvml=fake)
    fake.devices[1]["fail"] = {"nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_GPU_IS_LOST}
    t = datetime(2026, 11, 28, tzinfo=UTC)
    # then each tick reads the other GPU (the agent goes on; it stopped every job before)
    # and warns once, not every second
    with caplog.at_level("WARNING", logger="telemetry.agent.backends"):
        assert [r.gpu_uuid for r in backend.read(t)] == ["GPU-aaa"]
        assert [r.gpu_uuid for r in backend.read(t)] == ["GPU-aaa"]
        lost = [r for r in caplog.records if "cannot read its draw" in r.getMessage()]
        assert len(lost) == 1 and "GPU-bbb" in lost[0].getMessage()
        # and once it reads again, it is back, with a word in the log
        fake.devices[1]["fail"] = {}
        assert [r.gpu_uuid for r in backend.read(t)] == ["GPU-aaa", "GPU-bbb"]
        assert any("reads again" in r.getMessage() for r in caplog.records)


def test_a_board_without_power_management_registers_at_its_enforced_limit(fake):
    # given a board whose limit NVML cannot manage (no range, no default) but enforces
    fake.devices[1]["fail"] = {
        "nvmlDeviceGetPowerManagementDefaultLimit": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetPowerManagementLimitConstraints": pynvml.NVML_ERROR_NOT_SUPPORTED,
    }
    fake.devices[1]["limit_mw"] = 250_000
    wire = NvmlBackend(nvml=fake).gpus()[1].to_wire()
    # then it registers as a range of that one limit (the server refused a null range, so
    # the agent could not register the node at all)
    limits = [wire[k] for k in ("min_power_limit_w", "default_power_limit_w", "max_power_limit_w")]
    assert limits == [250.0, 250.0, 250.0]
    # and no limit is set on it (the driver would refuse), though clocks still are
    backend = NvmlBackend(nvml=fake)
    backend.apply_settings(1, sm_clock_mhz=1200, power_limit_w=300.0)
    assert fake.calls == [("lock_clocks", "GPU-bbb", 1200, 1200)]


def test_a_range_without_a_default_takes_the_enforced_limit_held_to_the_range(fake):
    # given a board with a limit range but no default, whose enforced limit is outside it
    fake.devices[1]["fail"] = {
        "nvmlDeviceGetPowerManagementDefaultLimit": pynvml.NVML_ERROR_NOT_SUPPORTED
    }
    fake.devices[1]["limit_mw"] = 450_000
    wire = NvmlBackend(nvml=fake).gpus()[1].to_wire()
    # then it registers min <= default <= max (the server refuses anything else)
    limits = [wire[k] for k in ("min_power_limit_w", "default_power_limit_w", "max_power_limit_w")]
    assert limits == [100.0, 400.0, 400.0]


def test_settings_are_applied_in_nvml_units_and_restored_on_close(fake):
    backend = NvmlBackend(nvml=fake)
    backend.apply_settings(1, sm_clock_mhz=1200, power_limit_w=250.0)
    assert fake.calls == [
        ("set_power_limit", "GPU-bbb", 250_000),
        ("lock_clocks", "GPU-bbb", 1200, 1200),
    ]
    reading = backend.read(datetime(2026, 11, 22, tzinfo=UTC))[1]
    assert (reading.power_limit_w, reading.sm_clock_mhz) == (250.0, 1200)
    fake.calls.clear()
    backend.close()
    # only the GPU that was changed is restored, to its default limit, then NVML shuts down
    assert fake.calls == [("reset_clocks", "GPU-bbb"), ("set_power_limit", "GPU-bbb", 400_000)]
    assert not fake.initialised


def test_restore_defaults_survives_a_driver_refusal(fake):
    backend = NvmlBackend(nvml=fake)

    def refuse(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    fake.nvmlDeviceResetGpuLockedClocks = refuse
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=300.0)
    backend.restore_defaults(0)
    assert fake.calls[-1] == ("set_power_limit", "GPU-aaa", 400_000)
    assert fake.devices[0]["limit_mw"] == 400_000


def test_a_setting_left_out_of_the_next_allocation_is_the_gpus_own_again(fake):
    # given a job retuned from a locked clock to a power limit alone, then to a clock alone
    backend = NvmlBackend(nvml=fake)
    backend.apply_settings(0, sm_clock_mhz=900, power_limit_w=None)
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=300.0)
    # then the clock is unlocked (the lock outlived the allocation that asked for it, and
    # the job's time and energy were learned as "clock free")
    assert "locked" not in fake.devices[0] and fake.devices[0]["limit_mw"] == 300_000
    backend.apply_settings(0, sm_clock_mhz=1200, power_limit_w=None)
    assert fake.devices[0]["locked"] == (1200, 1200)
    assert fake.devices[0]["limit_mw"] == 400_000  # its own limit back


def test_each_setting_is_tried_whatever_the_other_did(fake):
    # given a driver that refuses the limit
    fake.devices[0]["fail"] = {"nvmlDeviceSetPowerManagementLimit": pynvml.NVML_ERROR_NO_PERMISSION}
    backend = NvmlBackend(nvml=fake)
    with pytest.raises(SettingsRefused, match="power limit 300 W: Insufficient Permissions"):
        backend.apply_settings(0, sm_clock_mhz=1200, power_limit_w=300.0)
    # then the clock was locked all the same, and only it is put back
    assert fake.devices[0]["locked"] == (1200, 1200)
    fake.calls.clear()
    backend.restore_defaults(0)
    assert fake.calls == [("reset_clocks", "GPU-aaa")]


def test_what_is_put_back_is_what_the_gpu_had_not_the_boot_default(fake):
    # given a site's own cap of 300 W on both GPUs (nvidia-smi -pl), and a job at 250 W
    for device in fake.devices:
        device["limit_mw"] = 300_000
    backend = NvmlBackend(nvml=fake)
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=250.0)
    fake.calls.clear()
    backend.restore_defaults(0)
    backend.restore_defaults(1)  # a GPU the agent never changed
    backend.close()
    # then the cap is back (the boot default of 400 W raised it), and the other GPU was not
    # touched: a non-root agent or a board without power management warned at every job
    assert fake.calls == [("set_power_limit", "GPU-aaa", 300_000)]


def test_a_sites_cap_is_read_at_the_start_registered_and_never_raised(fake):
    # given a site that capped GPU 0 at 300 W with nvidia-smi -pl (its default is 400 W)
    fake.devices[0]["limit_mw"] = 300_000
    backend = NvmlBackend(nvml=fake)

    # then the agent registers the cap, and GPU 1's enforced limit, its top, as its own
    capped, free = (g.to_wire() for g in backend.gpus())
    assert capped["site_power_limit_w"] == 300.0
    assert capped["default_power_limit_w"] == 400.0  # the board's, registered as before
    assert free["site_power_limit_w"] == 400.0
    assert fake.calls == []  # read only: nothing was set to read it

    # when a job asks for 350 W, then for no limit, then for 250 W
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=350.0)
    # then no limit above the cap is set: 300 W, not the 350 W asked (the board's 400 W
    # default replaced the cap before, while a job told no limit or its default ran)
    assert fake.devices[0]["limit_mw"] == 300_000
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=None)
    assert fake.devices[0]["limit_mw"] == 300_000
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=250.0)
    assert fake.devices[0]["limit_mw"] == 250_000

    # and at the job's end, and at the agent's exit, the cap is what is put back
    backend.restore_defaults(0)
    assert fake.devices[0]["limit_mw"] == 300_000
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=200.0)
    backend.close()
    assert fake.devices[0]["limit_mw"] == 300_000
    assert all(c[2] <= 300_000 for c in fake.calls if c[:2] == ("set_power_limit", "GPU-aaa"))


def test_a_cap_the_site_changes_while_the_agent_runs_is_the_one_held(fake):
    # given an agent started under a 300 W cap on GPU 0
    fake.devices[0]["limit_mw"] = 300_000
    backend = NvmlBackend(nvml=fake)
    # when, with no job's limit set, the site lowers the cap to 200 W (nvidia-smi -pl 200)
    fake.devices[0]["limit_mw"] = 200_000
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=280.0)
    # then the job's 280 W is held to the cap in force, not the one read at the start
    # (the agent set 280 W over the site's 200 W before)
    assert fake.devices[0]["limit_mw"] == 200_000
    assert backend.gpus()[0].site_power_limit_w == 200.0
    # and the cap is what is put back
    backend.restore_defaults(0)
    assert fake.devices[0]["limit_mw"] == 200_000
    # when the site lifts it to 350 W, a job's 340 W is set (not held to 200 W or 300 W)
    fake.devices[0]["limit_mw"] = 350_000
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=340.0)
    assert fake.devices[0]["limit_mw"] == 340_000
    # and while the agent's own limit is in force, it is not read as the cap: the next
    # retune is held to 350 W, and the put-back is 350 W
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=400.0)
    assert fake.devices[0]["limit_mw"] == 350_000
    backend.close()
    assert fake.devices[0]["limit_mw"] == 350_000


def test_a_cap_the_site_sets_while_a_jobs_limit_is_in_force_is_not_put_back_over(fake, tmp_path):
    # given an agent started under a 300 W cap, running a job at 280 W on GPU 0
    fake.devices[0]["limit_mw"] = 300_000
    state = tmp_path / "gpu_settings.json"
    backend = NvmlBackend(nvml=fake, state_file=state)
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=280.0)
    # when the site sets 200 W meanwhile (nvidia-smi -pl 200), and the job is retuned to 250 W
    fake.devices[0]["limit_mw"] = 200_000
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=250.0)
    # then the retune is held to the site's 200 W (250 W was set over it before)
    assert fake.devices[0]["limit_mw"] == 200_000
    assert backend.gpus()[0].site_power_limit_w == 200.0
    # and at the job's end the 200 W stays: the 300 W of the start is not put back over it
    backend.restore_defaults(0)
    assert fake.devices[0]["limit_mw"] == 200_000
    # when a later job runs at 150 W and the site sets 180 W while it runs, the agent's
    # exit leaves the 180 W (and its state file nothing to put back)
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=150.0)
    assert fake.devices[0]["limit_mw"] == 150_000
    fake.devices[0]["limit_mw"] = 180_000
    backend.close()
    assert fake.devices[0]["limit_mw"] == 180_000
    assert json.loads(state.read_text()) == {}
    # and the agent's own limit, unchanged by the site, is still put back as before
    fake.devices[0]["limit_mw"] = 300_000
    again = NvmlBackend(nvml=fake, state_file=state)
    again.apply_settings(0, sm_clock_mhz=None, power_limit_w=222.0)
    again.apply_settings(0, sm_clock_mhz=None, power_limit_w=240.0)
    assert fake.devices[0]["limit_mw"] == 240_000
    again.close()
    assert fake.devices[0]["limit_mw"] == 300_000


def test_a_cap_is_read_after_what_a_killed_agent_left_is_put_back(fake, tmp_path):
    # given a site's 300 W cap, and an agent killed while its job ran GPU 1 at 222 W
    state = tmp_path / "gpu_settings.json"
    fake.devices[1]["limit_mw"] = 300_000
    NvmlBackend(nvml=fake, state_file=state).apply_settings(
        1, sm_clock_mhz=None, power_limit_w=222.0
    )
    assert fake.devices[1]["limit_mw"] == 222_000
    # when the next agent starts, it registers the site's cap, not the job's limit
    assert NvmlBackend(nvml=fake, state_file=state).gpus()[1].site_power_limit_w == 300.0
    # and where the driver refuses to put it back, the limit noted as the GPU's own is
    # the cap (the 222 W left in force is not)
    NvmlBackend(nvml=fake, state_file=state).apply_settings(
        1, sm_clock_mhz=None, power_limit_w=222.0
    )
    fake.devices[1]["fail"] = {"nvmlDeviceSetPowerManagementLimit": pynvml.NVML_ERROR_NO_PERMISSION}
    assert NvmlBackend(nvml=fake, state_file=state).gpus()[1].site_power_limit_w == 300.0
    assert fake.devices[1]["limit_mw"] == 222_000


@pytest.mark.parametrize(
    ("enforced", "fail"),
    [(400_000, pynvml.NVML_ERROR_NOT_SUPPORTED), (90_000, None), (450_000, None)],
    ids=["unreadable", "below-its-bottom", "above-its-top"],
)
def test_an_enforced_limit_unread_or_outside_the_range_registers_no_cap(fake, enforced, fail):
    # (the server refuses a cap outside min..max; an agent that sent one could not register)
    fake.devices[0]["limit_mw"] = enforced
    if fail is not None:
        fake.devices[0]["fail"] = {"nvmlDeviceGetEnforcedPowerLimit": fail}
    info = NvmlBackend(nvml=fake).gpus()[0]
    assert info.site_power_limit_w is None
    assert "site_power_limit_w" not in info.to_wire()
    # and limits are held to the GPU's range, as before
    backend = NvmlBackend(nvml=fake)
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=380.0)
    assert ("set_power_limit", "GPU-aaa", 380_000) in fake.calls


def test_an_agent_started_after_one_was_killed_puts_back_what_it_left(fake, tmp_path):
    # given an agent that changed GPU 1 and was killed (no close)
    state = tmp_path / "gpu_settings.json"
    killed = NvmlBackend(nvml=fake, state_file=state)
    killed.apply_settings(1, sm_clock_mhz=900, power_limit_w=222.0)
    assert fake.devices[1]["locked"] == (900, 900)
    # when the next agent starts on the node
    fake.calls.clear()
    NvmlBackend(nvml=fake, state_file=state)
    # then it unlocks the clock and puts the limit back before any job runs, and forgets it
    assert fake.calls == [("reset_clocks", "GPU-bbb"), ("set_power_limit", "GPU-bbb", 400_000)]
    assert json.loads(state.read_text()) == {}


def test_what_was_left_on_a_gpu_lost_for_a_start_is_put_back_at_the_next(fake, tmp_path):
    state = tmp_path / "gpu_settings.json"
    NvmlBackend(nvml=fake, state_file=state).apply_settings(
        1, sm_clock_mhz=900, power_limit_w=222.0
    )
    # when the next agent starts while GPU 1 cannot be described, and the one after with it
    fake.devices[1]["fail"] = {"nvmlDeviceGetUUID": pynvml.NVML_ERROR_GPU_IS_LOST}
    NvmlBackend(nvml=fake, state_file=state)
    fake.devices[1]["fail"] = {}
    NvmlBackend(nvml=fake, state_file=state)
    # then the third puts it back (the second had forgotten it: changed until a reboot)
    assert "locked" not in fake.devices[1] and fake.devices[1]["limit_mw"] == 400_000
    assert json.loads(state.read_text()) == {}


def test_a_state_file_that_cannot_be_written_or_read_stops_nothing(fake, tmp_path, caplog):
    # given an agent whose work dir went away after it changed both GPUs
    work = tmp_path / "work"
    work.mkdir()
    backend = NvmlBackend(nvml=fake, state_file=work / "gpu_settings.json")
    for index in (0, 1):
        backend.apply_settings(index, sm_clock_mhz=900, power_limit_w=250.0)
    (work / "gpu_settings.json").unlink()
    work.rmdir()
    # then closing still puts back every GPU and shuts NVML down (it stopped at the first)
    backend.close()
    assert [("locked" in d, d["limit_mw"]) for d in fake.devices] == [(False, 400_000)] * 2
    assert not fake.initialised
    assert "cannot keep the GPU settings changed" in caplog.text
    # and an entry this class does not write is dropped with a warning, not a crash
    state = tmp_path / "odd.json"
    state.write_text(json.dumps({"GPU-aaa": {"limit_mw": None}, "GPU-bbb": [1]}))
    NvmlBackend(nvml=fake, state_file=state)
    assert fake.initialised and json.loads(state.read_text()) == {}
    assert "an unreadable entry for GPU GPU-aaa, dropped" in caplog.text


def test_a_gpu_in_mig_mode_is_left_out_with_a_warning(fake, caplog):
    # given GPU 0 in MIG mode (its slices are CUDA devices of their own) and GPU 1 with MIG
    # off: a job given GPU 0's index would see no device
    fake.devices[0]["mig"] = pynvml.NVML_DEVICE_MIG_ENABLE
    fake.devices[1]["mig"] = pynvml.NVML_DEVICE_MIG_DISABLE
    backend = NvmlBackend(nvml=fake)
    assert [g.uuid for g in backend.gpus()] == ["GPU-bbb"]
    assert "GPU GPU-aaa: MIG mode is on; left out" in caplog.text
    # and a node whose GPUs are all in MIG mode says so (it registered no GPU at all)
    fake.devices[1]["mig"] = pynvml.NVML_DEVICE_MIG_ENABLE
    with pytest.raises(NoUsableGpu, match=r"every GPU here is in MIG mode \(2\)"):
        NvmlBackend(nvml=fake)
    assert not fake.initialised


def test_a_gpu_nvml_cannot_describe_is_left_out_and_the_others_run(fake, caplog):
    # given one GPU hidden from the agent (a cgroup) and a node where none is usable
    fake.devices[0]["fail"] = {"nvmlDeviceGetHandleByIndex": pynvml.NVML_ERROR_NO_PERMISSION}
    backend = NvmlBackend(nvml=fake)
    assert [(g.index, g.uuid) for g in backend.gpus()] == [(1, "GPU-bbb")]
    assert [r.gpu_uuid for r in backend.read(datetime(2026, 11, 22, tzinfo=UTC))] == ["GPU-bbb"]
    backend.apply_settings(1, sm_clock_mhz=1200, power_limit_w=None)
    assert fake.devices[1]["locked"] == (1200, 1200)
    assert "GPU 0: NVML cannot describe it, left out" in caplog.text
    fake.devices[1]["fail"] = {"nvmlDeviceGetUUID": pynvml.NVML_ERROR_GPU_IS_LOST}
    with pytest.raises(pynvml.NVMLError):
        NvmlBackend(nvml=fake)
    assert not fake.initialised  # shut down again


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA A40", "A40"),
        ("Quadro RTX 6000", "RTX6000"),
        # a PCIe board is a model of its own: another power range (an A100 PCIe: 250-300 W
        # against the SXM4's 400 W) and speed than the SXM board the catalog measured
        ("Tesla P100-PCIE-16GB", "P100-PCIe"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIe"),
        ("NVIDIA A100-PCIE-40GB", "A100-PCIe"),
        ("NVIDIA A100-PCIE-40GB MIG 1g.5gb", "A100-PCIe"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "A100"),
        ("NVIDIA H100 80GB HBM3", "H100"),  # what the H100 machines here reported
        # the NVL board (350-400 W, 94 GB) is not the 700 W SXM H100 nor the H100 PCIe
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("H100-NVL", "H100-NVL"),
        # models the catalog lacks keep their own model code, not the product name
        ("NVIDIA H200", "H200"),  # what the H200 machine here reported
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("NVIDIA RTX A6000", "RTXA6000"),
        ("Tesla V100S-PCIE-32GB", "V100S-PCIe"),  # not a V100: 250 W, other clocks
        ("Tesla V100-DGXS-32GB", "V100"),
        # a 150 W card, not the 300 W SXM2 V100 (nor the 250 W V100 PCIe)
        ("Tesla V100-FHHL-16GB", "V100-FHHL"),
        ("V100-FHHL", "V100-FHHL"),
        ("Tesla V100-PCIE-16GB", "V100-PCIe"),
        ("Tesla V100-SXM2-32GB-LS", "V100"),
        ("Quadro RTX 6000 Passive", "RTX6000"),
        # vGPU guests: the profile suffix is not the model
        ("GRID V100-16Q", "V100"),
        ("GRID T4-16Q", "T4"),
        ("NVIDIA A100-40C", "A100"),
        ("NVIDIA A800 80GB PCIe", "A800-PCIe"),
        ("NVIDIA GeForce RTX 3090 Ti", "RTX3090Ti"),
        ("NVIDIA GeForce GTX 1080 Ti", "GTX1080Ti"),
        ("NVIDIA Graphics Device", "Graphics Device"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada Generation"),  # not the RTX6000
        ("Some Future GPU", "Some Future GPU"),
        ("  NVIDIA  ", "NVIDIA"),
    ],
)
def test_nvml_product_names_map_to_perf_catalog_keys(name, key):
    assert gpu_model_key(name) == key
    assert gpu_model_key(key) == key  # a key maps to itself (the server maps what it gets)
