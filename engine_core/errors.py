"""Every error dormant raises, under one base.

The hierarchy is drawn by who is at fault, because that decides what the caller
should do next:

    DormantError
    ├── CallerError          the caller's input is wrong; fix the call
    │   ├── InvalidVariables       variables / payload that are not a JSON object
    │   ├── InvalidField           a name, key or id too long for its column, with NUL, ...
    │   │   └── InvalidMessage     a message with an empty name, a bad TTL, ...
    │   ├── UnknownProcess         no deployed process has that key (or version)
    │   ├── UnknownDeployment      no deployment has that key
    │   ├── UnknownInstance        no instance has that id
    │   ├── UnknownTask            no open user task has that id
    │   └── InvalidSetting         a setting (URL, backoff, ...) that cannot be used
    ├── ModelError           the BPMN model is wrong; fix the model and redeploy
    │   ├── InvalidModel           malformed XML, a dangling flow, a missing attribute
    │   └── UnsupportedElement     an element the engine does not run (refused at deploy)
    ├── OperatorError        an operator action that cannot be applied now
    │   ├── UnknownIncident        no incident has that id
    │   ├── UnknownFailedTrigger   no failed trigger has that id
    │   └── InvalidOperation       the action does not fit the current state
    │       └── TransitionDenied   a task listener denied a user task's completion, ...
    ├── StoredDataError      what the database holds cannot be used as it is
    │   ├── CheckpointTooNew       written by a newer dormant; upgrade this one
    │   ├── CorruptCheckpoint      not a checkpoint document at all
    │   ├── UnknownEffect          an outbox row of a kind a newer dormant wrote
    │   ├── CorruptEffect          an outbox payload that does not match its kind
    │   └── NotMigrated            the database schema is older than this code
    ├── ExpressionError      a FEEL expression that does not parse or cannot be evaluated
    │   └── ExpressionLimitExceeded  past a FEEL bound (steps, string length, list size, depth)
    ├── DecisionError        a DMN decision that cannot give a result (an incident at its task)
    │   ├── DecisionNotDeployed    no deployed decision has that id; deploy its .dmn
    │   └── DecisionEvaluationError a hit-policy violation (UNIQUE with two matches, ...)
    ├── PoisonTrigger        a trigger whose deliveries kept ending their worker; kept, not applied
    ├── DatabaseUnavailable  the database stayed locked or unreachable past the bounded retries
    └── EngineInvariantError an internal invariant broke: a bug in dormant, never the user's

``BpmnError`` is not a ``DormantError``: it is what a job raises on purpose to
throw a modelled BPMN error, and the engine routes it like an event.

Messages name the offending thing and, where there is one, the fix; a model's value or
expression is quoted cut short (``shorten``), so a message stays one short line.
"""

from __future__ import annotations

__all__ = [
    "BpmnError",
    "CallerError",
    "CheckpointTooNew",
    "CorruptCheckpoint",
    "CorruptEffect",
    "DatabaseUnavailable",
    "DecisionError",
    "DecisionEvaluationError",
    "DecisionNotDeployed",
    "DormantError",
    "EngineInvariantError",
    "ExpressionError",
    "ExpressionLimitExceeded",
    "InvalidField",
    "InvalidMessage",
    "InvalidModel",
    "InvalidOperation",
    "InvalidSetting",
    "InvalidTestCases",
    "InvalidVariables",
    "ModelError",
    "NotMigrated",
    "OperatorError",
    "PoisonTrigger",
    "StoredDataError",
    "TransitionDenied",
    "UnknownDeployment",
    "UnknownEffect",
    "UnknownFailedTrigger",
    "UnknownIncident",
    "UnknownInstance",
    "UnknownProcess",
    "UnknownTask",
    "UnsupportedElement",
]


def shorten(value: object, limit: int = 80) -> str:
    """``repr(value)`` for a log line or an error message, cut to about ``limit``
    characters and saying how long the text was: a model's name or expression may be
    100,000 characters, and a log line or an incident's cause must stay one short line."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value):,} characters)"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


class DormantError(Exception):
    """The base of every error dormant raises on purpose."""


class CallerError(DormantError):
    """The caller's input is wrong; nothing was written."""


class InvalidVariables(CallerError):
    """Variables or a payload that are not a JSON object of JSON values."""


class InvalidField(CallerError):
    """A trigger field (business key, message id, correlation key, name, TTL) outside
    its limit: too long for its column, a NUL or lone surrogate, out of range."""


class InvalidMessage(InvalidField):
    """A message that cannot be correlated: empty name, negative TTL, ..."""


class UnknownProcess(CallerError):
    """No deployed process has that key (or that version)."""


class UnknownDeployment(CallerError):
    """No deployment has that key."""


class UnknownInstance(CallerError):
    """No instance has that id."""


class UnknownTask(CallerError):
    """No open user task has that id."""


class InvalidSetting(CallerError):
    """A setting that cannot be used (bad URL, non-positive backoff, ...)."""


class InvalidTestCases(CallerError):
    """A process test file (``dormant test CASES.json``) that cannot be run: not JSON,
    not the test-case format, or an instruction dormant does not support."""


class ModelError(DormantError):
    """The BPMN model is wrong; fix it and deploy again."""


class InvalidModel(ModelError):
    """Malformed XML, a dangling reference, a missing required attribute."""


