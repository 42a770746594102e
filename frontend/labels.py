"""Words for the machine codes the pages show: why a job waits, what a round decided.

Keyed by the stored strings (``scheduling.core.types.WaitCode`` values, ``node_lost`` from the
liveness check, ``slurm_refused``/``slurm_pending``/``slurm_lost`` from the Slurm executor,
``DecisionAction`` values plus ``wait`` and ``keep``), so a code added elsewhere shows as
itself until it gets words here, never as nothing.
"""

from __future__ import annotations

from scheduling.core.types import WaitCode

WAIT_LABELS = {
    WaitCode.BUDGET_EXHAUSTED: "Budget used up",
    WaitCode.WAITING_FOR_CLEAN_HOUR: "Waiting for a cleaner hour",
    WaitCode.NO_FREE_BLOCK: "No free GPUs of the size it needs",
    WaitCode.BEHIND_IN_QUEUE: "Behind other jobs in the queue",
    WaitCode.DELAYED_FOR_LOCALITY: "Held back for a better placement",
    WaitCode.PREEMPTED: "Preempted by the scheduler",
    WaitCode.NO_PERF_MODEL: "No performance model for its workload",
    WaitCode.NO_MATCHING_GPU: "No GPU of the requested model",
    WaitCode.OVER_ROUND_ALLOWANCE: "Over this round's share of the budget",
    "node_lost": "Its node went silent",
    "slurm_refused": "Slurm refused it",
    "slurm_pending": "Slurm kept it pending",
    "slurm_lost": "Slurm lost track of it",
}

ACTION_LABELS = {
    "start": "Started",
    "stop": "Paused",
    "resize": "Resized",
    "retune": "Retuned",
    "wait": "Waits",
    "keep": "Keeps running",
}


def wait_label(code: str) -> str:
    return WAIT_LABELS.get(code, code.replace("_", " ").capitalize() if code else "")


def action_label(action: str) -> str:
    return ACTION_LABELS.get(action, action)


_REDUNDANT_PREFIXES = ("Waiting: ", "Waiting - ", "Waits: ")


def reason_sentence(text: str) -> str:
    """A policy's sentence without its own "Waiting: " lead-in (the page already says why it
    waits), first letter capitalised."""
    text = (text or "").strip()
    for prefix in _REDUNDANT_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix) :]
            break
    return text[:1].upper() + text[1:]
