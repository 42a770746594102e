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
import re
import unicodedata
from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, RegexValidator
from django.utils.deconstruct import deconstructible

from scheduling.core.carbon_data import YEARS

# re-exported: the budget model's and the stored-rows check's bounds, the simulator's too
from scheduling.core.types import MIN_CARBON_LIMIT_KG, MIN_ENERGY_LIMIT_KWH

# Sanity bounds (see the module docstring); the docs (docs/reliability.md) list them.
MAX_GPUS_PER_JOB = 65_536
MAX_BATCH_SIZE = 2**24
MAX_ITERATIONS = 10**12
MAX_ENERGY_LIMIT_KWH = 1e9  # 1 TWh a period: a 100,000-GPU cluster uses ~0.05 TWh a month
MAX_CARBON_LIMIT_KG = 1e9
# The smallest limits, MIN_ENERGY_LIMIT_KWH and MIN_CARBON_LIMIT_KG (from the core, which
# the simulator shares): 1 Wh and 1 g CO2e. Below them a limit is no budget but a typing
# error, and a denormal one (5e-324 kWh) made used / limit overflow to inf: every read of the
# budget's usage (API, pages, /metrics) answered 500 once the team had used a joule.
# A budget's period lies within these (an end is exclusive, so 2100-01-01 itself may end one),
# the years whose carbon intensities are taken (``carbon_data.YEARS``).
# Years 1..9999 were stored: the scheduler paced a limit over 8,000 years (0.1 J a round for
# 100 kWh, so every job of the team waited), or from year 1 (its catch-up released it all).
EARLIEST_BUDGET_START = datetime(YEARS[0], 1, 1, tzinfo=UTC)
LATEST_BUDGET_END = datetime(YEARS[1], 1, 1, tzinfo=UTC)
MAX_COMMAND_CHARS = 8_192
# Learning rates of real training runs lie in about 1e-7..10; ONES scales them by batch ratios.
MIN_LEARNING_RATE = 1e-12
# A budget's soft limit as a share of its hard limit: the budget form's 1 % at least.
MIN_WARN_FRACTION = 0.01
# A job's parameter-count hint: from a tiny MLP (1,000) to 100 trillion, 500x GPT-3's 175 billion.
MIN_PARAM_COUNT = 1_000
MAX_PARAM_COUNT = 10**14
# A GPU's SM clocks: real ones lie in about 100..3,500 MHz (the fastest NVML lists, a
# GeForce's, a little over 3,100); NVML lists a few hundred steps. 4,000 leaves room for
# any GPU to come; 100,000 took a 5,000 MHz clock on an A100 that registered no maximum
# (the rounds would plan jobs at it; a sixth probe).
MAX_SM_CLOCK_MHZ = 4_000
MAX_SM_CLOCKS = 1_024
# A GPU's NVML index on its node: 0..255, what an agent's registration has always taken
# (a node holds a few to a few tens of GPUs; one byte leaves room for any). The model, so
# the admin GPU API, the Django admin and registration all hold it (the API took 300).
MAX_GPU_INDEX = 255
# A GPU's highest power limit: the smallest boards NVML manages top out at a few tens of
# watts (a T400 at 30 W, a GT 1030 at 30 W, an A2 at 60 W). A top limit below 10 W is no
# GPU's, and it is what every draw is judged by (a sample above 1.5 x it is refused): a
# GPU registered at 1 W had all its real draw refused, its jobs' teams never charged.
MIN_TOP_POWER_LIMIT_W = 10


TOP_POWER_LIMIT_MESSAGE = (
    "Must be at least {min_value} W: no GPU tops out below that, and every draw of this GPU "
    "above 1.5 x it would be refused from the energy ledger."
)


def whole_watts(value: float) -> int:
    """A power limit an agent reports (NVML's milliwatts as watts, a float) as the GPU row
    stores it: the nearest whole watt (Python's ``round``, half to even). Registration
    stores it so, and judges each of the three limits, and their order, on it
    (``telemetry.api.serializers.StoredWattsField``)."""
    return round(value)


# Registration's message: the floor is checked on the stored value, so 9.6 W (stored as
# 10 W) registers and 9.4 W (stored as 9 W) does not. Checked on the reported float, 9.6 W
# was refused although the row would have held 10 W, and 10.4 W registered as 10 W.
REPORTED_TOP_POWER_LIMIT_MESSAGE = (
    f"Must be at least {MIN_TOP_POWER_LIMIT_W} W once rounded to whole watts, as it is "
    f"stored ({MIN_TOP_POWER_LIMIT_W - 0.5:g} W or more): no GPU tops out below that, and "
    "every draw of this GPU above 1.5 x it would be refused from the energy ledger."
)


