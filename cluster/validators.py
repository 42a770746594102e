"""Field validators that hold on every input path.

They sit on the model fields, so ``full_clean()`` (forms, the admin, ``services.submit_job``)
and the API (``cluster.api.serializers.run_model_clean`` runs the fields' validators for the
values a request sets) refuse the same values with the same messages. The limits are sanity
bounds far above any real cluster, not policy: they keep a typing error or a hostile client
from storing numbers that break the arithmetic downstream (NaN compares false to everything,
10**20 iterations overflow a bigint, a 5 MB command is echoed in every list and agent poll).
"""

from __future__ import annotations

import math
import unicodedata
from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator
from django.utils.deconstruct import deconstructible

# Sanity bounds (see the module docstring); the docs (docs/reliability.md) list them.
MAX_GPUS_PER_JOB = 65_536
MAX_BATCH_SIZE = 2**24
MAX_ITERATIONS = 10**12
MAX_ENERGY_LIMIT_KWH = 1e9  # 1 TWh a period: a 100,000-GPU cluster uses ~0.05 TWh a month
MAX_CARBON_LIMIT_KG = 1e9
# The smallest limits: 1 Wh and 1 g CO2e. Below them a limit is no budget but a typing error,
# and a denormal one (5e-324 kWh) made used / limit overflow to inf: every read of the
# budget's usage (API, pages, /metrics) answered 500 once the team had used a joule.
MIN_ENERGY_LIMIT_KWH = 0.001
MIN_CARBON_LIMIT_KG = 0.001
# A budget's period lies within these (an end is exclusive, so 2100-01-01 itself may end one).
# Years 1..9999 were stored: the scheduler paced a limit over 8,000 years (0.1 J a round for
# 100 kWh, so every job of the team waited), or from year 1 (its catch-up released it all).
EARLIEST_BUDGET_START = datetime(2000, 1, 1, tzinfo=UTC)
LATEST_BUDGET_END = datetime(2100, 1, 1, tzinfo=UTC)
MAX_COMMAND_CHARS = 8_192
# Learning rates of real training runs lie in about 1e-7..10; ONES scales them by batch ratios.
MIN_LEARNING_RATE = 1e-12
# A job's parameter-count hint: from a tiny MLP (1,000) to 100 trillion, 500x GPT-3's 175 billion.
MIN_PARAM_COUNT = 1_000
MAX_PARAM_COUNT = 10**14


def finite(value) -> None:
    """NaN and +-Infinity parse as floats but are no quantity."""
    if value is not None and not math.isfinite(value):
        raise ValidationError("Must be a finite number.", code="not_finite")


def _control_characters(value: str, allowed: str) -> list[str]:
    return sorted({repr(c) for c in value if unicodedata.category(c) == "Cc" and c not in allowed})


@deconstructible
class NoControlCharacters:
    """Refuse NUL and other control characters (PostgreSQL refuses NUL in text; the others
    garble pages, logs and CSV exports). ``allowed`` keeps e.g. newlines in a command."""

    def __init__(self, allowed: str = ""):
        self.allowed = allowed

    def __call__(self, value) -> None:
        if not isinstance(value, str):
            return
        bad = _control_characters(value, self.allowed)
        if bad:
            raise ValidationError(
                "Control characters are not allowed: %(chars)s.",
                code="control_characters",
                params={"chars": ", ".join(bad[:5])},
            )

    def __eq__(self, other) -> bool:
        return isinstance(other, NoControlCharacters) and other.allowed == self.allowed


single_line = NoControlCharacters()
multi_line = NoControlCharacters(allowed="\n\r\t")
command_length = MaxLengthValidator(MAX_COMMAND_CHARS)
