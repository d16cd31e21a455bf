"""A user task's Camunda Form on the tasklist: finding its schema, and checking what a
browser submitted against it before the values complete the task.

The form-js viewer in the browser validates as the user types, but anything can post
to the console: the server checks the submitted values again against the very schema
the page rendered (the same rules the viewer applies: required, lengths, bounds,
patterns, the allowed values of a select), keeps only the form's own fields, and the
values that pass become the completion's variables (docs/console.md, "Tasklist").

Forms are found as Camunda 8 links them: ``zeebe:formDefinition formKey=
"camunda-forms:bpmn:ID"`` names a ``zeebe:userTaskForm id="ID"`` embedded in the
deployed BPMN (its text is the form's JSON); ``formId="ID"`` names a ``.form`` file
deployed on its own, whose latest version is used (persistence/forms.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import defusedxml.ElementTree as SafeET  # type: ignore[import-untyped]
import re2

from dormant.engine_core.errors import InvalidOperation

__all__ = ["FormField", "embedded_form", "fields_of", "validate"]

_EMBEDDED_PREFIX = "camunda-forms:bpmn:"
# Components that show something but hold no value of their own.
_NO_VALUE = frozenset(
    {"button", "text", "html", "image", "spacer", "separator", "iframe", "table", "expression"}
)
# Components whose children are fields of the same form.
_CONTAINERS = frozenset({"group", "dynamiclist"})
_TEXT = frozenset({"textfield", "textarea", "datetime"})
_CHOICE = frozenset({"select", "radio"})
_MULTI = frozenset({"checklist", "taglist"})
_MAX_FIELDS = 500  # a schema with more input fields than this is refused, not walked


@dataclass(frozen=True, slots=True)
class FormField:
    """One input field of a form: its variable name, type and rules."""

    key: str
    type: str
    label: str
    validate: dict[str, Any]
    values: tuple[Any, ...] | None  # the allowed values of a select/radio/checklist


def embedded_form(source: str, form_key: str | None) -> dict[str, Any] | None:
    """The schema a ``camunda-forms:bpmn:ID`` form key names in the deployed XML
    ``source``; None when the key is of another kind or the form is not there."""
    if not form_key or not form_key.startswith(_EMBEDDED_PREFIX) or not source:
        return None
    wanted = form_key[len(_EMBEDDED_PREFIX) :]
    root = SafeET.fromstring(source, forbid_dtd=True)
    for element in root.iter():
        if element.tag.rsplit("}", 1)[-1] == "userTaskForm" and element.get("id") == wanted:
            try:
                schema = json.loads(element.text or "")
            except ValueError:
                return None
            return schema if isinstance(schema, dict) else None
    return None


def fields_of(schema: dict[str, Any]) -> list[FormField]:
    """The form's input fields, in its order, groups flattened."""
    found: list[FormField] = []

    def walk(components: Any) -> None:
        for c in components if isinstance(components, list) else []:
            if not isinstance(c, dict):
                continue
            kind = str(c.get("type", ""))
            if kind in _CONTAINERS:
                walk(c.get("components"))
                continue
            key = c.get("key")
            if kind in _NO_VALUE or not isinstance(key, str) or not key:
                continue
            if len(found) >= _MAX_FIELDS:
                raise InvalidOperation(f"the form has more than {_MAX_FIELDS} fields")
            raw_values = c.get("values")
            values = (
                tuple(v.get("value") for v in raw_values if isinstance(v, dict))
                if isinstance(raw_values, list)
                else None
            )
            rules = c.get("validate")
            found.append(
                FormField(
                    key=key,
                    type=kind,
                    label=str(c.get("label") or key),
                    validate=rules if isinstance(rules, dict) else {},
                    values=values,
                )
            )

    walk(schema.get("components"))
    return found


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == []


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _check(field: FormField, value: Any) -> str | None:
    """Why ``value`` does not fit ``field``; None when it does."""
    rules = field.validate
    if _empty(value):
        return "is required" if rules.get("required") else None
    kind = field.type
    if kind in _TEXT:
        if not isinstance(value, str):
            return "must be text"
        low, high = rules.get("minLength"), rules.get("maxLength")
        if isinstance(low, int) and len(value) < low:
            return f"must have at least {low} characters"
        if isinstance(high, int) and len(value) > high:
            return f"must have at most {high} characters"
        pattern = rules.get("pattern")
        if isinstance(pattern, str) and pattern:
            try:
                matched = re2.search(pattern, value)
            except re2.error:
                return None  # a pattern RE2 cannot read is the viewer's business
            if matched is None:
                return f"must match the pattern {pattern}"
        return None
    if kind == "number":
        number = _number(value)
        if number is None:
            return "must be a number"
        low, high = rules.get("min"), rules.get("max")
        if isinstance(low, int | float) and number < low:
            return f"must be at least {low}"
        if isinstance(high, int | float) and number > high:
            return f"must be at most {high}"
        return None
    if kind == "checkbox":
        return None if isinstance(value, bool) else "must be true or false"
    if kind in _CHOICE:
        if field.values is not None and value not in field.values:
            return "is not one of the choices"
        return None
    if kind in _MULTI:
        if not isinstance(value, list):
            return "must be a list"
        if field.values is not None and any(v not in field.values for v in value):
            return "holds a value that is not one of the choices"
    return None


def validate(schema: dict[str, Any], submitted: Any) -> tuple[dict[str, Any], list[str]]:
    """The values of the form's own fields and, per field that does not pass, why
    (``field 'amount' (Amount): must be at least 1``). A key the form does not have is
    refused too: only the form decides which variables a completion sets."""
    if not isinstance(submitted, dict):
        return {}, ["the submitted form data is not an object"]
    fields = {f.key: f for f in fields_of(schema)}
    errors = [f"field {key!r} is not on the form" for key in submitted if key not in fields]
    values: dict[str, Any] = {}
    for key, field in fields.items():
        value = submitted.get(key)
        why = _check(field, value)
        if why is not None:
            errors.append(f"field {key!r} ({field.label}): {why}")
        elif key in submitted:
            number = _number(value) if field.type == "number" and not _empty(value) else None
            if number is not None:
                value = int(number) if number.is_integer() else number
            values[key] = value
    return values, errors
