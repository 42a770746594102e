"""``python -m scheduling.simulator ... | head``: a reader that goes away early ends the
command quietly (it ended in a BrokenPipeError traceback, once per line left)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_reader_that_stops_early_gets_no_traceback():
    # given the simulator writing its report into a pipe whose reader leaves after a line
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scheduling.simulator",
            "--trace",
            str(ROOT / "data" / "trace" / "pollux_workload-1.csv"),
            "--cluster",
            str(ROOT / "data" / "clusters" / "n16g4_t4.json"),
            "--policy",
            "powerflow",
            "--match-baseline",
            "fifo,elastic",
            "--max-jobs",
            "3",
            "--knowledge",
            "both",
            "--no-progress",
        ],  # fmt: skip
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = process.stdout.readline()
    process.stdout.close()
    # when the rest of the report is written to the closed pipe
    _, err = process.communicate(timeout=300)

    # then it stops without a traceback
    assert first.strip()
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err