def top_power_limit_message(value: float) -> str | None:
    """Why ``value`` cannot be a GPU's highest power limit, or None if it can."""
    if value < MIN_TOP_POWER_LIMIT_W:
        return TOP_POWER_LIMIT_MESSAGE.format(min_value=MIN_TOP_POWER_LIMIT_W)
    return None


# A budget's limit of each kind: its floor, its ceiling and its unit as a message names it.
BUDGET_LIMITS = {
    "energy": (MIN_ENERGY_LIMIT_KWH, MAX_ENERGY_LIMIT_KWH, "kWh (1 Wh)"),
    "carbon": (MIN_CARBON_LIMIT_KG, MAX_CARBON_LIMIT_KG, "kg CO2e (1 g)"),
}


def budget_limit_floor_error(kind: str, limit: float) -> str | None:
    """Why a budget's ``kind`` limit may not be ``limit`` (zero or less, or under its
    floor), or None (the budget's ``clean`` and the budget what-if's form: the what-if took
    5e-324 kWh, a budget no one could save, and answered 200 with a replay that ran
    nothing). The ceiling is the model field's validator."""
    floor, _, unit = BUDGET_LIMITS[kind]
    if limit <= 0:
        return "Must be positive."
    if limit < floor:
        # A denormal limit made used / limit overflow to inf (see the bounds above).
        return f"Must be at least {floor:g} {unit}."
    return None


def period_bound_errors(start, end) -> dict[str, str]:
    """Field messages for a budget period outside ``EARLIEST_BUDGET_START`` ..
    ``LATEST_BUDGET_END`` (the budget's ``clean`` and the budget what-if's form)."""
    errors = {}
    if start and start < EARLIEST_BUDGET_START:
        errors["period_start"] = f"Must be on or after {EARLIEST_BUDGET_START:%Y-%m-%d %H:%M} UTC."
    if end and end > LATEST_BUDGET_END:
        errors["period_end"] = f"Must be on or before {LATEST_BUDGET_END:%Y-%m-%d %H:%M} UTC."
    return errors


def finite(value) -> None:
    """NaN and +-Infinity parse as floats but are no quantity."""
    if value is not None and not math.isfinite(value):
        raise ValidationError("Must be a finite number.", code="not_finite")


def _control_characters(value: str, allowed: str) -> list[str]:
    return sorted({repr(c) for c in value if unicodedata.category(c) == "Cc" and c not in allowed})


# The zero-width non-joiner and joiner are part of how Persian, Arabic and Indic names are
# spelt (a Persian compound keeps its parts apart with U+200C, a Devanagari half form
# takes U+200D) and of emoji sequences: invisible, but a name needs them.
JOINERS = "\u200c\u200d"


# Characters of other categories a name refuses as it refuses format characters: default-
# ignorable ones that draw nothing (the combining grapheme joiner, a mark; the Hangul
# fillers, letters drawn as a blank: "\u3164" is a team name that looks empty), the
# braille pattern blank (a symbol drawn as an empty cell: "\u2800" looked as empty, and was
# accepted) and the line and paragraph separators (Zl, Zp: a line break in scripts and many
# logs, in a one-line name). A sixth probe stored each in team, job, node and workload names.
# Variation selectors (emoji) and Mongolian ones (its spelling) stay accepted.
INVISIBLE_LETTERS = "\u034f\u115f\u1160\u17b4\u17b5\u2800\u3164\uffa0"

# The rule, in short: an invisible character is refused unless a script's spelling needs it
# (the joiners, variation selectors, and the Mongolian vowel separator between Mongolian
# letters, ``_MONGOLIAN_SEPARATED_VOWEL``); a character that only draws a blank is refused.


def refused_in_names(c: str) -> bool:
    """Whether a name refuses the character ``c`` as invisible, line-breaking or a direction
    control (control characters aside): format characters (Cf) but the joiners, the line
    and paragraph separators, and ``INVISIBLE_LETTERS``."""
    category = unicodedata.category(c)
    return (
        (category == "Cf" and c not in JOINERS)
        or category in ("Zl", "Zp")
        or c in INVISIBLE_LETTERS
    )


