"""Readers for the measured performance data vendored in the repository's ``data/perf/``.

Each reader returns plain, immutable rows (no numpy, no pandas) so that the fitting code
and the tests can work on them directly. Nothing here invents a number: rows are read
as published, missing cells (``0`` or empty in the ElasticFlow tables) are skipped, and
every value keeps the unit of its source (see ``data/README.md``).
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean

# The repository's data folder: scheduling/fitting/perf_data.py -> <repo>/data.
DATA_DIR = Path(__file__).resolve().parents[2] / "data"

ELASTICFLOW_GPUS_PER_NODE = 8  # Azure ND96asr_v4: 8 x A100 per server (data/README.md)
POLLUX_GPUS_PER_NODE = 4  # AWS g4dn.12xlarge: 4 x T4 per server (data/README.md)

POLLUX_WORKLOADS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")

# Zeus measured one workload per (dataset, network); the catalog's key for each.
ZEUS_WORKLOADS = {
    ("cifar100", "shufflenetv2"): "shufflenetv2",
    ("imagenet", "resnet50"): "resnet50",
    ("librispeech", "deepspeech2"): "deepspeech2",
    ("movielens-1m", "ncf"): "ncf",
    ("squad", "bert_base_uncased"): "bert",
    ("sentiment140", "bert_base_uncased"): "bert_sentiment140",
}
ZEUS_GPUS = ("a40", "v100", "rtx6000", "p100")
PERSEUS_MODELS = ("bloom", "gpt3-175b")
PERSEUS_GPUS = {"A100": "a100_sxm", "A40": "a40"}


@dataclass(frozen=True, slots=True)
class ThroughputRow:
    """One measured configuration: ``n_gpus`` on ``n_nodes`` with ``local_batch`` each."""

    workload: str
    n_gpus: int
    n_nodes: int
    local_batch: float  # samples per GPU per iteration
    iter_time_s: float
    source: str  # "elasticflow_a100", "pollux_t4/placements" or "pollux_t4/scalability"

    @property
    def global_batch(self) -> float:
        return self.local_batch * self.n_gpus

    @property
    def key(self) -> tuple[int, int, float]:
        return (self.n_gpus, self.n_nodes, self.local_batch)


@dataclass(frozen=True, slots=True)
class ClockRow:
    """One Perseus measurement: a pipeline stage's forward or backward pass at one clock."""

    model: str
    gpu_model: str
    stage: int
    instruction: str
    clock_mhz: int
    time_s: float
    energy_j: float

    @property
    def power_w(self) -> float:
        return self.energy_j / self.time_s


@dataclass(frozen=True, slots=True)
class PowerLimitRow:
    """One Zeus measurement on a single GPU, averaged over the optimizers measured."""

    gpu: str  # zeus key: a40, v100, rtx6000, p100
    workload: str
    batch_size: int
    power_limit_w: float
    time_per_epoch_s: float
    average_power_w: float

    @property
    def energy_per_epoch_j(self) -> float:
        return self.time_per_epoch_s * self.average_power_w


def _data_dir(data_dir: Path | str | None) -> Path:
    return Path(data_dir) if data_dir is not None else DATA_DIR


