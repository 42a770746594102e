"""How far one job moves a shared workload profile (issue 12, point 3: "one job can move a
shared profile only by a bounded weight"), measured on ``scheduling.core.profiles.fold``.

A resnet50@A100 profile is built from the catalog's own model (the first job joins it
with a bounded share) and three honest jobs, each measured at the catalog's predictions at
1, 2 and 4 GPUs (20 measurements per configuration). Then one job whose iteration times are
``factor`` times the catalog's (absurd but within ``online_model.refusal_reason``'s
bounds), with 1,000 measurements per configuration (its share is capped at
``MAX_JOB_WEIGHT``), is folded in, either at the profile's configurations or at 8 GPUs,
which the profile never measured. Printed: the profile's predicted iteration time after
over before, at 1, 2, 4 and 8 GPUs.

Then consistent jobs: a workload whose every job runs ``factor`` times the catalog's time
at 1, 2 and 4 GPUs (a bigger model under the same name), folded one after another into
a profile that starts from the catalog's model. Printed: the profile's prediction at
2 GPUs over the catalog's after each of six jobs.

    .venv/bin/python benchmarks/bench_profile_share.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduling.core import profiles  # noqa: E402
from scheduling.core.online_model import Observation, refusal_reason  # noqa: E402
from scheduling.core.perf_models import load_catalog  # noqa: E402

BATCH = 256
SHOWN = (1, 2, 4, 8)


def measured(prior, n_gpus: int, *, factor: float = 1.0, weight: float = 20.0) -> Observation:
    at = Observation(n_gpus=n_gpus, n_nodes=1, local_batch=BATCH / n_gpus)
    return Observation(
        n_gpus=n_gpus,
        n_nodes=1,
        local_batch=BATCH / n_gpus,
        iter_time_s=prior.iter_time_s(at.config()) * factor,
        power_w=prior.power_w(at.config()),
        weight=weight,
    )


def moved(prior, factor: float, at_gpus: tuple[int, ...], honest_jobs: int = 3) -> str:
    profile = None
    for j in range(honest_jobs):
        honest = [measured(prior, n) for n in (1, 2, 4)]
        profile = profiles.fold(profile, prior, honest, workload="resnet50", measured_prior=j == 0)
    before = {n: profile.model.iter_time_s(measured(prior, n).config()) for n in SHOWN}
    job = [measured(prior, n, factor=factor, weight=1000.0) for n in at_gpus]
    refused = [refusal_reason(o) for o in job if refusal_reason(o)]
    if refused:
        return f"refused ({refused[0]})"
    after = profiles.fold(profile, prior, job, workload="resnet50").model
    return "  ".join(
        f"{n}: {after.iter_time_s(measured(prior, n).config()) / before[n]:.3g}x" for n in SHOWN
    )


def consistent(prior, factor: float, jobs: int = 6) -> str:
    profile, out = None, []
    for _ in range(jobs):
        job = [measured(prior, n, factor=factor, weight=60.0) for n in (1, 2, 4)]
        profile = profiles.fold(
            profile, prior, job, workload="resnet50", measured_prior=profile is None
        )
        at = measured(prior, 2).config()
        out.append(f"{profile.model.iter_time_s(at) / prior.iter_time_s(at):.3g}x")
    return "  ".join(out)


def main() -> None:
    prior = load_catalog().get("resnet50", "A100")
    out = sys.stdout
    out.write(f"max job weight {profiles.MAX_JOB_WEIGHT}; catalog resnet50@A100, batch {BATCH}\n")
    for factor in (1e-3, 1e-2, 0.1, 10.0, 100.0, 1000.0):
        for at_gpus in ((1, 2, 4), (8,)):
            shown = ",".join(map(str, at_gpus))
            out.write(f"job at {factor:g}x, at {shown} GPUs: {moved(prior, factor, at_gpus)}\n")
    for factor in (0.1, 10.0, 30.0, 100.0):
        out.write(
            f"consistent jobs at {factor:g}x, 2 GPUs after 1..6: {consistent(prior, factor)}\n"
        )


if __name__ == "__main__":
    main()
