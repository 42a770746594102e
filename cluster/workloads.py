"""Which workloads and GPU models a job may ask for: any (issue 12 point 1). A workload the
current performance catalog (``scheduling.perf_lookup.current_catalog``: the stored version,
else the shipped ``perf_catalog.json``) knows is predicted from its measured model; any other
name, and any GPU model the catalog lacks, from an estimate (``perf_lookup.model_for``, the
lookup the rounds and predictions use: the catalog workload the job says it ``resembles``,
else the first one on that GPU model), marked ``estimated`` wherever it is shown, which the
job's telemetry then corrects. Two rules here: a ``resembles`` hint must name a catalog
workload, since it is what the estimate is taken from; and a name that is a near miss of a
catalog workload (``near_miss``) needs a hint, since it is likelier a typo than a new
workload, and an estimate refuses nothing at submit (``scheduling.feasibility``)."""

import difflib
import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from scheduling.core.perf_models import Catalog, load_catalog


@lru_cache(maxsize=1)
def perf_catalog() -> Catalog:
    """The shipped catalog (no database): for defaults and tests. Validation, rounds and
    predictions use ``scheduling.perf_lookup.current_catalog``."""
    return load_catalog()


def known_workloads() -> tuple[str, ...]:
    from scheduling.perf_lookup import current_catalog  # the scheduling app's models

    return current_catalog().workloads()


def catalog_name(workload: str, known: Sequence[str] | None = None) -> str:
    """``workload`` as the catalog spells it where it names a catalog workload in another
    case (``RESNET50`` is ``resnet50``), else unchanged: read as a new, unknown workload,
    it was predicted from an estimate and skipped the submit checks a catalog workload
    gets (the longest job allowed, budgets that could never pay for it), as GPU model
    names in any case were already read as the catalog's. ``known``: the catalog's
    workloads, where the caller has them (``known_workloads``). A name the catalog lacks is
    spelled as the cluster's learned model of it is (``_learned_spelling``)."""
    by_fold = {workload_fold(w): w for w in (known_workloads() if known is None else known)}
    found = by_fold.get(workload_fold(workload.strip()))
    return found or _learned_spelling(workload) or workload


def _learned_spelling(workload: str) -> str | None:
    """The spelling of the workload profile (a model earlier jobs taught) that ``workload``
    names in another case or form, the first learned where there are several; None where
    none does. Read apart, ``mynet`` after ``MyNet``'s jobs started from an estimate instead
    of what they had learned, and passed the submit checks that model would refuse, as a
    catalog workload in another case did.

    Matched on ``WorkloadProfile.workload_key``, the stored name's ``workload_fold``: one
    rule, in Python, for the database's filter and the comparison. (The filter was
    PostgreSQL's ``upper`` over the stored name's NFKC form, the comparison Python's
    ``casefold``: ``upper`` keeps "\u00df" where ``casefold`` makes it "ss", so a job named
    ``STRASSENET`` did not find the profile learned as ``Stra\u00dfeNet``.)"""
    from django.db.models import Min

    from scheduling.models import WorkloadProfile  # the scheduling app's models

    name = workload.strip()
    if not name:
        return None
    return (
        WorkloadProfile.objects.filter(workload_key=workload_fold(name))
        .values("workload")
        .annotate(first_at=Min("created_at"))
        .order_by("first_at", "workload")
        .values_list("workload", flat=True)
        .first()
    )


def workload_fold(name: str) -> str:
    """The form in which two workload names are one workload: compatibility forms and
    case folded (NFKC, then Python's full ``casefold``): resnet50 in fullwidth letters is
    resnet50 as RESNET50 is, and "\u00df" is "ss"; kept apart, it was a new workload that skipped
    every submit check. Catalog names and learned profiles' names (``WorkloadProfile.
    workload_key``) are matched by it alone."""
    return unicodedata.normalize("NFKC", name).casefold()


# How alike (difflib's ratio of the two names, separators and case dropped) a name must be
# to a catalog workload to read as a typo of it: "resnt50" is 0.93 of "resnet50", "bart" 0.75
# of "bert". Names whose digits differ (resnet18, vgg19, gpt3) are another size or version,
# never a typo.
NEAR_MISS_RATIO = 0.85
_SEPARATORS = re.compile(r"[\s_-]+")


def _folded(name: str) -> str:
    # Combining marks dropped too: "bert" with an acute accent on its t is a look-alike.
    parts = unicodedata.normalize("NFKD", workload_fold(name))
    return _SEPARATORS.sub("", "".join(c for c in parts if not unicodedata.combining(c)))


