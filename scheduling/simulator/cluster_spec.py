"""The simulated cluster's shape, read from a small spec file.

Two formats:

* JSON (``data/clusters/*.json``)::

      {"name": "n16g8_a100", "gpu_model": "A100",
       "switches": 1, "nodes_per_switch": 16, "gpus_per_node": 8}

* ElasticFlow's ``cluster_n16g8.csv`` (columns ``num_switch``, ``num_node_p_switch``,
  ``num_gpu_p_node``, ...), which names no GPU model; pass ``gpu_model``.

Names are stable so that plans and results can be compared across runs: switch
``sw<i>``, node ``n<k>`` (numbered across switches), GPU id ``n<k>/<index>``.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from scheduling.core.csv_rows import rows_of
from scheduling.core.types import Cluster, Gpu, Node

# The most GPUs a simulated cluster has: 64 times the largest cluster the benchmarks use
# (1,024 GPUs), small enough to build in memory.
MAX_GPUS = 65_536
JSON_KEYS = frozenset(
    {"name", "description", "gpu_model", "switches", "nodes_per_switch", "gpus_per_node"}
)


class ClusterSpecError(ValueError):
    """The spec file is missing or malformed; the message is one line."""


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    name: str
    gpu_model: str
    switches: int
    nodes_per_switch: int
    gpus_per_node: int

    @property
    def n_gpus(self) -> int:
        return self.switches * self.nodes_per_switch * self.gpus_per_node

    def build(self) -> Cluster:
        nodes = []
        for s in range(self.switches):
            for j in range(self.nodes_per_switch):
                name = f"n{s * self.nodes_per_switch + j}"
                gpus = tuple(
                    Gpu(gpu_id=f"{name}/{i}", node=name, index=i, model=self.gpu_model)
                    for i in range(self.gpus_per_node)
                )
                nodes.append(Node(name=name, switch=f"sw{s}", gpus=gpus))
        return Cluster(nodes=tuple(nodes))


def _positive_int(value: object, field: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ClusterSpecError(f"{source}: {field} must be a positive integer, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ClusterSpecError(
            f"{source}: {field} must be a positive integer, got {value!r}"
        ) from None
    if number < 1:
        raise ClusterSpecError(f"{source}: {field} must be a positive integer, got {value!r}")
    return number


def read_cluster_spec(path: str | Path, *, gpu_model: str | None = None) -> ClusterSpec:
    """Read a JSON spec or ElasticFlow's cluster CSV; ``gpu_model`` overrides the file's."""
    path = Path(path)
    source = path.name
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is not JSON
    except OSError as exc:
        raise ClusterSpecError(f"cannot read cluster spec {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ClusterSpecError(f"{source}: not UTF-8 text ({exc.reason})") from exc
    if path.suffix == ".csv":
        # (a longer row's tail would be dropped: "2,4,8,16" ran as 2 x 4 x 8 GPUs)
        reader = csv.DictReader(text.splitlines())
        rows = [row for _, row in rows_of(reader, source, ClusterSpecError)]
        if len(rows) != 1:
            raise ClusterSpecError(f"{source}: expected exactly one row, found {len(rows)}")
        row = rows[0]
        raw = {
            "name": path.stem,
            "switches": row.get("num_switch"),
            "nodes_per_switch": row.get("num_node_p_switch"),
            "gpus_per_node": row.get("num_gpu_p_node"),
            "gpu_model": gpu_model,
        }
    else:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ClusterSpecError(
                f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})"
            ) from exc
        if not isinstance(raw, dict):
            raise ClusterSpecError(f"{source}: expected a JSON object")
        unknown = sorted(set(raw) - JSON_KEYS)
        if unknown:
            # A misspelt or unsupported key (say "nodes", or a second GPU model) would
            # otherwise be ignored and the run would simulate another cluster.
            raise ClusterSpecError(
                f"{source}: unknown key(s) {', '.join(map(repr, unknown))}; a spec has "
                f"{', '.join(sorted(JSON_KEYS))} (one GPU model per cluster)"
            )
        if gpu_model is not None:
            raw["gpu_model"] = gpu_model
    model = raw.get("gpu_model")
    if model is None or model == "":
        raise ClusterSpecError(
            f"{source}: gpu_model is required (a perf catalog GPU key such as 'A100')"
        )
    if not isinstance(model, str):
        raise ClusterSpecError(
            f"{source}: gpu_model must be one GPU model name such as 'A100', got {model!r} "
            "(one GPU model per cluster)"
        )
    name = str(raw.get("name") or path.stem)
    if "/" in name or name.startswith(".") or not name.isprintable():
        # (it names the run's output files: a "/" put them in a folder that does not exist)
        raise ClusterSpecError(
            f"{source}: name {name!r} must be printable, without '/' or a leading '.'"
        )
    spec = ClusterSpec(
        name=name,
        gpu_model=model,
        switches=_positive_int(raw.get("switches"), "switches", source),
        nodes_per_switch=_positive_int(raw.get("nodes_per_switch"), "nodes_per_switch", source),
        gpus_per_node=_positive_int(raw.get("gpus_per_node"), "gpus_per_node", source),
    )
    total = spec.switches * spec.nodes_per_switch * spec.gpus_per_node
    if total > MAX_GPUS:
        # (10^6 x 10^6 x 10^6 built its GPUs silently until memory ran out)
        raise ClusterSpecError(f"{source}: {total:,} GPUs; at most {MAX_GPUS:,} are simulated")
    return spec
