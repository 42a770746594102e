"""Co-located throughput and power: what happens when two jobs time-slice one GPU.

Measurements: Gavel's throughput tables (``data/perf/gavel/``, Narayanan et al., OSDI'20),
each job type's steps per second alone and while a pair shares the same GPUs. The
*throughput ratio* of a job in a pair is ``x = colocated / isolated`` (1 = unaffected,
0.5 = plain alternation) and its *slowdown* is ``s = 1 / x - 1`` (its run takes ``1 + s``
times as long).

Mapping of Wattflow's workload classes onto Gavel's job types (the nearest model Gavel
measured; the batch-size variant is the one nearest, in log scale, to the job's per-GPU
batch). Gavel measured K80, P100 and V100, not A100 or T4; we borrow its V100 ratios for
every GPU model (the newest GPU it measured), i.e. we assume the *relative* interference
of a pair carries over. Both choices are ours, not Gavel's::

    resnet50, imagenet, vgg16, inception3, yolov3   -> ResNet-50   (ImageNet CNNs)
    cifar10, resnet50_cifar10                       -> ResNet-18   (CIFAR-10 CNNs)
    bert, gpt2                                      -> Transformer (attention models)
    deepspeech2                                     -> LM          (recurrent, LSTM)
    ncf                                             -> Recommendation

Power of a shared GPU (*reconstructed*; Gavel measured no power): a GPU's draw is its
idle draw plus a dynamic part proportional to the work it does. A job that alone draws
``P`` does ``x`` of its isolated work per second when sharing, so it adds
``x * (P - P_idle)``::

    P_shared = P_idle + x_a * (P_a - P_idle) + x_b * (P_b - P_idle)   (<= cap, if given)

which is below ``P_a + P_b`` (the idle draw is paid once and ``x_a + x_b`` is below 2
for all but a few pairs). Energy per unit of work then falls exactly when the pair's
combined throughput ``x_a + x_b`` exceeds 1, which is EaCO's argument for co-location.
This module is the one place for that physics: the simulator engine, the simulated
agent (``telemetry/agent/simulated.py``) and the round's prediction
(``scheduling/core/round.py``) all take the ratios, the unmeasured-pair fallback and the
shared draw from here. Everything here is pure (no Django); the tables are read once by
``load_colocation``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

GAVEL_FAMILY: Mapping[str, str] = {
    "resnet50": "ResNet-50",
    "imagenet": "ResNet-50",
    "vgg16": "ResNet-50",
    "inception3": "ResNet-50",
    "yolov3": "ResNet-50",
    "cifar10": "ResNet-18",
    "resnet50_cifar10": "ResNet-18",
    "bert": "Transformer",
    "gpt2": "Transformer",
    "deepspeech2": "LM",
    "ncf": "Recommendation",
}
DEFAULT_GAVEL_GPU = "v100"
DATA_DIR = Path(__file__).resolve().parents[2] / "data"

UNMEASURED_PAIR_RATIO = 0.5
"""Throughput ratio of each job of a pair Gavel did not measure (or measured stalled):
plain alternation. Source: our modelling assumption, not a measurement. Without MPS,
CUDA time-slices the contexts of two processes on one GPU, each running while the other
waits, so each job gets half of the GPU's time. Used by the simulator and the simulated
agent; the round takes the slowdowns the policy predicts instead (EaCO starts a pair
only when it has measured or observed it)."""

PAIR_IDLE_SHARE = 0.5
"""Share of a shared GPU's idle draw charged to each job of a pair (an accounting
convention: the idle draw is paid once, split evenly)."""


def _family_and_batch(job_type: str) -> tuple[str, int | None]:
    """'ResNet-50 (batch size 64)' -> ('ResNet-50', 64); 'A3C' -> ('A3C', None)."""
    if " (batch size " in job_type:
        family, rest = job_type.split(" (batch size ", 1)
        return family, int(rest.rstrip(")"))
    return job_type, None


@dataclass(frozen=True)
class ColocationModel:
    """Gavel's measured throughput ratios for one GPU, by (job type, other, GPU count)."""

    gpu: str
    ratios: Mapping[tuple[str, str, int], tuple[float, float]]  # (x_self, x_other)
    batches: Mapping[str, tuple[int, ...]]  # family -> measured batch sizes, ascending

    def job_type(self, workload: str, per_gpu_batch: float) -> str | None:
        """Gavel job type for a workload at a per-GPU batch, None if unmapped."""
        family = GAVEL_FAMILY.get(workload)
        sizes = self.batches.get(family or "")
        if not sizes:
            return None
        b = max(per_gpu_batch, 1.0)
        best = min(sizes, key=lambda s: (abs(math.log(s / b)), s))
        return f"{family} (batch size {best})"

    def ratio(self, type_a: str, type_b: str, n_gpus: int) -> tuple[float, float] | None:
        """(x_a, x_b) for the pair on ``n_gpus`` GPUs each (falls back to the 1-GPU pair)."""
        return self.ratios.get((type_a, type_b, n_gpus)) or self.ratios.get((type_a, type_b, 1))

    def pair_ratio(
        self, workload_a: str, batch_a: float, workload_b: str, batch_b: float, n_gpus: int
    ) -> tuple[float, float] | None:
        """(x_a, x_b) for two jobs given by workload and per-GPU batch, None if unmeasured."""
        ta = self.job_type(workload_a, batch_a)
        tb = self.job_type(workload_b, batch_b)
        if ta is None or tb is None:
            return None
        return self.ratio(ta, tb, n_gpus)

    def shared_ratios(
        self, workload_a: str, batch_a: float, workload_b: str, batch_b: float, n_gpus: int
    ) -> tuple[float, float]:
        """(x_a, x_b) as the pair runs: :meth:`pair_ratio` where Gavel measured it, and
        ``UNMEASURED_PAIR_RATIO`` for an unmeasured pair or a ratio that is not positive."""
        pair = self.pair_ratio(workload_a, batch_a, workload_b, batch_b, n_gpus)
        if pair is None:
            return UNMEASURED_PAIR_RATIO, UNMEASURED_PAIR_RATIO
        x_a, x_b = pair
        return (
            x_a if x_a > 0.0 else UNMEASURED_PAIR_RATIO,
            x_b if x_b > 0.0 else UNMEASURED_PAIR_RATIO,
        )


