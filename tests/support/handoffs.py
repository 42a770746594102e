"""Slurm handoff files written as the node's Prolog writes them, for the monitor-mode tests."""

from __future__ import annotations

import json
from pathlib import Path


def write_handoff(node_dir: Path, *, slurm_job_id: int, slurm_job_gpus: str, comment: str) -> Path:
    """Write ``<node_dir>/<slurm_job_id>.json`` as ``deploy/slurm/prolog.sh`` does: the same
    fields (strings, as a shell sees them), through a temporary file and a rename. The agent
    reads it with ``telemetry.agent.slurm_handoff.Handoff``."""
    node_dir.mkdir(parents=True, exist_ok=True)
    path = node_dir / f"{slurm_job_id}.json"
    tmp = node_dir / f".{slurm_job_id}.json.tmp"
    body = {"slurm_job_id": str(slurm_job_id), "slurm_job_gpus": slurm_job_gpus, "comment": comment}
    tmp.write_text(json.dumps(body) + "\n")
    tmp.replace(path)
    return path