def near_miss(workload: str, known: Sequence[str]) -> str | None:
    """The catalog workload that ``workload`` (not one of ``known``) is likely a typo of:
    the one it equals once case, spaces, ``-`` and ``_`` are dropped (``resnet_50`` is
    ``resnet50``), or with one letter struck twice (``resnett50``), else the closest with
    the same digits, no shorter than ``workload``, whose likeness is at least
    ``NEAR_MISS_RATIO``; None for a name far from all of them."""
    if workload in known:
        return None
    folded = {_folded(k): k for k in known}
    typed = _folded(workload)
    if typed in folded:
        return folded[typed]
    # A letter struck twice (resnett50, berrt) is the one added letter that is a typo.
    for i in range(1, len(typed)):
        if typed[i] == typed[i - 1] and typed[:i] + typed[i + 1 :] in folded:
            return folded[typed[:i] + typed[i + 1 :]]
    # Otherwise a typo drops, swaps or changes letters; a name with letters added
    # (resnext50, seresnet50, resnet50d, yolov3s, xbert) is more likely a model of its own.
    digits = re.sub(r"\D", "", typed)
    alike = [f for f in folded if re.sub(r"\D", "", f) == digits and len(f) >= len(typed)]
    close = difflib.get_close_matches(typed, alike, n=1, cutoff=NEAR_MISS_RATIO)
    return folded[close[0]] if close else None


def _learned(workload: str) -> bool:
    """Whether earlier jobs of ``workload`` taught the cluster a model of it (a workload
    profile): then it is a workload of its own, and the submit checks trust that model."""
    from scheduling.models import WorkloadProfile  # the scheduling app's models

    return WorkloadProfile.objects.filter(workload=workload).exists()


def workload_errors(
    workload: str,
    gpu_model: str = "",
    *,
    resembles: str = "",
    param_count: int | None = None,
    known: Sequence[str] | None = None,
) -> dict[str, str]:
    """Per-field messages for the workload and its hints, for the job form and the API alike.
    Any workload name and any GPU model are accepted (see above), but for a near miss of a
    catalog workload (``near_miss``) given with neither hint (``resembles``,
    ``param_count``): read as a new workload, its typo (``resnet_50``) was sized by an
    estimate and passed every submit check a catalog workload gets (the longest job
    allowed, budgets that could never pay for it). A name the cluster has learned a model
    of is its own workload. ``gpu_model`` stays a parameter for the callers that pass it.
    ``known`` as for ``catalog_name``."""
    known = known_workloads() if known is None else known
    if resembles:
        if resembles not in known:
            return {
                "resembles": f"Not a catalog workload: {resembles!r}; known: {', '.join(known)}."
            }
        return {}
    if param_count is not None:
        return {}
    meant = near_miss(workload, known)
    if meant is not None and not _learned(workload):
        return {
            "workload": f"{workload!r} is not a catalog workload; did you mean {meant!r}? To "
            "submit a new workload, give resembles=... (the catalog workload it is most like) "
            "or param_count."
        }
    return {}


def _gpu_fold(key: str) -> str:
    # Case and spaces: an all-lowercase product name keys as "rtx 9090" where NVML's own
    # spelling keys as "RTX9090" (``gpu_model_key`` reads a lowercase word as a name).
    return re.sub(r"\s+", "", key.casefold())


def same_gpu_model(a: str, b: str) -> bool:
    """Whether GPU model keys ``a`` and ``b`` name one model, spelled apart (case, spaces)."""
    return _gpu_fold(a) == _gpu_fold(b)


def gpu_model_spelling(key: str) -> str:
    """The GPU model ``key`` (``gpu_model_key``'s) as the current catalog spells it, else as
    GPUs registered before spell it (the first registered), else ``key``: an agent that
    reported ``a100`` (its own backend, a product name lower-cased) registered a GPU model
    of its own beside the catalog's A100, estimated from the nearest catalog GPU instead of
    the A100's measured models and never given a job that asked for A100; a job asking for
    ``a100`` before any A100 registered waited for good. Agents' registrations and jobs'
    submits share this."""
    from cluster.models import Gpu
    from scheduling.perf_lookup import current_catalog  # the scheduling app's models

    if not key:
        return key
    for name in sorted(current_catalog().gpus):
        if same_gpu_model(name, key):
            return name
    # Registered models are few: each spelling once, with its first GPU (the first wins).
    seen = Gpu.objects.order_by("model", "pk").distinct("model").values_list("model", "pk")
    matches = sorted((pk, name) for name, pk in seen if same_gpu_model(name, key))
    if matches:
        return matches[0][1]
    # A board of its own over a known bare key ("a100-PCIe", a lower-cased "nvidia
    # a100-pcie-40gb") is spelled as that key is, "A100-PCIe": kept as "a100-PCIe", it was
    # not read as A100's board split, and a GPU stored as A100 reporting it was refused as
    # a model change.
    from telemetry.agent.backends import BOARD_SUFFIXES

    for suffix in BOARD_SUFFIXES.values():
        if len(key) > len(suffix) and key.casefold().endswith(suffix.casefold()):
            return gpu_model_spelling(key[: -len(suffix)]) + suffix
    return key