def slowdown_of(x: float) -> float:
    """Fractional slowdown for a throughput ratio (a stalled job: infinite)."""
    return math.inf if x <= 0.0 else 1.0 / x - 1.0


def dynamic_w(power_w: float, idle_w: float, x: float) -> float:
    """What a job adds above its GPU's idle draw when it does ``x`` of its isolated
    work per second (never below zero)."""
    return x * max(power_w - idle_w, 0.0)


def shared_power_w(
    idle_w: float,
    power_a_w: float,
    power_b_w: float,
    x_a: float,
    x_b: float,
    cap_w: float | None = None,
) -> float:
    """Draw of one GPU that two jobs time-slice (see the module docstring)."""
    p = idle_w + dynamic_w(power_a_w, idle_w, x_a) + dynamic_w(power_b_w, idle_w, x_b)
    return p if cap_w is None else min(p, cap_w)


def pair_member_power_w(idle_w: float, power_w: float, x: float) -> float:
    """The part of a shared GPU's draw charged to one job of the pair: its half
    (``PAIR_IDLE_SHARE``) of the idle draw plus its own dynamic part. The two members'
    parts add up to :func:`shared_power_w` (uncapped)."""
    return PAIR_IDLE_SHARE * idle_w + dynamic_w(power_w, idle_w, x)


def slowed_power_w(power_w: float, idle_w: float, slowdown: float, *, pays_idle: bool) -> float:
    """Per-GPU draw of a job slowed by ``slowdown`` (time-slicing, or waiting on the
    network): its GPUs do ``1 / (1 + s)`` of the work per second, so its draw above idle
    falls by that factor. A job on GPUs whose idle draw another job already pays (the
    second job of a pair) adds only that part. This is the round's prediction from a
    policy's slowdown; unlike :func:`dynamic_w` it passes an estimate below idle through
    unclamped."""
    base_w = idle_w if pays_idle else 0.0
    return base_w + (power_w - idle_w) / (1.0 + slowdown)


