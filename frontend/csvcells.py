"""CSV exports that a spreadsheet cannot execute (OWASP "CSV injection").

A cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is read as a
formula by Excel, LibreOffice and Google Sheets, so a job named ``=HYPERLINK(...)`` would become
a live link in an admin's report. Such cells get a leading apostrophe, which spreadsheets show
as text and do not display. A cell that is a plain number (``-1.5``, ``+2``, ``-3e-4``) stays as
it is: it is data, not a formula, and must stay numeric.
"""

from __future__ import annotations

import csv
import math
import re

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# A plain decimal number, as Python or a spreadsheet writes it; no spaces, no expressions.
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def is_plain_number(text: str) -> bool:
    return bool(_NUMBER.fullmatch(text)) and math.isfinite(float(text))


def neutralise(value):
    """``value`` safe to put in a CSV cell; non-strings (numbers, None) pass unchanged."""
    if not isinstance(value, str):
        return value
    # Spreadsheets skip leading blanks before looking for a formula.
    if value.lstrip(" ").startswith(FORMULA_START) and not is_plain_number(value):
        return "'" + value
    return value


class SafeWriter:
    """``csv.writer`` whose every cell passes through ``neutralise``."""

    def __init__(self, stream, **fmtparams):
        self._writer = csv.writer(stream, **fmtparams)

    def writerow(self, row):
        return self._writer.writerow([neutralise(cell) for cell in row])

    def writerows(self, rows):
        for row in rows:
            self.writerow(row)
