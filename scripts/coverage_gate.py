"""Coverage per package from the last test run (the ``.coverage`` file pytest-cov
wrote), and the gates CI holds on it: engine_core's line coverage at 95 % or more, and
95 % or more of the engine_core lines touched since the diff base.

Run after ``pytest --cov``: prints one line per package (statements, missed, line
coverage, line + branch coverage), then the touched lines per package — the lines
added or changed since the diff base that coverage can measure, and how many of them
the run executed (``diff-cover`` reads the diff against the coverage report) — and
exits 1 when engine_core is under a bar.

The diff base is the commit in ``.ci/diff-coverage-base`` (main's head when the
current round of work began; ``DORMANT_DIFF_BASE`` overrides it), compared as
``base...HEAD`` plus uncommitted changes: what this round touched. A base missing
from the clone's history fails the run rather than skipping the gate.

Only the test processes are measured; the worker and beat subprocesses the
integration tests start are not, so the shell packages show less than they run
(their touched-lines figure is reported, not gated).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from coverage import Coverage
from coverage.exceptions import NoDataError, NoSource

PACKAGES = ["engine_core", "persistence", "scheduler", "tasks"]
# package -> minimum line coverage, percent (DORMANT_COVERAGE_MIN_ENGINE_CORE moves it)
GATED = {"engine_core": float(os.environ.get("DORMANT_COVERAGE_MIN_ENGINE_CORE", "95"))}
# package -> minimum coverage of its touched lines, percent
TOUCHED_GATED = {
    "engine_core": float(os.environ.get("DORMANT_DIFF_COVERAGE_MIN_ENGINE_CORE", "95"))
}
BASE_FILE = Path(".ci/diff-coverage-base")


def package_of(path: str) -> str | None:
    """The package a measured or diffed file belongs to (Python files only: the Jinja
    templates the console executes are traced too)."""
    normal = "/" + path.replace("\\", "/")
    if not normal.endswith(".py"):
        return None
    return next((p for p in PACKAGES if f"/{p}/" in normal), None)


def package_totals(cov: Coverage) -> bool:
    """One line printed per package; True when a gate fails."""
    files = cov.get_data().measured_files()
    failed = False
    print(f"{'package':<12} {'stmts':>6} {'miss':>6} {'lines':>7} {'+branches':>10}")
    for package in PACKAGES:
        mine = [f for f in files if package_of(f) == package]
        statements = missed = 0
        for path in list(mine):
            try:
                _, stmts, _, missing, _ = cov.analysis2(path)
            except NoSource:  # measured, then moved or deleted: not part of the tree now
                mine.remove(path)
                continue
            statements += len(stmts)
            missed += len(missing)
        if not statements:
            print(f"{package:<12} {'-':>6} {'-':>6} {'-':>7} {'-':>10}")
            continue
        lines = 100.0 * (statements - missed) / statements
        try:
            combined = cov.report(morfs=mine, file=io.StringIO())
        except NoDataError:
            combined = 0.0
        bar = GATED.get(package)
        verdict = "" if bar is None else (" ok" if lines >= bar else f" UNDER {bar:.0f} %")
        failed |= bar is not None and lines < bar
        print(
            f"{package:<12} {statements:>6} {missed:>6} {lines:>6.1f}% {combined:>9.1f}%{verdict}"
        )
    return failed


def diff_base() -> str:
    """The commit the touched lines are counted from."""
    named = os.environ.get("DORMANT_DIFF_BASE", "").strip()
    if named:
        return named
    words = BASE_FILE.read_text().split() if BASE_FILE.is_file() else []
    return words[0] if words else ""


def is_commit(ref: str) -> bool:
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    return found.returncode == 0


@dataclass
class Touched:
    """A package's touched lines: how many coverage can measure, how many did not run,
    and where those are (``file: line, line``)."""

    lines: int = 0
    missed: int = 0
    where: list[str] = field(default_factory=list)


def touched_lines(cov: Coverage, base: str) -> dict[str, Touched]:
    """package -> its touched lines, by diff-cover.

    The report handed to diff-cover is LCOV, whose file names are relative to the
    repository: in Cobertura XML they are relative to each ``source`` directory, and
    ``engine_core/jobs.py`` and ``tasks/jobs.py`` would both be ``jobs.py``. It has
    every file of the packages, executed or not (``source`` in ``[tool.coverage.run]``),
    so a touched file no test imports counts as missed rather than vanishing from the
    diff; files coverage cannot parse (templates) are left out.
    """
    with tempfile.TemporaryDirectory() as tmp:
        lcov, report = Path(tmp, "coverage.lcov"), Path(tmp, "diff-cover.json")
        cov.lcov_report(outfile=str(lcov), ignore_errors=True)
        tool = Path(sys.executable).with_name("diff-cover")
        subprocess.run(
            [str(tool), str(lcov), f"--compare-branch={base}", f"--format=json:{report}", "-q"],
            check=True,
        )
        stats = json.loads(report.read_text())["src_stats"]
    totals: dict[str, Touched] = {}
    for path, stat in sorted(stats.items()):
        package = package_of(path)
        if package is None:
            continue
        missed = stat["violation_lines"]
        touched = totals.setdefault(package, Touched())
        touched.lines += len(stat["covered_lines"]) + len(missed)
        touched.missed += len(missed)
        if missed:
            touched.where.append(f"{path}: {', '.join(str(n) for n in missed)}")
    return totals


def touched_report(cov: Coverage) -> bool:
    """Prints the touched lines per package; True when a gate fails."""
    base = diff_base()
    if not base or not is_commit(base):
        print(
            f"touched lines: diff base {base or '(none)'} is not a commit of this clone "
            f"(set it in {BASE_FILE} or DORMANT_DIFF_BASE; a shallow clone needs its history)"
        )
        return True
    totals = touched_lines(cov, base)
    print(f"touched lines since {base[:12]} (diff coverage):")
    print(f"{'package':<12} {'lines':>6} {'miss':>6} {'covered':>8}")
    failed = False
    for package in PACKAGES:
        touched = totals.get(package, Touched())
        bar = TOUCHED_GATED.get(package)
        if not touched.lines:
            print(f"{package:<12} {0:>6} {'-':>6} {'-':>8}" + (" ok" if bar else ""))
            continue
        covered = 100.0 * (touched.lines - touched.missed) / touched.lines
        verdict = "" if bar is None else (" ok" if covered >= bar else f" UNDER {bar:.0f} %")
        failed |= bar is not None and covered < bar
        print(f"{package:<12} {touched.lines:>6} {touched.missed:>6} {covered:>7.1f}%{verdict}")
    for package in TOUCHED_GATED:  # where a gated package's touched lines did not run
        for missing in totals.get(package, Touched()).where:
            print(f"  not run: {missing}")
    return failed


def main() -> int:
    cov = Coverage()
    cov.load()
    failed = package_totals(cov)
    failed |= touched_report(cov)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
