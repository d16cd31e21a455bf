#!/usr/bin/env bash
# The whole test suite, from a fresh clone: a virtualenv with dormant and its dev
# dependencies, the lint/format/type gates, the services the integration tests need,
# then pytest. Extra
# arguments go to pytest (e.g. `bash scripts/test.sh tests/core -q`).
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
command -v chromedriver >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; }
exec .venv/bin/python -m pytest "$@"
