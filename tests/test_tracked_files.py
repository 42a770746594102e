"""What the repository tracks: no command's output written by mistake to a file named
``-`` (``spectacular --file -`` wrote the OpenAPI schema, 121 kB, to such a file at the
root, and a commit took it along with its fix)."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tracked() -> list[str]:
    try:
        result = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in result.stdout.decode().split("\0") if p]


def test_no_tracked_file_is_named_dash():
    tracked = _tracked()
    assert tracked  # (the listing itself worked)

    assert [p for p in tracked if Path(p).name == "-"] == []