class UnsupportedElement(ModelError):
    """An element the engine does not run; refused at deploy, never skipped."""

    def __init__(self, element_id: str, element_type: str, name: str | None, why: str = "") -> None:
        self.element_id = element_id
        self.element_type = element_type
        self.element_name = name
        label = f" {name!r}" if name else ""
        reason = f": {why}" if why else ""
        super().__init__(
            f"element {element_id!r} ({element_type}{label}) is not supported by dormant{reason}; "
            "see docs/bpmn-elements.md for what runs"
        )


class OperatorError(DormantError):
    """An operator action that cannot be applied to the current state."""


class UnknownIncident(OperatorError):
    """No incident has that id."""


class UnknownFailedTrigger(OperatorError):
    """No failed trigger has that id (retried or dropped already?)."""


class InvalidOperation(OperatorError):
    """The action does not fit the current state (closed incident, ended instance, ...)."""


class TransitionDenied(InvalidOperation):
    """A task listener denied a user task transition (its completion, assignment or
    update); the task stays as it was and the message carries the listener's reason."""


class StoredDataError(DormantError):
    """What the database holds cannot be used by this version of dormant."""


class CheckpointTooNew(StoredDataError):
    """The checkpoint was written by a newer dormant than this one."""


class CorruptCheckpoint(StoredDataError):
    """The stored checkpoint is not a checkpoint document."""


class UnknownEffect(StoredDataError):
    """An outbox row of a kind this version does not know (a newer dormant wrote it)."""


class CorruptEffect(StoredDataError):
    """An outbox row whose payload does not match its kind's type."""


class NotMigrated(StoredDataError):
    """The database schema is missing or older than this code expects."""


class ExpressionError(DormantError):
    """A FEEL expression that does not parse, or fails where Camunda 8 would fail.

    Carries the expression, the element it belongs to and, for a parse error, the
    position, so the message points at the exact character to fix.
    """

    def __init__(
        self,
        message: str,
        expression: str | None = None,
        element_id: str | None = None,
        position: int | None = None,
    ) -> None:
        self.expression = expression
        self.element_id = element_id
        self.position = position
        self.reason = message
        parts = [message]
        if expression is not None:
            parts.append(f"in expression {shorten(expression, 200)}")
        if position is not None:
            parts.append(f"at position {position}")
        if element_id is not None:
            parts.append(f"of element {element_id!r}")
        super().__init__(" ".join(parts))

    def at_element(self, element_id: str) -> ExpressionError:
        """The same error, now naming the element the expression belongs to."""
        return ExpressionError(self.reason, self.expression, element_id, self.position)


class ExpressionLimitExceeded(ExpressionError):
    """A FEEL evaluation went past one of its bounds (``engine_core.feel.limits``).

    ``limit`` names the bound (``steps``, ``string_length``, ``collection_size``,
    ``call_depth``, ``nesting_depth``, ``expression_length``, ``result_size``,
    ``regex_program_size``) so an operator knows which
    setting to look at; the model, not the engine, is at fault.
    """

    def __init__(
        self,
        message: str,
        expression: str | None = None,
        element_id: str | None = None,
        position: int | None = None,
        *,
        limit: str = "",
    ) -> None:
        super().__init__(message, expression, element_id, position)
        self.limit = limit

    def at_element(self, element_id: str) -> ExpressionError:
        return ExpressionLimitExceeded(
            self.reason, self.expression, element_id, self.position, limit=self.limit
        )

    def in_expression(self, expression: str) -> ExpressionLimitExceeded:
        """The same error, now quoting the expression (shortened: it may be huge)."""
        shown = expression if len(expression) <= 200 else expression[:200] + "..."
        return ExpressionLimitExceeded(
            self.reason, shown, self.element_id, self.position, limit=self.limit
        )


class DecisionError(DormantError):
    """A DMN decision that cannot give a result; the business rule task gets an incident
    whose cause class is the subclass name, so an operator knows whether to deploy a
    decision or fix its table."""


class DecisionNotDeployed(DecisionError):
    """No deployed decision has the id a business rule task (or a decision) asks for."""


class DecisionEvaluationError(DecisionError):
    """The decision broke its own rules: UNIQUE with two matching rules, ANY with
    different outputs, an aggregate over values that are not numbers."""


class PoisonTrigger(DormantError):
    """A trigger whose deliveries kept ending their worker (a hard time limit, a signal,
    memory) past ``DORMANT_MAX_DELIVERIES``: applying it again would only take a worker
    slot again, so it is kept for an operator instead (docs/limits.md, "What an operator
    sees: poison triggers")."""


class DatabaseUnavailable(DormantError):
    """The database stayed locked or unreachable for the whole of a producer's bounded
    retries (on the embedded SQLite default: workers holding its one write lock). Nothing
    was written; sending the same call again later is safe."""


class EngineInvariantError(DormantError):
    """An internal invariant broke. A bug in dormant; it fails the instance."""


class BpmnError(Exception):
    """Raised by a job to throw a modelled BPMN error with ``code``.

    A boundary error event on the service task (matching the code, or catch-all)
    catches it; uncaught it opens an incident at the task.
    """

    def __init__(self, code: str, message: str = "", variables: dict[str, object] | None = None):
        self.code = code
        self.message = message
        self.variables = dict(variables or {})
        super().__init__(f"BPMN error {code!r}" + (f": {message}" if message else ""))
