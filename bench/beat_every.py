"""``dormant beat`` with the deadline scan's interval set by ``BENCH_SCAN_EVERY`` (seconds).

bench_lateness.py runs it to compare intervals side by side without changing the
product's default (``tasks.app.SCAN_DEADLINES_EVERY``).
"""

from __future__ import annotations

import os
import sys

from dormant.tasks import app as tasks_app
from dormant.tasks import cli

every = float(os.environ["BENCH_SCAN_EVERY"])
tasks_app.SCAN_DEADLINES_EVERY = every  # read again if the app is configured anew
tasks_app.app.conf.beat_schedule["dormant.scan_deadlines"]["schedule"] = every
sys.argv = ["dormant", "beat", "--loglevel", "WARNING"]
cli.main()
