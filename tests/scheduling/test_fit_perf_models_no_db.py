"""``fit_perf_models --no-db`` writes the JSON without a database (no django_db mark: any
connection is refused here, as on a machine with no PostgreSQL)."""

from __future__ import annotations

import io

from django.core.management import call_command

from scheduling.core.perf_models import CATALOG_PATH, load_catalog
from scheduling.management.commands import fit_perf_models


def test_no_db_writes_the_catalog_without_touching_a_database(tmp_path, monkeypatch):
    catalog = load_catalog(CATALOG_PATH)
    monkeypatch.setattr(fit_perf_models, "fit_and_validate", lambda *a, **k: (catalog, []))
    monkeypatch.setattr(fit_perf_models, "count_fit_steps", lambda *a, **k: 1)
    target = tmp_path / "c.json"
    out = io.StringIO()
    call_command("fit_perf_models", "--skip-validation", "--no-db", "--output", str(target),
                 stdout=out)  # fmt: skip
    assert target.is_file()
    assert "perf profiles" not in out.getvalue()
