"""``dormant test CASES.json``: Camunda Process Test cases run on the engine itself.

The file is Camunda's JSON test-case format (tasks/process_test_cases.py), the cases
run on an in-memory engine with a clock of its own (tasks/process_test_engine.py), one
instruction after another (tasks/process_test_steps.py). Each case prints one line,
``PASS name`` or ``FAIL name: instruction N (TYPE): why``; docs/process-tests.md is the
user's page.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dormant.engine_core.errors import DormantError
from dormant.tasks import process_test_cases as f
from dormant.tasks.process_test_engine import CaseFailed, Engine, Models, load_models
from dormant.tasks.process_test_steps import run_instruction

__all__ = ["CaseResult", "run_case", "run_file"]


@dataclass(frozen=True, slots=True)
class CaseResult:
    name: str
    passed: bool
    message: str = ""

    def line(self) -> str:
        return f"PASS {self.name}" if self.passed else f"FAIL {self.name}: {self.message}"


def run_case(case: f.TestCase, models: Models) -> CaseResult:
    """One case on a fresh engine: each instruction in order; the first that does not
    hold fails the case, named by its position and type, with why."""
    engine = Engine(models)
    for n, instruction in enumerate(case.instructions, start=1):
        engine.applied = 0
        try:
            run_instruction(engine, instruction)
            engine.settle()
        except CaseFailed as exc:
            return CaseResult(case.name, False, f"instruction {n} ({instruction.type}): {exc}")
        except DormantError as exc:
            # The engine refused what the case asked (a variable over its limit, ...).
            why = f"{type(exc).__name__}: {exc}"
            return CaseResult(case.name, False, f"instruction {n} ({instruction.type}): {why}")
    return CaseResult(case.name, True)


def run_file(cases_path: Path, model_paths: list[Path]) -> list[CaseResult]:
    """Every case of ``cases_path`` against ``model_paths`` (none given: the ``.bpmn``
    and ``.dmn`` files beside it). The file and the models are checked before any case
    runs: ``InvalidTestCases`` / ``InvalidModel``, the CLI's exit code 2."""
    cases = f.load(cases_path)
    paths = model_paths or sorted(
        p for p in cases_path.parent.iterdir() if p.suffix.lower() in (".bpmn", ".dmn")
    )
    models = load_models(paths)
    return [run_case(case, models) for case in cases.testCases]
