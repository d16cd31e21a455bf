"""engine_core/inputs.py: the one home of the input checks, table-driven and pure."""

from __future__ import annotations

from typing import Any

import pytest

from dormant.engine_core.builder import ProcessBuilder, message
from dormant.engine_core.errors import InvalidField, InvalidMessage, InvalidVariables
from dormant.engine_core.inputs import Limits, check_name, check_text, check_ttl, check_variables
from dormant.engine_core.triggers import Start
from tests.core.enginekit import Run


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"s": "a\x00"}, "variables.s contains a NUL character"),
        ({"s": "\udc80"}, "variables.s contains a lone surrogate"),
        ({"n": 10**5000}, "4300 digits"),
        ({"f": float("inf")}, "variables.f is inf"),
        ({"d": nested(30_000)}, "nested more than 64 levels"),
        ({"l": ["x" * 600, "y" * 600]}, "larger than the limit of 1024 bytes"),
        ({"o": object()}, "variables.o is a object, not a JSON value"),
        ({1: 2}, "key 1 is not a string"),
        ([1], "must be a JSON object"),
    ],
)
def test_refusals_name_the_place_and_the_limit(value: Any, says: str) -> None:
    with pytest.raises(InvalidVariables) as refused:
        check_variables(value, limits=Limits(max_bytes=1024))
    assert says in str(refused.value)
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 400


def test_values_within_the_limits_pass_as_plain_json() -> None:
    value = {"t": (1, 2), "u": "é ✓", "n": 10**4000, "d": nested(60)}
    out = check_variables(value)
    assert out["t"] == [1, 2] and out["u"] == "é ✓" and out["n"] == 10**4000
    assert check_variables(None) == {}


@pytest.mark.parametrize(
    ("call", "error", "says"),
    [
        (lambda: check_text("x" * 256, "business key"), InvalidField, "limit of 255"),
        (lambda: check_text("a\x00", "business key"), InvalidField, "NUL"),
        (lambda: check_text(5, "business key"), InvalidField, "must be a string"),
        (lambda: check_name(" ", "message name"), InvalidMessage, "non-empty"),
        (lambda: check_name("n" * 300, "message name"), InvalidMessage, "limit of 255"),
        (lambda: check_ttl(1e300, "ttl"), InvalidMessage, "ten years"),
        (lambda: check_ttl(-1, "ttl"), InvalidMessage, "ten years"),
        (lambda: check_ttl(True, "ttl"), InvalidMessage, "ten years"),
    ],
)
def test_fields_outside_their_limits(call: Any, error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=says):
        call()


def test_check_ttl_accepts_none_and_range() -> None:
    assert check_ttl(None, "ttl") is None
    assert check_ttl(0, "ttl") == 0.0 and check_ttl(3600, "ttl") == 3600.0


def test_a_script_result_too_large_to_store_is_an_incident_at_its_node() -> None:
    b = ProcessBuilder("big")
    b.start_event("s").script_task("big", script="=10 ** 5000", result_variable="x")
    b.end_event("e").sequence("s", "big", "e")
    run = Run(b.build())
    run.send(Start(variables={}))
    [incident] = run.cp.incidents.values()
    assert incident.node_id == "big" and incident.cause_class == "InvalidVariables"
    assert "'x'" in incident.cause and "4300 digits" in incident.cause
    assert "x" not in run.variables  # the checkpoint before it stays as it was


def test_a_correlation_key_longer_than_its_column_is_an_incident_at_its_node() -> None:
    b = ProcessBuilder("longkey")
    b.start_event("s").intermediate_catch_event("mc", message("m", "=k"))
    b.end_event("e").sequence("s", "mc", "e")
    run = Run(b.build())
    run.send(Start(variables={"k": "k" * 300}))
    [incident] = run.cp.incidents.values()
    assert incident.node_id == "mc" and "limit of 255" in incident.cause
    assert run.cp.waits == {}
