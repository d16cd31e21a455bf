"""Model attribute values, read the Camunda 8 way: "=..." is FEEL, anything else a literal.

Every attribute the engine evaluates goes through here, so the rules Camunda 8 applies
to results (a condition must be a boolean, a correlation key a string or number, a job
type a non-empty string) are in one place. A result Camunda 8 would reject raises
``TechnicalFailure``, which the engine turns into an incident at the element.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from dormant.engine_core import feel
from dormant.engine_core.errors import ExpressionError, InvalidField
from dormant.engine_core.inputs import check_text, shorten

__all__ = [
    "TechnicalFailure",
    "always_expression",
    "boolean",
    "correlation_key",
    "evaluate",
    "feel_source",
    "is_expression",
    "json_value",
    "non_empty_string",
]


class TechnicalFailure(Exception):
    """A failure of one element that Camunda 8 would turn into an incident.

    ``token_id`` / ``node_id`` name the token and node whose work failed when that is
    not the token the catching unit of work was running: the last token of a
    sub-process ends, and the sub-process's own output mapping fails. The innermost
    place that knows sets them (``at``); the catcher raises the incident there.
    """

    def __init__(self, message: str, cause_class: str = "ExpressionError") -> None:
        super().__init__(message)
        self.cause_class = cause_class
        self.token_id: str | None = None
        self.node_id: str | None = None

    def at(self, token_id: str, node_id: str) -> TechnicalFailure:
        """Name where the failure happened, unless a more inner place already did."""
        if self.token_id is None:
            self.token_id, self.node_id = token_id, node_id
        return self


def is_expression(raw: str | None) -> bool:
    """The one rule of Camunda 8's attributes: a value starting with ``=`` is FEEL."""
    return raw is not None and raw.lstrip().startswith("=")


def feel_source(raw: str) -> str:
    """The FEEL text of an expression attribute, without its ``=``."""
    text = raw.lstrip()
    return text[1:] if text.startswith("=") else text


def always_expression(source: str) -> str:
    """An attribute that is FEEL with or without the leading ``=`` (a sequence-flow
    condition, a multi-instance collection or completion condition), as an expression.

    (Mapping sources are not: as in Camunda 8, a source without '=' is a static value,
    e.g. a connector's URL.)"""
    return source if is_expression(source) else "=" + source


def evaluate(raw: str, variables: Mapping[str, Any], element_id: str, now: datetime) -> Any:
    """The FEEL value of ``raw`` when it is an expression, else ``raw`` itself."""
    if not is_expression(raw):
        return raw
    source = feel_source(raw)
    try:
        return feel.evaluate(source, variables, now=now)
    except ExpressionError as exc:
        raise TechnicalFailure(str(exc.at_element(element_id))) from exc
    except Exception as exc:
        # Whatever else evaluating the model's expression raised (a recursion limit, an
        # arithmetic corner the evaluator did not foresee) is still the model's failure
        # at this element: an incident there, never an exception out of ``apply``.
        raise _unexpected(exc, raw, element_id) from exc


def json_value(value: Any) -> Any:
    """A FEEL result as a JSON value, for storing as a process variable."""
    if value is None or isinstance(value, bool | str | int | float):
        return value
    try:
        return feel.to_json(value)
    except Exception as exc:
        raise _unexpected(exc, "", None) from exc


def _unexpected(exc: Exception, raw: str, element_id: str | None) -> TechnicalFailure:
    where = f" of {element_id!r}" if element_id is not None else ""
    what = f"expression {shorten(raw)}{where}" if raw else "a result"
    return TechnicalFailure(
        f"{what} could not be evaluated: {type(exc).__name__}: {exc}", type(exc).__name__
    )


def boolean(raw: str, variables: Mapping[str, Any], element_id: str, now: datetime) -> bool:
    value = evaluate(raw, variables, element_id, now)
    if isinstance(value, bool):
        return value
    raise TechnicalFailure(
        f"condition {shorten(raw)} of {element_id!r} evaluated to {_kind(value)}, "
        "expected a boolean (a variable it uses may be missing)"
    )


def correlation_key(raw: str, variables: Mapping[str, Any], element_id: str, now: datetime) -> str:
    """The key as text; one too long for the subscriptions column (or holding a NUL)
    fails the element here rather than the whole trigger at the insert."""
    key = _key_text(raw, variables, element_id, now)
    try:
        return check_text(key, f"correlation key {raw[:80]!r} of {element_id!r}")
    except InvalidField as exc:
        raise TechnicalFailure(str(exc)) from None


def _key_text(raw: str, variables: Mapping[str, Any], element_id: str, now: datetime) -> str:
    value = evaluate(raw, variables, element_id, now)
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        raise TechnicalFailure(
            f"correlation key {shorten(raw)} of {element_id!r} evaluated to {_kind(value)}, "
            "expected a string or a number"
        )
    if isinstance(value, Decimal):
        return str(int(value)) if value == value.to_integral_value() else str(value)
    if isinstance(value, int | float):
        return str(int(value)) if float(value).is_integer() else str(value)
    raise TechnicalFailure(
        f"correlation key {shorten(raw)} of {element_id!r} evaluated to {_kind(value)}, "
        "expected a string or a number"
    )


def non_empty_string(
    raw: str, variables: Mapping[str, Any], element_id: str, now: datetime, what: str
) -> str:
    """A computed name (message, signal, job type): non-empty, and within its column
    (``inputs.check_text``), else an incident at the element -- never a failed insert."""
    value = evaluate(raw, variables, element_id, now)
    if isinstance(value, str) and value.strip():
        try:
            return check_text(value, f"{what} {shorten(raw)} of {element_id!r}")
        except InvalidField as exc:
            raise TechnicalFailure(str(exc)) from None
    raise TechnicalFailure(
        f"{what} {shorten(raw)} of {element_id!r} evaluated to {_kind(value)}, "
        "expected a non-empty string"
    )


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {value}"
    return f"a {type(value).__name__}"
