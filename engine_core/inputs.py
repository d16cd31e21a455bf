"""The one home of the input checks: variables and trigger fields, against ``Limits``.

Everything that enters an instance's data passes here, wherever it comes from: the
Client and the CLI before a trigger is accepted, the trigger tasks for a producer that
has only Celery, the Store before it writes, and the core for every value a model
writes (a script result, an output mapping, a job's result). So "what can be stored"
is decided once, and a value that passed can always be encoded, stored in PostgreSQL's
JSONB and read back:

* a JSON object of JSON values (no NaN or Infinity, string keys);
* nested at most ``max_depth`` levels (the JSON encoder and decoder recurse), at most
  ``max_bytes`` once encoded (about: the walk counts characters, never encodes);
* integers of at most 4300 digits (what Python converts to text by default);
* strings without NUL characters or lone surrogates (JSONB refuses both);
* names, keys and ids at most ``max_name_length`` characters (their columns).

The walk is iterative, so a value nested 30,000 deep is refused, not a RecursionError.
Every refusal is one line naming the field and the limit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dormant.engine_core.errors import (
    InvalidField,
    InvalidMessage,
    InvalidModel,
    InvalidOperation,
    InvalidVariables,
    shorten,
)

__all__ = [
    "DEFAULT_LIMITS",
    "Limits",
    "check_model_name",
    "check_name",
    "check_text",
    "check_ttl",
    "check_value",
    "check_variables",
    "encoded_size",
    "shorten",
    "variables_params",
]

# Python refuses to turn longer integers into text (sys.get_int_max_str_digits).
MAX_INT_DIGITS = 4300
_LOG10_2 = math.log10(2)


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds on what a trigger or a model may store (settings: docs/limits.md)."""

    max_bytes: int = 1_048_576
    max_depth: int = 64
    max_name_length: int = 255
    # What one instance may hold: the variables of all its scopes and its multi-
    # instance outputs (about, as encoded), and its live tokens. Past either, the node
    # that would grow it gets an incident (engine_core/runtime.py, ``charge_bytes``).
    max_checkpoint_bytes: int = 16 * 1_048_576
    max_tokens: int = 20_000
    # A buffered message lives at most this long: ten years.
    max_ttl_seconds: float = 315_576_000.0


DEFAULT_LIMITS = Limits()


