"""Models of the scheduling app."""

from __future__ import annotations

from datetime import datetime

from django.db import models, transaction

from scheduling.core.perf_models import (
    Catalog,
    catalog_from_dict,
    gpu_to_dict,
    model_to_dict,
)

# --- performance profiles ---------------------------------------------------------------


class PerfProfileQuerySet(models.QuerySet):
    def upsert_catalog(self, catalog: Catalog, *, fitted_at: datetime) -> tuple[int, int]:
        """Store every model of ``catalog`` under its version; returns (created, updated).

        Rows are keyed by (workload, GPU model, version): refitting the same version
        updates its rows in place, a new version adds rows and keeps the old ones.
        """
        created = updated = 0
        with transaction.atomic():
            for model in catalog.models():
                errors = model.errors
                _, was_created = self.update_or_create(
                    workload=model.workload,
                    gpu_model=model.gpu_model,
                    version=catalog.version,
                    defaults={
                        "params": {"model": model_to_dict(model), "gpu": gpu_to_dict(model.gpu)},
                        "fitted_at": fitted_at,
                        "errors": dict(errors),
                        "iter_time_median_abs_error": errors.get("iter_time_median_abs_error"),
                        "iter_time_p90_abs_error": errors.get("iter_time_p90_abs_error"),
                        "n_heldout": errors.get("n_heldout"),
                    },
                )
                created += was_created
                updated += not was_created
        return created, updated

    def catalog(self, version: str) -> Catalog:
        """The stored profiles of ``version`` as a catalog the core can use."""
        rows = list(self.filter(version=version).order_by("workload", "gpu_model"))
        if not rows:
            raise PerfProfile.DoesNotExist(f"no performance profiles of version {version!r}")
        return catalog_from_dict(
            {
                "version": version,
                "gpus": {r.gpu_model: r.params["gpu"] for r in rows},
                "models": [r.params["model"] for r in rows],
            }
        )


class PerfProfile(models.Model):
    """A fitted performance model of one workload class on one GPU model.

    ``params`` holds the catalog entry as ``scheduling/core/perf_catalog.json`` has it
    (``model``: throughput and power parameters, batch sizes, sources; ``gpu``: the GPU
    model's idle draw, clocks, power limits and clock scaling), so a stored version can be
    turned back into a catalog (``PerfProfile.objects.catalog(version)``). The error
    columns are the held-out iteration-time errors of the fit, fractions (0.05 = 5 %).
    Written by ``manage.py fit_perf_models``; read-only in the admin.
    """

    workload = models.CharField(max_length=64)
    gpu_model = models.CharField(max_length=32)
    version = models.CharField(max_length=32)
    params = models.JSONField()
    fitted_at = models.DateTimeField()
    iter_time_median_abs_error = models.FloatField(null=True, blank=True)
    iter_time_p90_abs_error = models.FloatField(null=True, blank=True)
    n_heldout = models.PositiveIntegerField(null=True, blank=True)
    errors = models.JSONField(default=dict, blank=True)

    objects = PerfProfileQuerySet.as_manager()

    class Meta:
        ordering = ["workload", "gpu_model", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["workload", "gpu_model", "version"], name="perf_profile_unique_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.workload} on {self.gpu_model} (v{self.version})"
