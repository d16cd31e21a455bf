"""``dormant test CASES.json [MODEL...]``: run Camunda Process Test cases (registered
onto tasks/cli.py's group; tasks/process_tests.py runs them, docs/process-tests.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

__all__ = ["register"]


def register(cli: click.Group) -> None:
    @cli.command(name="test")
    @click.argument("cases", type=click.Path(dir_okay=False))
    @click.argument("models", nargs=-1, type=click.Path(dir_okay=False))
    def test_cases(cases: str, models: tuple[str, ...]) -> None:
        """Run the test cases of CASES.json (Camunda's JSON test-case format) against
        MODEL.bpmn / MODEL.dmn (default: those beside CASES.json), each on a fresh
        in-memory engine with its own clock. One PASS/FAIL line per case; exit code 1
        when a case fails, 2 when the file or a model cannot be read."""
        from dormant.tasks.process_tests import run_file

        results = run_file(Path(cases), [Path(m) for m in models])
        for result in results:
            click.echo(result.line())
        failed = sum(not r.passed for r in results)
        click.echo(f"{len(results) - failed} of {len(results)} test case(s) passed")
        sys.exit(1 if failed else 0)
