"""PerfProfile rows, the fit_perf_models / perf_model_report commands and the admin, against
the real PostgreSQL named by DATABASE_URL."""

from __future__ import annotations

import io
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from support.fits import catalog_approx, pop_unidentified, reuse_zeus_fits

from scheduling.core.perf_models import CATALOG_PATH, catalog_to_dict, load_catalog
from scheduling.core.types import GpuConfig
from scheduling.models import PerfProfile

pytestmark = pytest.mark.django_db

FITTED_AT = datetime(2026, 11, 22, 4, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _zeus_fitted_once(monkeypatch):
    # fit_perf_models runs three times here on the same data: one set of Zeus fits per
    # process (support/fits.py says why that holds)
    reuse_zeus_fits(monkeypatch)


def _run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_upsert_stores_every_model_with_its_errors():
    catalog = load_catalog()

    created, updated = PerfProfile.objects.upsert_catalog(catalog, fitted_at=FITTED_AT)

    assert (created, updated) == (13, 0)
    row = PerfProfile.objects.get(workload="resnet50", gpu_model="A100", version="2")
    model = catalog.get("resnet50", "A100")
    assert row.fitted_at == FITTED_AT
    assert row.iter_time_median_abs_error == model.errors["iter_time_median_abs_error"]
    assert row.n_heldout == 21
    assert row.params["model"]["throughput"]["beta_c_s"] == model.throughput.beta_c_s
    assert row.params["gpu"]["idle_power_w"] == 50.0


def test_upserting_the_same_version_again_updates_in_place():
    catalog = load_catalog()
    PerfProfile.objects.upsert_catalog(catalog, fitted_at=FITTED_AT)
    later = datetime(2026, 11, 23, tzinfo=UTC)

    created, updated = PerfProfile.objects.upsert_catalog(catalog, fitted_at=later)

    assert (created, updated) == (0, 13)
    assert PerfProfile.objects.count() == 13
    assert set(PerfProfile.objects.values_list("fitted_at", flat=True)) == {later}


def test_stored_version_turns_back_into_the_same_catalog():
    catalog = load_catalog()
    PerfProfile.objects.upsert_catalog(catalog, fitted_at=FITTED_AT)

    again = PerfProfile.objects.catalog("2")

    assert again.get("imagenet", "A100") is again.get("resnet50", "A100")
    assert again.aliases() == catalog.aliases()
    cfg = GpuConfig(16, 256, power_limit_w=300.0)
    for model in catalog.models():
        twin = again.get(model.workload, model.gpu_model)
        assert twin.iter_time_s(cfg) == model.iter_time_s(cfg)
        assert twin.power_w(cfg) == model.power_w(cfg)


def test_asking_for_a_version_never_stored_raises():
    with pytest.raises(PerfProfile.DoesNotExist, match="version '9'"):
        PerfProfile.objects.catalog("9")


def test_fit_perf_models_writes_the_json_and_the_profiles(tmp_path):
    target = tmp_path / "catalog.json"

    out = _run(
        "fit_perf_models", "--skip-validation", "--output", str(target), "--catalog-version", "7"
    )

    assert f"wrote {target} (version 7, 13 models)" in out
    assert "perf profiles: 13 created, 0 updated" in out
    written = json.loads(target.read_text())
    shipped = catalog_to_dict(load_catalog())
    assert written["version"] == "7"
    pop_unidentified(written["gpus"], shipped["gpus"])
    assert written["gpus"] == catalog_approx(shipped["gpus"])
    assert [m["throughput"] for m in written["models"]] == catalog_approx(
        [m["throughput"] for m in shipped["models"]]
    )
    assert set(PerfProfile.objects.values_list("version", flat=True)) == {"7"}


def test_a_new_version_keeps_the_rows_of_the_old_one(tmp_path):
    PerfProfile.objects.upsert_catalog(load_catalog(), fitted_at=FITTED_AT)

    _run(
        "fit_perf_models",
        "--skip-validation",
        "--output",
        str(tmp_path / "c.json"),
        "--catalog-version",
        "3",
    )

    assert PerfProfile.objects.filter(version="2").count() == 13
    assert PerfProfile.objects.filter(version="3").count() == 13


def test_fit_perf_models_with_no_data_changes_nothing(tmp_path):
    target = tmp_path / "catalog.json"
    shipped_before = CATALOG_PATH.read_bytes()

    with pytest.raises(CommandError, match="no perf/ folder there"):
        _run("fit_perf_models", "--data-dir", str(tmp_path), "--output", str(target))

    assert not target.exists()
    assert PerfProfile.objects.count() == 0
    assert CATALOG_PATH.read_bytes() == shipped_before


def test_fit_perf_models_with_broken_data_changes_nothing(tmp_path):
    # A data folder whose Zeus table lacks its columns: the fit fails before any write.
    (tmp_path / "perf" / "zeus").mkdir(parents=True)
    (tmp_path / "perf" / "zeus" / "summary_power_a40.csv").write_text("gpu,oops\n1,2\n")
    target = tmp_path / "catalog.json"

    with pytest.raises(CommandError, match="fitting from .* failed"):
        _run(
            "fit_perf_models",
            "--data-dir",
            str(tmp_path),
            "--output",
            str(target),
            "--skip-validation",
        )

    assert not target.exists()
    assert PerfProfile.objects.count() == 0


def test_fit_perf_models_rejects_an_output_folder_that_does_not_exist(tmp_path):
    with pytest.raises(CommandError, match="does not exist"):
        _run("fit_perf_models", "--output", str(tmp_path / "nope" / "c.json"))

    assert PerfProfile.objects.count() == 0


@pytest.mark.parametrize("version", ["v" * 33, "7\x1b[2J", "release 7"])
def test_fit_perf_models_refuses_a_version_the_profiles_cannot_store_before_fitting(
    tmp_path, version
):
    # A version past PerfProfile.version's 32 characters was written into the catalog JSON
    # (by default the shipped one) after minutes of fitting, then refused by the database
    # with a traceback: the file and the rows disagreed.
    target = tmp_path / "c.json"
    with pytest.raises(CommandError, match="--catalog-version .*1 to 32 printable"):
        _run("fit_perf_models", "--skip-validation", "--output", str(target),
             "--catalog-version", version)  # fmt: skip

    assert list(tmp_path.iterdir()) == []
    assert PerfProfile.objects.count() == 0


def test_fit_perf_models_refuses_an_output_that_is_a_folder_before_fitting(tmp_path):
    # It was IsADirectoryError after the fits, leaving "<folder>.partial" beside the folder.
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(CommandError, match="is a folder, not a file"):
        _run("fit_perf_models", "--skip-validation", "--output", str(folder))

    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert PerfProfile.objects.count() == 0


def _no_fit(*args, **kwargs):
    raise AssertionError("fit before the output was checked")


@pytest.mark.skipif(not Path("/proc/version").is_file(), reason="needs Linux's /proc")
def test_fit_perf_models_refuses_an_output_it_cannot_create_before_fitting(monkeypatch):
    # /proc passes os.access for root, so the fits ran 32 s before the write failed
    # (fourth probe of the live service).
    import scheduling.management.commands.fit_perf_models as command

    monkeypatch.setattr(command, "fit_and_validate", _no_fit)
    with pytest.raises(CommandError, match=r"^--output /proc/version: cannot write "):
        _run("fit_perf_models", "--skip-validation", "--output", "/proc/version")

    assert PerfProfile.objects.count() == 0


def test_fit_perf_models_refuses_an_output_that_is_not_a_regular_file(tmp_path, monkeypatch):
    import scheduling.management.commands.fit_perf_models as command

    monkeypatch.setattr(command, "fit_and_validate", _no_fit)
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    with pytest.raises(CommandError, match="is not a regular file"):
        _run("fit_perf_models", "--skip-validation", "--output", str(pipe))

    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_fit_perf_models_leaves_no_trace_of_its_write_check(tmp_path, monkeypatch):
    import scheduling.management.commands.fit_perf_models as command

    monkeypatch.setattr(command, "fit_and_validate", _no_fit)
    with pytest.raises(AssertionError, match="fit before"):
        _run("fit_perf_models", "--skip-validation", "--output", str(tmp_path / "c.json"))

    assert list(tmp_path.iterdir()) == []


def test_fit_perf_models_writes_no_file_when_the_profiles_are_refused(tmp_path, monkeypatch):
    from django.db import DatabaseError

    def refuse(catalog, *, fitted_at):
        raise DatabaseError("the database refused the rows")

    monkeypatch.setattr(PerfProfile.objects, "upsert_catalog", refuse)
    target = tmp_path / "c.json"
    with pytest.raises(DatabaseError):
        _run("fit_perf_models", "--skip-validation", "--output", str(target))

    assert list(tmp_path.iterdir()) == []


def test_report_prints_the_table_and_writes_the_parity_png(tmp_path):
    out = _run("perf_model_report", "--dataset", "elasticflow_a100", "--out-dir", str(tmp_path))

    lines = out.splitlines()
    assert lines[0].split() == ["data", "set", "quantity", "n", "median", "p90", "target"]
    assert lines[2].startswith("elasticflow_a100")
    assert lines[2].split()[1:3] == ["iter_time", "109"]
    assert lines[2].endswith("ok")
    png = tmp_path / "perf_parity_elasticflow.png"
    assert f"wrote {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_rejects_an_unknown_data_set(tmp_path):
    with pytest.raises(CommandError):
        _run("perf_model_report", "--dataset", "mlperf", "--out-dir", str(tmp_path))

    assert list(tmp_path.iterdir()) == []


def test_report_refuses_an_out_dir_under_a_file_before_validating(tmp_path, monkeypatch):
    # It validated (minutes for every data set), then mkdir raised NotADirectoryError.
    import scheduling.management.commands.perf_model_report as report

    def never(*args, **kwargs):
        raise AssertionError("validated before checking --out-dir")

    monkeypatch.setattr(report, "cross_validate", never)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(CommandError, match="a-file is a file, not a folder"):
        _run("perf_model_report", "--dataset", "elasticflow_a100", "--out-dir",
             str(tmp_path / "a-file" / "plots"))  # fmt: skip


def test_admin_lists_profiles_read_only(admin_client):
    PerfProfile.objects.upsert_catalog(load_catalog(), fitted_at=FITTED_AT)
    row = PerfProfile.objects.get(workload="gpt2", gpu_model="A100")

    listing = admin_client.get(reverse("admin:scheduling_perfprofile_changelist"))
    detail = admin_client.get(reverse("admin:scheduling_perfprofile_change", args=[row.pk]))
    add = admin_client.get(reverse("admin:scheduling_perfprofile_add"))
    post = admin_client.post(
        reverse("admin:scheduling_perfprofile_change", args=[row.pk]), {"workload": "hacked"}
    )

    assert listing.status_code == 200
    assert b"gpt2" in listing.content
    assert detail.status_code == 200
    assert add.status_code == 403
    assert post.status_code == 403
    row.refresh_from_db()
    assert row.workload == "gpt2"
