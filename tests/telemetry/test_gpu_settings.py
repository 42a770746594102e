"""GPU settings held to what the GPU registered (``max_sm_clock_mhz``, the power-limit range),
and the NVML calls that set and restore them, against the fake of ``test_nvml_backend``."""

import inspect

import pynvml
import pytest
from test_nvml_backend import FakeNvml, _device

from telemetry.agent.backends import GpuInfo, NvmlBackend, capped_settings
from telemetry.agent.simulated import SimulatedBackend, gpu_spec

GPU = GpuInfo(
    uuid="GPU-x", index=0, model="A100", memory_total_mib=None, default_power_limit_w=400.0,
    min_power_limit_w=100.0, max_power_limit_w=400.0, max_sm_clock_mhz=1410,
)  # fmt: skip


@pytest.mark.parametrize(
    ("asked", "applied"),
    [
        ((1200, 250.0), (1200, 250.0)),
        ((1410, 400.0), (1410, 400.0)),
        ((1980, None), (1410, None)),  # above the GPU's maximum clock: its maximum
        ((None, 700.0), (None, 400.0)),  # above the range: its top
        ((None, 40.0), (None, 100.0)),  # below the range: its bottom
        ((None, None), (None, None)),  # nothing asked: nothing changed
    ],
)
def test_settings_are_held_to_what_the_gpu_registered(asked, applied):
    clock, limit = asked
    assert capped_settings(GPU, sm_clock_mhz=clock, power_limit_w=limit) == applied


def test_a_gpu_that_registered_no_bounds_gets_what_was_asked():
    unknown = GpuInfo("GPU-y", 0, "T4", None, None, None, None, None)
    assert capped_settings(unknown, sm_clock_mhz=5000, power_limit_w=9.0) == (5000, 9.0)


def test_nvml_backend_locks_the_capped_clock_and_the_held_power_limit():
    fake = FakeNvml([_device("GPU-aaa", energy_mj=0)])
    backend = NvmlBackend(nvml=fake)
    backend.apply_settings(0, sm_clock_mhz=2100, power_limit_w=900.0)
    assert fake.calls == [
        ("set_power_limit", "GPU-aaa", 400_000),
        ("lock_clocks", "GPU-aaa", 1410, 1410),
    ]
    fake.calls.clear()
    backend.restore_defaults(0)
    assert fake.calls == [("reset_clocks", "GPU-aaa"), ("set_power_limit", "GPU-aaa", 400_000)]


def test_the_fake_only_offers_functions_the_real_pynvml_has_with_their_arguments():
    # The backend is only ever run against the fake in CI: a name or argument count the real
    # module does not have would pass here and fail on the first real GPU.
    names = [n for n in vars(FakeNvml) if n.startswith("nvml")]
    assert {
        "nvmlDeviceSetPowerManagementLimit",
        "nvmlDeviceGetPowerManagementDefaultLimit",
        "nvmlDeviceGetPowerManagementLimitConstraints",
        "nvmlDeviceSetGpuLockedClocks",
        "nvmlDeviceResetGpuLockedClocks",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetMaxClockInfo",
    } <= set(names)
    for name in names:
        fake_params = list(inspect.signature(getattr(FakeNvml, name)).parameters)[1:]
        # the real function takes the fake's positional arguments (bind raises if not)
        inspect.signature(getattr(pynvml, name)).bind(*fake_params)


def test_the_simulated_backend_holds_settings_to_the_catalogs_range():
    backend = SimulatedBackend(node_name="n", n_gpus=1, gpu_model="A100")
    spec = gpu_spec("A100")
    backend.apply_settings(0, sm_clock_mhz=99_999, power_limit_w=1.0)
    assert backend.settings == {0: (max(spec.clocks_mhz), float(spec.power_limit_min_w))}
    # a clock no longer asked for is the GPU's own again (unlocked), as on NVML
    backend.apply_settings(0, sm_clock_mhz=None, power_limit_w=300.0)
    assert backend.settings == {0: (None, 300.0)}
    backend.restore_defaults(0)
    assert backend.settings == {}


