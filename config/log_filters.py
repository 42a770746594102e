"""Logging filters of the service (wired in ``settings.LOGGING``)."""

from __future__ import annotations

import logging


class RefusalsWithoutTraceback(logging.Filter):
    """Keeps the one line Django logs for a refused request (a 4xx: "Forbidden (Permission
    denied): /budgets/3/edit/") and drops the traceback it attaches: a refusal is the
    service working, and a traceback per 403 buried the real errors. A 5xx keeps its
    traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
