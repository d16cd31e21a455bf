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

from engine_core.errors import ExpressionError

__all__ = [
    "TechnicalFailure",
    "boolean",
    "correlation_key",
    "evaluate",
    "is_expression",
    "json_value",
    "non_empty_string",
]


class TechnicalFailure(Exception):
    """A failure of one element that Camunda 8 would turn into an incident."""

    def __init__(self, message: str, cause_class: str = "ExpressionError") -> None:
        super().__init__(message)
        self.cause_class = cause_class


def is_expression(raw: str | None) -> bool:
    return raw is not None and raw.lstrip().startswith("=")


def evaluate(raw: str, variables: Mapping[str, Any], element_id: str, now: datetime) -> Any:
    """The FEEL value of ``raw`` when it is an expression, else ``raw`` itself."""
    if not is_expression(raw):
        return raw
    from engine_core import feel  # imported late: feel is the heaviest module of the core

    source = raw.lstrip()[1:]
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
    from engine_core import feel

    try:
        return feel.to_json(value)
    except Exception as exc:
        raise _unexpected(exc, "", None) from exc


def _unexpected(exc: Exception, raw: str, element_id: str | None) -> TechnicalFailure:
    where = f" of {element_id!r}" if element_id is not None else ""
    what = f"expression {raw!r}{where}" if raw else "a result"
    return TechnicalFailure(
        f"{what} could not be evaluated: {type(exc).__name__}: {exc}", type(exc).__name__
    )


def boolean(raw: str, variables: Mapping[str, Any], element_id: str, now: datetime) -> bool:
    value = evaluate(raw, variables, element_id, now)
    if isinstance(value, bool):
        return value
    raise TechnicalFailure(
        f"condition {raw!r} of {element_id!r} evaluated to {_kind(value)}, expected a boolean "
        "(a variable it uses may be missing)"
    )


def correlation_key(raw: str, variables: Mapping[str, Any], element_id: str, now: datetime) -> str:
    value = evaluate(raw, variables, element_id, now)
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        raise TechnicalFailure(
            f"correlation key {raw!r} of {element_id!r} evaluated to {_kind(value)}, "
            "expected a string or a number"
        )
    if isinstance(value, Decimal):
        return str(int(value)) if value == value.to_integral_value() else str(value)
    if isinstance(value, int | float):
        return str(int(value)) if float(value).is_integer() else str(value)
    raise TechnicalFailure(
        f"correlation key {raw!r} of {element_id!r} evaluated to {_kind(value)}, "
        "expected a string or a number"
    )


def non_empty_string(
    raw: str, variables: Mapping[str, Any], element_id: str, now: datetime, what: str
) -> str:
    value = evaluate(raw, variables, element_id, now)
    if isinstance(value, str) and value.strip():
        return value
    raise TechnicalFailure(
        f"{what} {raw!r} of {element_id!r} evaluated to {_kind(value)}, expected a non-empty string"
    )


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {value}"
    return f"a {type(value).__name__}"
