#!/usr/bin/env bash
# The whole test suite, from a fresh clone: a virtualenv with dormant and its dev
# dependencies, the lint/format/type gates, the services the integration tests need,
# then pytest. Extra arguments go to pytest (e.g. `bash scripts/test.sh tests/core -q`).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
# The gates first: lint, format and types fail the run before any test starts.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
bash scripts/services.sh
# The console's browser tests drive Debian's chromium through chromium-driver.
command -v chromedriver >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver
}
# A selection (a path or a node id first) runs as asked, in one process.
if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
  exec .venv/bin/python -m pytest "$@"
fi
# The whole suite in two runs. Most tests wait on real worker processes rather than
# compute, so four test processes on two cores cut the wall time by more than half;
# each file stays on one process (its module-scoped stack is started once). Four, not
# three, once the CLI commands stopped paying a fresh interpreter's imports
# (tests/cli_forks.py): three left a fifth of the two cores idle (vmstat), four about a
# tenth, and the main run went from 10:08 to 9:31. The fault tests that
# stop or restart the machine's PostgreSQL or Redis (`restarts_services`) cannot share
# the services with anything: they run alone, afterwards. Every fault test's count line
# (sent / applied / duplicates / lost) is printed at the end of its run.
.venv/bin/python -m pytest -n "${DORMANT_TEST_PROCESSES:-4}" --dist loadfile \
  -m "not restarts_services" --cov --cov-report= "$@"
# Per-package totals and touched lines (docs/internals.md, "working on dormant"):
# engine_core under 95 % of its lines or of its touched lines fails the run, after the
# fault tests below have run and printed their counts.
gate=0
.venv/bin/python scripts/coverage_gate.py || gate=$?
.venv/bin/python -m pytest -m restarts_services "$@"
exit "$gate"