def _bad_string(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (not valid Unicode)"
    return None


def _join(path: str, step: str) -> str:
    """A path for the message, cut short: a deep value must not make a huge error."""
    if len(path) > 120:
        return path if path.endswith("...") else path + "..."
    return path + step


def check_text(
    value: Any,
    field: str,
    limits: Limits = DEFAULT_LIMITS,
    error: type[InvalidField] = InvalidField,
) -> str:
    """A name, key or id: a string that fits its column and JSONB (``error``: the
    class to raise, ``InvalidMessage`` for a message's fields)."""
    if not isinstance(value, str):
        raise error(f"{field} must be a string, got {type(value).__name__}")
    if len(value) > limits.max_name_length:
        raise error(
            f"{field} is {len(value)} characters long, more than the limit of "
            f"{limits.max_name_length}"
        )
    bad = _bad_string(value)
    if bad is not None:
        raise error(f"{field} {bad}")
    return value


def check_model_name(value: str | None, field: str, limits: Limits = DEFAULT_LIMITS) -> None:
    """A name a model declares that the shell writes to a column (an element id, a
    message name, a decision id, a version tag): refused at deploy with
    ``InvalidModel`` -- deployed, it would fail every insert that carries it. A FEEL
    expression (``=...``) is checked where it is evaluated, not here."""
    if value is None or value.lstrip().startswith("="):
        return
    try:
        check_text(value, field, limits)
    except InvalidField as exc:
        raise InvalidModel(str(exc)) from None


def check_name(value: Any, field: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """A message or signal name: non-empty, and a ``check_text``."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidMessage(f"{field} must be a non-empty string, got {value!r}"[:300])
    return check_text(value, field, limits, InvalidMessage)


def check_ttl(value: Any, field: str, limits: Limits = DEFAULT_LIMITS) -> float | None:
    """A message TTL in seconds: None, or a finite number from 0 to the limit."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= limits.max_ttl_seconds
    ):
        raise InvalidMessage(
            f"{field} must be a number of seconds from 0 to {limits.max_ttl_seconds:.0f} "
            f"(ten years), got {value!r}"[:300]
        )
    return float(value)


def encoded_size(value: Any) -> int:
    """About how many bytes ``value`` (already checked: a stored value) takes encoded;
    the counting of ``check_value``, run by the JSON encoder's C loop. A reference
    shared many times is counted each time, as the encoder writes it."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))


def check_value(value: Any, field: str, limits: Limits = DEFAULT_LIMITS, depth: int = 0) -> int:
    """Raise ``InvalidVariables`` naming ``field`` (and the path inside it) unless
    ``value`` is a JSON value within ``limits``; ``depth`` is how deep it sits. Returns
    about how many bytes it takes encoded."""
    size = 0
    stack: list[tuple[Any, str, int]] = [(value, field, depth)]
    while stack:
        item, path, level = stack.pop()
        if item is None or isinstance(item, bool):
            size += 5
        elif isinstance(item, str):
            bad = _bad_string(item)
            if bad is not None:
                raise InvalidVariables(f"{path} {bad}")
            size += len(item) + 2
        elif isinstance(item, int):
            digits = int(abs(item).bit_length() * _LOG10_2) + 1
            if digits > MAX_INT_DIGITS:
                raise InvalidVariables(
                    f"{path} is an integer of about {digits} digits, more than the limit "
                    f"of {MAX_INT_DIGITS} digits"
                )
            size += digits + 1
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidVariables(f"{path} is {item}, which JSON cannot hold")
            size += 24
        elif isinstance(item, Mapping | list | tuple):
            if level >= limits.max_depth:
                raise InvalidVariables(
                    f"{path} is nested more than {limits.max_depth} levels deep "
                    "(DORMANT_MAX_VARIABLES_DEPTH)"
                )
            size += 2
            if isinstance(item, Mapping):
                for key, inner in item.items():
                    if not isinstance(key, str):
                        raise InvalidVariables(f"{path}: key {key!r} is not a string"[:300])
                    bad = _bad_string(key)
                    if bad is not None:
                        raise InvalidVariables(f"{path}: a key {bad}")
                    size += len(key) + 4
                    stack.append((inner, _join(path, f".{key[:40]}"), level + 1))
            else:
                for i, inner in enumerate(item):
                    size += 1
                    stack.append((inner, _join(path, f"[{i}]"), level + 1))
        else:
            raise InvalidVariables(f"{path} is a {type(item).__name__}, not a JSON value")
        if size > limits.max_bytes:
            raise InvalidVariables(
                f"{field} is larger than the limit of {limits.max_bytes} bytes "
                "(DORMANT_MAX_VARIABLES_BYTES)"
            )
    return size


def check_variables(
    variables: Any, what: str = "variables", limits: Limits = DEFAULT_LIMITS
) -> dict[str, Any]:
    """A trigger's variables: a JSON object within ``limits``, returned as plain JSON
    (tuples become lists), or ``InvalidVariables`` saying what is wrong and where."""
    if variables is None:
        return {}
    if not isinstance(variables, Mapping):
        raise InvalidVariables(
            f"{what} must be a JSON object (a dict with string keys), "
            f"got {type(variables).__name__}"
        )
    check_value(variables, what, limits)
    # Safe now: bounded depth, encodable integers, finite floats, string keys.
    return dict(json.loads(json.dumps(variables, allow_nan=False)))


def variables_params(
    variables: Mapping[str, Any] | None,
    unset: Iterable[str],
    scope: str,
    retry: bool,
    limits: Limits = DEFAULT_LIMITS,
) -> dict[str, Any]:
    """The checked arguments of a ``SetVariables`` (the Client checks them at the edge,
    the batch and operation tasks again): the variables within the limits of
    a start's, names that fit, something to do."""
    checked = check_variables(
        dict(variables) if variables is not None else None, "variables", limits
    )
    names = [check_text(n, "variable name to unset", limits) for n in unset]
    if any(not n for n in names):
        raise InvalidVariables("a variable name to unset must not be empty")
    if not checked and not names and not retry:
        raise InvalidOperation("nothing to change: give --var NAME=VALUE or --unset NAME")
    check_text(scope, "scope", limits)
    return {"variables": checked, "unset": names, "scope": scope, "retry_incidents": retry}