def _nodes_needed(n_gpus: int, gpus_per_node: int) -> int:
    return -(-n_gpus // gpus_per_node)


def read_elasticflow(data_dir: Path | str | None = None) -> list[ThroughputRow]:
    """Iteration times from ``elasticflow_a100/<model>.csv`` (iterations per second).

    GPU counts above 8 span ``n / 8`` whole servers. Zero or empty cells are
    configurations that were not measured and are skipped.
    """
    rows: list[ThroughputRow] = []
    folder = _data_dir(data_dir) / "perf" / "elasticflow_a100"
    for path in sorted(folder.glob("*.csv")):
        with path.open(newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader)
            counts = [int(c) for c in header[1:]]
            for line in reader:
                if not line:
                    continue
                global_batch = int(line[0])
                for n_gpus, cell in zip(counts, line[1:], strict=False):
                    if not cell.strip() or float(cell) <= 0.0:
                        continue
                    rows.append(
                        ThroughputRow(
                            workload=path.stem,
                            n_gpus=n_gpus,
                            n_nodes=_nodes_needed(n_gpus, ELASTICFLOW_GPUS_PER_NODE),
                            local_batch=global_batch / n_gpus,
                            iter_time_s=1.0 / float(cell),
                            source="elasticflow_a100",
                        )
                    )
    return rows


def read_pollux(data_dir: Path | str | None = None) -> list[ThroughputRow]:
    """Iteration times from ``pollux_t4/<model>/{placements,scalability}.csv``.

    ``step_time`` is the whole iteration (compute plus the part of the gradient sync
    that did not overlap), as Pollux's simulator uses it. In ``placements.csv`` the
    digits of ``placement`` are the GPUs used on each node.
    """
    rows: list[ThroughputRow] = []
    base = _data_dir(data_dir) / "perf" / "pollux_t4"
    for workload in POLLUX_WORKLOADS:
        with (base / workload / "placements.csv").open(newline="") as fh:
            for rec in csv.DictReader(fh):
                digits = [int(d) for d in rec["placement"] if d != "0"]
                rows.append(
                    ThroughputRow(
                        workload=workload,
                        n_gpus=sum(digits),
                        n_nodes=len(digits),
                        local_batch=float(rec["local_bsz"]),
                        iter_time_s=float(rec["step_time"]),
                        source="pollux_t4/placements",
                    )
                )
        with (base / workload / "scalability.csv").open(newline="") as fh:
            for rec in csv.DictReader(fh):
                rows.append(
                    ThroughputRow(
                        workload=workload,
                        n_gpus=int(rec["num_replicas"]),
                        n_nodes=int(rec["num_nodes"]),
                        local_batch=float(rec["local_bsz"]),
                        iter_time_s=float(rec["step_time"]),
                        source="pollux_t4/scalability",
                    )
                )
    return rows


def pollux_batch_sizes(workload: str, data_dir: Path | str | None = None) -> tuple[int, ...]:
    """Global batch sizes Pollux profiled statistical efficiency at (``validation-<b>.csv``)."""
    folder = _data_dir(data_dir) / "perf" / "pollux_t4" / workload
    return tuple(sorted(int(p.stem.split("-", 1)[1]) for p in folder.glob("validation-*.csv")))


def read_perseus(data_dir: Path | str | None = None) -> list[ClockRow]:
    """Stage time and energy versus SM clock from ``perseus/stage_profile_*_bf16.csv``."""
    rows: list[ClockRow] = []
    folder = _data_dir(data_dir) / "perf" / "perseus"
    for gpu_model, gpu_key in PERSEUS_GPUS.items():
        for model in PERSEUS_MODELS:
            path = folder / f"stage_profile_{model}+{gpu_key}_bf16.csv"
            with path.open(newline="") as fh:
                for rec in csv.DictReader(fh):
                    rows.append(
                        ClockRow(
                            model=model,
                            gpu_model=gpu_model,
                            stage=int(rec["stage"]),
                            instruction=rec["instruction"],
                            clock_mhz=int(rec["frequency"]),
                            time_s=float(rec["time"]),
                            energy_j=float(rec["energy"]),
                        )
                    )
    return rows


def read_zeus(data_dir: Path | str | None = None) -> list[PowerLimitRow]:
    """Epoch time and average power versus power limit and batch size (``zeus/``).

    Several optimizers were measured for some workloads; the optimizer does not change
    the work per sample, so rows with the same (GPU, workload, batch, limit) are averaged.
    """
    groups: dict[tuple[str, str, int, float], list[tuple[float, float]]] = defaultdict(list)
    folder = _data_dir(data_dir) / "perf" / "zeus"
    for gpu in ZEUS_GPUS:
        with (folder / f"summary_power_{gpu}.csv").open(newline="") as fh:
            for rec in csv.DictReader(fh):
                workload = ZEUS_WORKLOADS[(rec["dataset"], rec["network"])]
                key = (gpu, workload, int(rec["batch_size"]), float(rec["power_limit"]))
                groups[key].append((float(rec["time_per_epoch"]), float(rec["average_power"])))
    return [
        PowerLimitRow(
            gpu=gpu,
            workload=workload,
            batch_size=batch,
            power_limit_w=limit,
            time_per_epoch_s=fmean(t for t, _ in vals),
            average_power_w=fmean(p for _, p in vals),
        )
        for (gpu, workload, batch, limit), vals in sorted(groups.items())
    ]