def test_the_nvml_check_sets_and_restores_one_gpu_and_prints_what_it_read():
    import io

    from telemetry.agent.nvml_check import run

    fake = FakeNvml([_device("GPU-aaa", energy_mj=5_000), _device("GPU-bbb", energy_mj=None)])
    out = io.StringIO()
    assert run(fake, gpu=1, samples=2, out=out, pause_s=0) == 0
    assert fake.calls == [
        ("set_power_limit", "GPU-bbb", 250_000),  # the middle of 100..400 W
        ("lock_clocks", "GPU-bbb", 987, 987),  # 70 % of 1410 MHz
        ("reset_clocks", "GPU-bbb"),
        ("set_power_limit", "GPU-bbb", 400_000),
    ]
    text = out.getvalue()
    assert text.startswith("2 GPU(s)\n")
    assert text.count("GPU-aaa: 251.5 W, energy counter 5.0 J") == 2
    assert "SM 987 MHz, limit 250.0 W" in text
    assert text.rstrip().endswith("SM 1410 MHz, limit 400.0 W")
    assert not fake.initialised


def test_the_nvml_check_read_only_reads_every_gpu_and_changes_nothing():
    import io

    from telemetry.agent.nvml_check import run

    fake = FakeNvml([_device("GPU-aaa", energy_mj=5_000)])
    out = io.StringIO()
    assert run(fake, gpu=0, samples=2, out=out, pause_s=0, read_only=True) == 0
    assert fake.calls == []
    assert fake.devices[0]["limit_mw"] == 400_000
    text = out.getvalue()
    assert text.count("GPU-aaa: 251.5 W, energy counter 5.0 J") == 2
    assert text.rstrip().endswith("GPU 0: read-only, its power limit and clocks left as they are")
    assert not fake.initialised


def test_the_nvml_check_reports_a_driver_refusal_and_exits_1():
    import io

    from telemetry.agent.nvml_check import run

    fake = FakeNvml([_device("GPU-aaa", energy_mj=0)])

    def refuse(handle, low, high):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    fake.nvmlDeviceSetGpuLockedClocks = refuse
    out = io.StringIO()
    assert run(fake, gpu=0, samples=0, out=out, pause_s=0) == 1
    assert "refused: SettingsRefused" in out.getvalue()
    assert "SM clock 987 MHz: Insufficient Permissions" in out.getvalue()
    # the limit was set all the same (each setting is tried alone) and put back
    assert ("set_power_limit", "GPU-aaa", 250_000) in fake.calls
    assert fake.devices[0]["limit_mw"] == 400_000


def test_without_a_driver_the_agent_and_the_check_exit_2_with_one_line(monkeypatch, capsys):
    from telemetry.agent import nvml_check
    from telemetry.agent.__main__ import main

    def no_library():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    assert main(["--server", "http://127.0.0.1:1", "--token", "t"]) == 2
    assert nvml_check.main([]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "agent: NVML is not usable here (NVML Shared Library Not Found); --simulate runs without",
        "nvml_check: NVML is not usable here: NVML Shared Library Not Found",
    ]


def test_a_second_agent_on_a_work_dir_in_use_exits_2_with_one_line(tmp_path, capsys):
    import fcntl

    from telemetry.agent.__main__ import main

    # given an agent running with a work dir (it holds the dir's lock)
    held = open(tmp_path / "agent.lock", "a")  # noqa: SIM115
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        # then a second one on it stops before touching a GPU: it would share the spool and
        # put back the first one's GPU settings at its start
        argv = ["--server", "http://127.0.0.1:1", "--token", "t", "--work-dir", str(tmp_path)]
        assert main(argv) == 2
    finally:
        held.close()
    assert capsys.readouterr().err == (
        f"agent: another agent runs with --work-dir {tmp_path} (it holds its lock); "
        "give each agent its own\n"
    )
