"""``dormant test CASES.json`` (issue 26): Camunda Process Test cases on the engine.

The cases in tests/core/data/process-tests/ run on the real core through the test
engine: passing.json covers every supported action and assertion and must pass whole;
failing.json holds cases that must fail, each with the line that says why. A file
dormant cannot run is one classified line and exit code 2, before any case runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dormant.engine_core.errors import InvalidTestCases
from dormant.tasks import process_test_cases as f
from dormant.tasks import process_test_engine
from dormant.tasks.cli import main
from dormant.tasks.process_test_engine import load_models
from dormant.tasks.process_test_steps import HANDLERS
from dormant.tasks.process_tests import run_case, run_file

DATA = Path(__file__).parent / "data" / "process-tests"
MODEL = DATA / "order.bpmn"


def test_every_supported_instruction_has_a_handler_and_the_passing_cases_pass() -> None:
    handled = {
        name
        for model in HANDLERS
        for name in model.model_fields["type"].annotation.__args__  # type: ignore[attr-defined]
    }
    assert handled == f.SUPPORTED
    used = {
        i["type"]
        for c in json.loads((DATA / "passing.json").read_text())["testCases"]
        for i in c["instructions"]
    }
    assert used == f.SUPPORTED, f"passing.json does not use {sorted(f.SUPPORTED - used)}"
    results = run_file(DATA / "passing.json", [])
    assert [r.line() for r in results if not r.passed] == []
    assert len(results) == 10


def test_the_cases_pass_alike_when_every_step_stops_at_a_budget_of_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step stopped by DORMANT_STEP_BUDGET goes on in Continue triggers, which wake no
    token by name: the elements it passes are completed all the same."""
    monkeypatch.setenv("DORMANT_STEP_BUDGET", "1")
    results = run_file(DATA / "passing.json", [])
    assert [r.line() for r in results if not r.passed] == []


def test_failing_cases_fail_at_their_instruction_saying_why() -> None:
    lines = [r.line() for r in run_file(DATA / "failing.json", [MODEL])]
    assert lines == [
        "FAIL a variable with the wrong value: instruction 3 (ASSERT_VARIABLES): "
        "variable 'charged' expected 41, got 40",
        "FAIL the end is not reached while the message is missing: instruction 3 "
        "(ASSERT_ELEMENT_INSTANCE): element 'done' expected IS_COMPLETED, but it is not reached",
        "FAIL the review is not timed out before its day is over: instruction 4 "
        "(ASSERT_ELEMENT_INSTANCE): element 'review' expected IS_TERMINATED, but it is active x1",
        "FAIL a job nobody has: instruction 2 (COMPLETE_JOB): no open job matches "
        "jobType='refund'; open jobs: charge at charge",
        "FAIL a message nobody waits for: instruction 2 (CORRELATE_MESSAGE): message "
        "'shipped' with key 'f-5' correlated to no instance",
        "FAIL the review is assigned to someone else: instruction 3 (ASSERT_USER_TASK): "
        "user task 'review': assignee expected 'ann', got 'bob'",
        "FAIL charged after it shipped?: instruction 5 (ASSERT_ELEMENT_INSTANCES): expected "
        "completed in the order shipped, charge, completed charge, shipped",
        "PASS the one case of this file that passes",
    ]


def _case(*instructions: dict[str, object]) -> dict[str, object]:
    return {"testCases": [{"name": "c", "instructions": list(instructions)}]}


CREATE: dict[str, object] = {
    "type": "CREATE_PROCESS_INSTANCE",
    "processDefinitionSelector": {"processDefinitionId": "pt-order"},
}


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ([], 'a JSON object with a "testCases" array'),
        ({"testCases": []}, "has no test case"),
        ({"testCases": [{"instructions": []}]}, "case 1: a test case needs a non-empty name"),
        (
            _case(CREATE, {"type": "EVALUATE_DECISION", "decisionDefinitionSelector": {}}),
            "case 1 ('c'), instruction 2: instruction EVALUATE_DECISION is not supported",
        ),
        (_case({"type": "FLY_TO_THE_MOON"}), "unknown instruction type 'FLY_TO_THE_MOON'"),
        (
            _case({**CREATE, "startInstructions": [{"elementId": "review"}]}),
            "CREATE_PROCESS_INSTANCE: startInstructions are not supported",
        ),
        (
            _case({"type": "COMPLETE_JOB", "jobSelector": {}, "useExampleData": True}),
            "COMPLETE_JOB: useExampleData is not supported",
        ),
        (_case({"type": "COMPLETE_JOB"}), "COMPLETE_JOB: jobSelector: Field required"),
        (
            _case({"type": "INCREASE_TIME", "duration": "P1M"}),
            "duration 'P1M' is not an ISO 8601 duration of days and time",
        ),
        (
            _case({"type": "SET_TIME", "time": "9999-12-31T00:00:00Z"}),
            "SET_TIME: 9999-12-31T00:00:00+00:00 is not between 1970 and 3000",
        ),
        (
            _case({**CREATE, "variabels": {}}),
            "CREATE_PROCESS_INSTANCE: variabels: Extra inputs are not permitted",
        ),
    ],
)
def test_a_file_dormant_cannot_run_is_one_line_naming_what_is_wrong(
    document: object, says: str
) -> None:
    with pytest.raises(InvalidTestCases) as refused:
        f.parse(document)
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


def _dormant(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["dormant", "test", *args])
    with pytest.raises(SystemExit) as done:
        main()
    return int(done.value.code or 0)


def test_the_command_prints_a_line_per_case_and_exits_1_on_a_failure_2_on_a_bad_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert _dormant(monkeypatch, str(DATA / "passing.json")) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("PASS ") and out[-1] == "10 of 10 test case(s) passed"
    assert _dormant(monkeypatch, str(DATA / "failing.json"), str(MODEL)) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "1 of 8 test case(s) passed"
    bad = tmp_path / "cases.json"
    bad.write_text(json.dumps(_case({"type": "MOCK_DMN_DECISION", "decisionDefinitionId": "d"})))
    assert _dormant(monkeypatch, str(bad), str(MODEL)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "instruction MOCK_DMN_DECISION is not supported" in err
    bad.write_text("{not json")
    assert _dormant(monkeypatch, str(bad), str(MODEL)) == 2
    assert "not JSON" in capsys.readouterr().err
    broken = tmp_path / "broken.bpmn"
    broken.write_text("<definitions/>")
    assert _dormant(monkeypatch, str(DATA / "passing.json"), str(broken)) == 2
    assert str(broken) in capsys.readouterr().err
    lonely = tmp_path / "alone" / "cases.json"
    lonely.parent.mkdir()
    lonely.write_text((DATA / "passing.json").read_text())
    assert _dormant(monkeypatch, str(lonely)) == 2
    assert "no process to test" in capsys.readouterr().err


def test_a_mock_worker_in_a_loop_that_never_waits_is_stopped_at_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process_test_engine, "MAX_TRIGGERS_PER_INSTRUCTION", 40)
    case = f.parse(
        _case(
            {"type": "MOCK_JOB_WORKER_COMPLETE_JOB", "jobType": "spin"},
            {**CREATE, "processDefinitionSelector": {"processDefinitionId": "pt-spin"}},
        )
    ).testCases[0]
    result = run_case(case, load_models([MODEL]))
    assert result.line() == (
        "FAIL c: instruction 2 (CREATE_PROCESS_INSTANCE): more than 40 triggers in one "
        "instruction: a mock worker or a loop that never ends?"
    )
