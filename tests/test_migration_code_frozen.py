"""Data migrations hold the code they run: one that imports the project's live modules at
module level breaks every ``migrate`` on a new database the day such a module moves or
changes its imports, and changes what an old migration does when that code changes (a
review found 0011, 0014 and 0015 of scheduling so; 0008 and cluster's 0029 were left)."""

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGES = {"cluster", "scheduling", "telemetry", "frontend", "config", "jobclient"}
FROZEN = [
    "scheduling/migrations/0008_gpu_model_keys.py",
    "cluster/migrations/0029_folded_name_indexes.py",
]


def _imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
    return modules


@pytest.mark.parametrize("path", FROZEN)
def test_the_migration_imports_none_of_the_projects_modules(path):
    ours = {m for m in _imported_modules(ROOT / path) if m.split(".")[0] in PROJECT_PACKAGES}
    assert ours == set()


@pytest.mark.parametrize(
    ("product_name", "key"),
    [
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA A100-PCIE-40GB", "A100-PCIe"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIe"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("Tesla V100-FHHL-16GB", "V100-FHHL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 3090 Ti", "RTX3090Ti"),
        ("NVIDIA RTX A6000", "RTXA6000"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "A100"),
        ("GRID A100-4C", "A100"),
        ("Quadro RTX 6000", "RTX6000"),
        ("A100", "A100"),
        ("A100-PCIe", "A100-PCIe"),
        ("NVIDIA", "NVIDIA"),
        ("  T4 ", "T4"),
    ],
)
def test_the_frozen_model_key_is_the_agents_key_of_8_december(product_name, key):
    migration = importlib.import_module("scheduling.migrations.0008_gpu_model_keys")
    assert migration.gpu_model_key(product_name) == key