def _tags(letters: str) -> str:
    return "".join(chr(0xE0000 + ord(c)) for c in letters)


# The emoji flags of England, Scotland and Wales: a black flag, tag characters (format
# characters) spelling the region, a cancel tag. They draw the flag, and were refused as
# invisible ("🏴 Edinburgh"). Only these three: other tag letters draw a plain black flag
# on most systems, so two such names would look alike.
_FLAG_TAG_SEQUENCES = re.compile(
    "\U0001f3f4(?:" + "|".join(_tags(r) for r in ("gbeng", "gbsct", "gbwls")) + ")\U000e007f"
)


# The Mongolian vowel separator (U+180E, a format character since Unicode 6.3) is part of
# how Mongolian is spelt: it sets a word's final a or e apart from its stem ("ᠬᠠᠷᠠ\u180eᠠ").
# It was refused as U+200B is, so a Mongolian name could not be written, while the
# zero-width joiners other scripts need were accepted. Between Mongolian letters (a free
# variation selector may follow the first) it is accepted; anywhere else it draws nothing
# and is refused ("admin\u180e" looks like "admin").
_MONGOLIAN_LETTERS = "\u1820-\u1878\u1880-\u18aa"
_MONGOLIAN_FREE_VARIATION_SELECTORS = "\u180b-\u180d\u180f"
_MONGOLIAN_SEPARATED_VOWEL = re.compile(
    f"(?<=[{_MONGOLIAN_LETTERS}{_MONGOLIAN_FREE_VARIATION_SELECTORS}])\u180e(?=[{_MONGOLIAN_LETTERS}])"
)


def _format_characters(value: str) -> list[str]:
    """What ``refused_in_names`` refuses in ``value``, as ``U+202E`` (but the tag
    characters of a flag's emoji, ``_FLAG_TAG_SEQUENCES``, and the Mongolian vowel
    separator within a Mongolian word, ``_MONGOLIAN_SEPARATED_VOWEL``)."""
    value = _FLAG_TAG_SEQUENCES.sub("", value)
    value = _MONGOLIAN_SEPARATED_VOWEL.sub("", value)
    return sorted({f"U+{ord(c):04X}" for c in value if refused_in_names(c)})


@deconstructible
class NoControlCharacters:
    """Refuse NUL and other control characters (PostgreSQL refuses NUL in text; the others
    garble pages, logs and CSV exports). ``allowed`` keeps e.g. newlines in a command.

    Unless ``format_characters`` is true, refuse Unicode format characters too (category
    Cf) but the joiners (``JOINERS``): zero-width ones (U+200B, U+2060, U+FEFF) make two
    names that look alike differ, and direction controls (U+202A..U+202E, U+2066..U+2069,
    U+200E, U+200F, U+061C) reorder what a page or a log shows; and the line separators and
    invisible letters ``refused_in_names`` names. Letters, marks and digits of any script
    stay accepted ("Équipe Zürich", "研究组", Arabic names)."""

    def __init__(self, allowed: str = "", format_characters: bool = False):
        self.allowed = allowed
        self.format_characters = format_characters

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
        invisible = [] if self.format_characters else _format_characters(value)
        if invisible:
            raise ValidationError(
                "Contains an invisible, line-breaking or direction control character: %(chars)s.",
                code="format_characters",
                params={"chars": ", ".join(invisible[:5])},
            )

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, NoControlCharacters)
            and other.allowed == self.allowed
            and other.format_characters == self.format_characters
        )


single_line = NoControlCharacters()
# A client's submission key (the API's Idempotency-Key header, the submit form's hidden key).
SUBMISSION_KEY_MESSAGE = "A key is 1 to 128 printable ASCII characters, without spaces."
submission_key = RegexValidator(r"\A[\x21-\x7e]{1,128}\Z", SUBMISSION_KEY_MESSAGE)
# Multi-line text (a command, a log line) keeps format characters: only names refuse them.
multi_line = NoControlCharacters(allowed="\n\r\t", format_characters=True)
command_length = MaxLengthValidator(MAX_COMMAND_CHARS)
# (the list's own validator; each clock is bounded by the array's base field)
sm_clock_count = MaxLengthValidator(
    MAX_SM_CLOCKS, "Ensure this list has at most %(limit_value)d clocks (it has %(show_value)d)."
)