def gpu_ratios(model: ColocationModel, sharers: Sequence[tuple[str, float, int]]) -> list[float]:
    """Throughput ratio (shared / alone) of each job on one GPU, given each as
    ``(workload, per-GPU batch, GPU count)``: 1 alone; a pair at its
    :meth:`ColocationModel.shared_ratios` (on the first job's GPU count); three or more,
    which no policy plans and Gavel did not measure, ``1 / n`` each (round robin)."""
    if len(sharers) == 1:
        return [1.0]
    if len(sharers) > 2:
        return [1.0 / len(sharers)] * len(sharers)
    (w_a, b_a, n_a), (w_b, b_b, _) = sharers
    return list(model.shared_ratios(w_a, b_a, w_b, b_b, n_a))


def gpu_power_w(idle_w: float, powers_w: Sequence[float], ratios: Sequence[float]) -> float:
    """Draw of one GPU from what each job on it would draw alone and its ratio: idle when
    empty, the job's own draw alone, :func:`shared_power_w` for a pair, and for three or
    more (unmodelled) the mean of their draws."""
    if not powers_w:
        return idle_w
    if len(powers_w) == 2:
        return shared_power_w(idle_w, *powers_w, *ratios)
    return sum(powers_w) / len(powers_w)


def read_gavel(data_dir: Path | str = DATA_DIR, *, gpu: str = DEFAULT_GAVEL_GPU) -> ColocationModel:
    """Read Gavel's isolated and co-located tables for ``gpu`` (consolidated placements)."""
    base = Path(data_dir) / "perf" / "gavel"
    isolated: dict[tuple[str, int], float] = {}
    with (base / "isolated_throughput.csv").open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row["gpu"] == gpu:
                isolated[(row["job_type"], int(row["num_gpus"]))] = float(row["steps_per_s"])
    ratios: dict[tuple[str, str, int], tuple[float, float]] = {}
    with (base / "colocated_throughput.csv").open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            n, m = int(row["num_gpus"]), int(row["other_num_gpus"])
            if row["gpu"] != gpu or n != m:
                continue
            a, b = row["job_type"], row["other_job_type"]
            iso_a, iso_b = isolated.get((a, n)), isolated.get((b, m))
            if not iso_a or not iso_b:
                continue
            ratios[(a, b, n)] = (
                float(row["steps_per_s"]) / iso_a,
                float(row["other_steps_per_s"]) / iso_b,
            )
    if not ratios:
        raise ValueError(f"no co-located pairs for GPU {gpu!r} in {base}")
    batches: dict[str, set[int]] = {}
    for job_type, _ in isolated:
        family, batch = _family_and_batch(job_type)
        if batch is not None:
            batches.setdefault(family, set()).add(batch)
    return ColocationModel(
        gpu=gpu, ratios=ratios, batches={f: tuple(sorted(b)) for f, b in batches.items()}
    )


@lru_cache(maxsize=4)
def load_colocation(data_dir: str = str(DATA_DIR), gpu: str = DEFAULT_GAVEL_GPU) -> ColocationModel:
    """The shipped tables, read once per process (the model is immutable)."""
    return read_gavel(data_dir, gpu=gpu)


# --- learned history (EaCO) -----------------------------------------------------------


def pair_key(type_a: str, type_b: str) -> str:
    """History key of an unordered pair; ``type`` is a Gavel job type or a workload key."""
    return "|".join(sorted((type_a, type_b)))


def learn(
    history: Mapping[str, list[float]], type_a: str, s_a: float, type_b: str, s_b: float
) -> dict[str, list[float]]:
    """A new history with one observation of the pair: per key ``[count, s_first,
    s_second]`` (running means, first/second in key order). JSON-serialisable."""
    out = {k: list(v) for k, v in history.items()}
    key = pair_key(type_a, type_b)
    first, second = (s_a, s_b) if type_a <= type_b else (s_b, s_a)
    n, m1, m2 = out.get(key, [0.0, 0.0, 0.0])
    out[key] = [n + 1, m1 + (first - m1) / (n + 1), m2 + (second - m2) / (n + 1)]
    return out


def recall(
    history: Mapping[str, list[float]], type_a: str, type_b: str
) -> tuple[float, float] | None:
    """Mean observed (s_a, s_b) of the pair, or None if never observed."""
    entry = history.get(pair_key(type_a, type_b))
    if not entry or entry[0] <= 0:
        return None
    _, m1, m2 = entry
    return (m1, m2) if type_a <= type_b else (m2, m1)
