"""The test-case file ``dormant test`` reads: Camunda Process Test's JSON test cases.

The format is Camunda's, as its documentation publishes it ("JSON test cases", schema
``cpt-test-cases``; Web Modeler's Test mode saves the same files, adding ``processId``
and ``metadata``, which are read and ignored): ``testCases``, each a ``name``, an
optional ``description`` and ``instructions``, each instruction an object whose
``type`` says what it does. These models are written from that documentation, not
copied from Camunda's sources; docs/process-tests.md lists what each instruction does
on dormant.

A file is checked whole before any case runs, so a typo in the last case is not found
after the first ten ran: an instruction type dormant does not run (``EVALUATE_DECISION``,
...), a field it does not know, or a documented option it does not support
(``useExampleData``, ``startInstructions``) is one ``InvalidTestCases`` line naming the
case, the instruction's position and what is wrong.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from dormant.engine_core.errors import InvalidTestCases

__all__ = [
    "MAX_FILE_BYTES",
    "SUPPORTED",
    "UNSUPPORTED",
    "ElementSelector",
    "Instruction",
    "TestCase",
    "TestCases",
    "iso_duration",
    "load",
]

# A test file is written by hand or exported by a modeler: a few hundred kilobytes at most.
MAX_FILE_BYTES = 4 * 1024 * 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- selectors ------------------------------------------------------------------------


class ProcessDefinitionSelector(_Strict):
    processDefinitionId: str


class ProcessInstanceSelector(_Strict):
    processDefinitionId: str


class ElementSelector(_Strict):
    elementId: str | None = None
    elementName: str | None = None


class JobSelector(_Strict):
    jobType: str | None = None
    elementId: str | None = None
    processDefinitionId: str | None = None


class UserTaskSelector(_Strict):
    elementId: str | None = None
    taskName: str | None = None
    processDefinitionId: str | None = None


class MessageSelector(_Strict):
    messageName: str
    correlationKey: str | None = None


class IncidentSelector(_Strict):
    elementId: str | None = None
    processDefinitionId: str | None = None


Variables = dict[str, Any]

# -- instructions: actions ------------------------------------------------------------


class CreateProcessInstance(_Strict):
    type: Literal["CREATE_PROCESS_INSTANCE"]
    processDefinitionSelector: ProcessDefinitionSelector
    variables: Variables = Field(default_factory=dict)
    startInstructions: list[dict[str, Any]] = Field(default_factory=list)
    runtimeInstructions: list[dict[str, Any]] = Field(default_factory=list)


class CompleteJob(_Strict):
    type: Literal["COMPLETE_JOB"]
    jobSelector: JobSelector
    variables: Variables = Field(default_factory=dict)
    useExampleData: bool = False


class ThrowBpmnErrorFromJob(_Strict):
    type: Literal["THROW_BPMN_ERROR_FROM_JOB"]
    jobSelector: JobSelector
    errorCode: str
    errorMessage: str = ""
    variables: Variables = Field(default_factory=dict)


class CompleteUserTask(_Strict):
    type: Literal["COMPLETE_USER_TASK"]
    userTaskSelector: UserTaskSelector
    variables: Variables = Field(default_factory=dict)
    useExampleData: bool = False


class PublishMessage(_Strict):
    type: Literal["PUBLISH_MESSAGE", "CORRELATE_MESSAGE"]
    name: str
    correlationKey: str | None = None
    variables: Variables = Field(default_factory=dict)
    timeToLive: int | None = Field(default=None, ge=0)
    messageId: str | None = None


class BroadcastSignal(_Strict):
    type: Literal["BROADCAST_SIGNAL"]
    signalName: str
    variables: Variables = Field(default_factory=dict)


class IncreaseTime(_Strict):
    type: Literal["INCREASE_TIME"]
    duration: str


class SetTime(_Strict):
    type: Literal["SET_TIME"]
    time: datetime


class UpdateVariables(_Strict):
    type: Literal["UPDATE_VARIABLES"]
    processInstanceSelector: ProcessInstanceSelector | None = None
    variables: Variables
    elementSelector: ElementSelector | None = None


class ResolveIncident(_Strict):
    type: Literal["RESOLVE_INCIDENT"]
    incidentSelector: IncidentSelector


class MockJobWorkerCompleteJob(_Strict):
    type: Literal["MOCK_JOB_WORKER_COMPLETE_JOB"]
    jobType: str
    variables: Variables = Field(default_factory=dict)
    useExampleData: bool = False


class MockJobWorkerThrowBpmnError(_Strict):
    type: Literal["MOCK_JOB_WORKER_THROW_BPMN_ERROR"]
    jobType: str
    errorCode: str
    errorMessage: str = ""
    variables: Variables = Field(default_factory=dict)


class MockChildProcess(_Strict):
    type: Literal["MOCK_CHILD_PROCESS"]
    processDefinitionId: str
    variables: Variables = Field(default_factory=dict)


# -- instructions: assertions ---------------------------------------------------------

ElementState = Literal["IS_ACTIVE", "IS_COMPLETED", "IS_TERMINATED"]


class AssertProcessInstance(_Strict):
    type: Literal["ASSERT_PROCESS_INSTANCE"]
    processInstanceSelector: ProcessInstanceSelector | None = None
    state: Literal["IS_ACTIVE", "IS_COMPLETED", "IS_CREATED", "IS_TERMINATED"] | None = None
    hasActiveIncidents: bool | None = None


class AssertElementInstance(_Strict):
    type: Literal["ASSERT_ELEMENT_INSTANCE"]
    processInstanceSelector: ProcessInstanceSelector | None = None
    elementSelector: ElementSelector
    state: ElementState
    amount: int = Field(default=1, ge=1)


class AssertElementInstances(_Strict):
    type: Literal["ASSERT_ELEMENT_INSTANCES"]
    processInstanceSelector: ProcessInstanceSelector | None = None
    elementSelectors: list[ElementSelector] = Field(min_length=1)
    state: Literal[
        "IS_ACTIVE",
        "IS_COMPLETED",
        "IS_TERMINATED",
        "IS_NOT_ACTIVE",
        "IS_NOT_ACTIVATED",
        "IS_ACTIVE_EXACTLY",
        "IS_COMPLETED_IN_ORDER",
    ]


class AssertVariables(_Strict):
    type: Literal["ASSERT_VARIABLES"]
    processInstanceSelector: ProcessInstanceSelector | None = None
    elementSelector: ElementSelector | None = None
    variableNames: list[str] = Field(default_factory=list)
    variables: Variables = Field(default_factory=dict)


class AssertUserTask(_Strict):
    type: Literal["ASSERT_USER_TASK"]
    userTaskSelector: UserTaskSelector
    state: Literal["IS_CREATED", "IS_COMPLETED", "IS_CANCELED"] | None = None
    assignee: str | None = None
    candidateGroups: list[str] | None = None
    priority: int | None = None
    elementId: str | None = None
    name: str | None = None
    dueDate: datetime | None = None
    followUpDate: datetime | None = None


class AssertMessageSubscription(_Strict):
    type: Literal["ASSERT_PROCESS_INSTANCE_MESSAGE_SUBSCRIPTION"]
    processInstanceSelector: ProcessInstanceSelector | None = None
    messageSelector: MessageSelector
    state: Literal["IS_WAITING", "IS_NOT_WAITING", "IS_CORRELATED"]


Instruction = Annotated[
    CreateProcessInstance
    | CompleteJob
    | ThrowBpmnErrorFromJob
    | CompleteUserTask
    | PublishMessage
    | BroadcastSignal
    | IncreaseTime
    | SetTime
    | UpdateVariables
    | ResolveIncident
    | MockJobWorkerCompleteJob
    | MockJobWorkerThrowBpmnError
    | MockChildProcess
    | AssertProcessInstance
    | AssertElementInstance
    | AssertElementInstances
    | AssertVariables
    | AssertUserTask
    | AssertMessageSubscription,
    Field(discriminator="type"),
]
_INSTRUCTION: TypeAdapter[Instruction] = TypeAdapter(Instruction)

SUPPORTED: frozenset[str] = frozenset(
    name
    for model in (
        CreateProcessInstance,
        CompleteJob,
        ThrowBpmnErrorFromJob,
        CompleteUserTask,
        PublishMessage,
        BroadcastSignal,
        IncreaseTime,
        SetTime,
        UpdateVariables,
        ResolveIncident,
        MockJobWorkerCompleteJob,
        MockJobWorkerThrowBpmnError,
        MockChildProcess,
        AssertProcessInstance,
        AssertElementInstance,
        AssertElementInstances,
        AssertVariables,
        AssertUserTask,
        AssertMessageSubscription,
    )
    for name in model.model_fields["type"].annotation.__args__  # type: ignore[union-attr]
)
# Documented by Camunda, not run by dormant (docs/process-tests.md says why of each).
UNSUPPORTED: frozenset[str] = frozenset(
    {
        "ASSERT_DECISION",
        "EVALUATE_DECISION",
        "MOCK_DMN_DECISION",
        "EVALUATE_CONDITIONAL_START_EVENT",
        "COMPLETE_JOB_AD_HOC_SUB_PROCESS",
        "COMPLETE_JOB_USER_TASK_LISTENER",
    }
)


class TestCase(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    __test__ = False  # a test-case model, not a pytest class

    name: str
    description: str | None = None
    instructions: list[Instruction]


class TestCases(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    __test__ = False

    testCases: list[TestCase]


def _where(case: int, name: object, step: int | None) -> str:
    label = f"case {case + 1}" + (f" ({name!r})" if isinstance(name, str) else "")
    return label if step is None else f"{label}, instruction {step + 1}"


def _first_error(exc: ValidationError, tag: str | None = None) -> str:
    err = exc.errors(include_url=False)[0]
    path = list(err["loc"])
    if path and path[0] == tag:  # the discriminated union's own step: the type
        path = path[1:]
    loc = ".".join(str(p) for p in path)
    return f"{loc}: {err['msg']}" if loc else str(err["msg"])


def _refused_options(raw: dict[str, Any]) -> str | None:
    """A documented option dormant does not run: refused, never silently ignored."""
    if raw.get("useExampleData"):
        return "useExampleData is not supported (dormant has no example data); give variables"
    if raw.get("startInstructions"):
        return "startInstructions are not supported; start at the process's start event"
    if raw.get("runtimeInstructions"):
        return "runtimeInstructions are not supported"
    return None


def _instruction(raw: Any, where: str) -> Instruction:
    if not isinstance(raw, dict):
        raise InvalidTestCases(f"{where}: an instruction is a JSON object, got {raw!r:.60}")
    kind = raw.get("type")
    if kind in UNSUPPORTED:
        raise InvalidTestCases(
            f"{where}: instruction {kind} is not supported by dormant test "
            f"(docs/process-tests.md lists the supported ones)"
        )
    if kind not in SUPPORTED:
        raise InvalidTestCases(
            f"{where}: unknown instruction type {kind!r}; supported: "
            + ", ".join(sorted(SUPPORTED))
        )
    refused = _refused_options(raw)
    if refused:
        raise InvalidTestCases(f"{where}: {kind}: {refused}")
    try:
        parsed = _INSTRUCTION.validate_python(raw)
        if isinstance(parsed, IncreaseTime):
            iso_duration(parsed.duration)
        if isinstance(parsed, SetTime) and not LATEST_TIME > aware(parsed.time) > EARLIEST_TIME:
            raise InvalidTestCases(
                f"SET_TIME: {parsed.time.isoformat()} is not between "
                f"{EARLIEST_TIME.year} and {LATEST_TIME.year}"
            )
    except ValidationError as exc:
        raise InvalidTestCases(f"{where}: {kind}: {_first_error(exc, kind)}") from exc
    except InvalidTestCases as exc:
        raise InvalidTestCases(f"{where}: {exc}") from exc
    return parsed


def parse(document: Any) -> TestCases:
    """The test cases of a JSON document, every instruction checked (see the module)."""
    if not isinstance(document, dict) or not isinstance(document.get("testCases"), list):
        raise InvalidTestCases('a test-case file is a JSON object with a "testCases" array')
    cases: list[TestCase] = []
    for n, raw in enumerate(document["testCases"]):
        name = raw.get("name") if isinstance(raw, dict) else None
        if not isinstance(raw, dict) or not isinstance(name, str) or not name.strip():
            raise InvalidTestCases(f"{_where(n, name, None)}: a test case needs a non-empty name")
        steps = raw.get("instructions")
        if not isinstance(steps, list):
            raise InvalidTestCases(f"{_where(n, name, None)}: instructions must be an array")
        parsed = [_instruction(step, _where(n, name, i)) for i, step in enumerate(steps)]
        rest = {k: v for k, v in raw.items() if k not in ("name", "instructions")}
        try:
            cases.append(TestCase(name=name, instructions=parsed, **rest))
        except ValidationError as exc:
            raise InvalidTestCases(f"{_where(n, name, None)}: {_first_error(exc)}") from exc
    if not cases:
        raise InvalidTestCases("the file has no test case (testCases is empty)")
    return TestCases(testCases=cases)


def load(path: Path) -> TestCases:
    """Read and check ``path`` (at most ``MAX_FILE_BYTES``)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InvalidTestCases(f"{path}: cannot read it ({exc.strerror})") from exc
    if size > MAX_FILE_BYTES:
        raise InvalidTestCases(
            f"{path}: {size:,} bytes is more than a test-case file may have ({MAX_FILE_BYTES:,})"
        )
    try:
        document = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidTestCases(f"{path}: not JSON ({exc})") from exc
    try:
        return parse(document)
    except InvalidTestCases as exc:
        raise InvalidTestCases(f"{path}: {exc}") from exc


_DURATION = re.compile(
    r"P(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?"
)
# A clock moved further than this in one instruction is a typo, not a test; and a case's
# clock stays where a timer's date arithmetic cannot overflow.
MAX_STEP = timedelta(days=366 * 100)
EARLIEST_TIME = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_TIME = datetime(3000, 1, 1, tzinfo=UTC)


def iso_duration(text: str) -> timedelta:
    """An ISO 8601 duration of days and time (``P3D``, ``PT1H30M``, ``PT0.5S``) as
    INCREASE_TIME reads it. Years and months have no fixed length and are refused."""
    found = _DURATION.fullmatch(text)
    if not found or text in ("P", "PT") or text.endswith("T"):
        raise InvalidTestCases(
            f"INCREASE_TIME: duration {text!r} is not an ISO 8601 duration of days and "
            "time (P3D, PT1H30M, PT10S)"
        )
    parts = {k: float(v) for k, v in found.groupdict().items() if v is not None}
    step = timedelta(**parts)
    if step > MAX_STEP:
        raise InvalidTestCases(f"INCREASE_TIME: duration {text!r} is more than 100 years")
    return step


def aware(moment: datetime) -> datetime:
    """SET_TIME's instant, UTC when it names no zone."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
