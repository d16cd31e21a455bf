"""Housekeeping that did nothing writes no log line.

Beat sends ``dormant.scan_deadlines`` and the job flow sweep every half second and the
outbox and batch sweeps every few seconds; Celery logs each send, each receipt and each
success at INFO. An idle ``dormant dev`` wrote 1.1 MB of such lines in 17 minutes (issue
28), burying the lines that matter. This filter drops, for those tasks only: beat's
"Sending due task", the worker's "received", and "succeeded" when the sweep returned 0
(found nothing). A sweep that found work still logs its success with the count, and the
tasks log what they did themselves (``scan_deadlines: 3 due``). Failures are never filtered.
"""

from __future__ import annotations

import logging
from typing import Any

from dormant.tasks import wire

__all__ = ["HOUSEKEEPING", "HousekeepingFilter", "install"]

HOUSEKEEPING: frozenset[str] = frozenset(
    {wire.SCAN_DEADLINES, wire.RELAY_OUTBOX, wire.BATCHES_SWEEP, wire.FLOW_SWEEP}
)
# Celery's loggers of a send (beat), a receipt (worker) and a success (pool).
_LOGGERS = ("celery.beat", "celery.worker.strategy", "celery.app.trace")
_IDLE = ("0", "None")


class HousekeepingFilter(logging.Filter):
    """False for a record about a housekeeping task that has nothing to tell."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        args: Any = record.args
        if record.name == "celery.beat":
            # 'Scheduler: Sending due task %s (%s)' % (entry name, task name)
            return not (
                isinstance(args, tuple) and "Sending due task" in str(record.msg)
                and any(a in HOUSEKEEPING for a in args)
            )  # fmt: skip
        if not isinstance(args, dict) or args.get("name") not in HOUSEKEEPING:
            return True
        if "return_value" in args:  # the success line
            return str(args["return_value"]) not in _IDLE
        return False  # the receipt: the success line, if any, says what it did


def install() -> None:
    """Attach the filter to Celery's three loggers (idempotent). Celery's own logging
    setup keeps logger filters, so installing at import time of the app is enough."""
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, HousekeepingFilter) for f in logger.filters):
            logger.addFilter(HousekeepingFilter())
