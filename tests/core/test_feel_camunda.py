"""Camunda's FEEL extensions in the engine: ``uuid()`` from the instance, never random.

(The functions' values are pinned case by case by feel-scala's own suite,
tests/core/test_feel_scala.py; what is shown here is the engine's side of them.)
"""

from __future__ import annotations

import re

import pytest

from dormant.engine_core.builder import ProcessBuilder
from dormant.engine_core.errors import ExpressionError
from dormant.engine_core.feel import evaluate, id_source
from dormant.engine_core.model import ProcessDefinition
from tests.core.enginekit import Run

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def ids_model() -> ProcessDefinition:
    b = ProcessBuilder("p")
    b.start_event("s").script_task("a", "=uuid()", result_variable="x")
    b.script_task("b", "=[uuid(), uuid()]", result_variable="y").user_task("wait").end_event("e")
    b.sequence("s", "a", "b", "wait", "e")
    return b.build()


def test_uuid_in_a_model_is_unique_per_call_and_instance_and_deterministic() -> None:
    first, second, again = (Run(ids_model(), instance_id=i) for i in ("i1", "i2", "i1"))
    for run in (first, second, again):
        run.start()
    values = [first.variables["x"], *first.variables["y"]]
    assert all(UUID.fullmatch(v) for v in values) and len(set(values)) == 3
    assert second.variables["x"] not in values
    assert again.variables == first.variables  # the same checkpoint gives the same ids


def test_uuid_without_an_id_source_is_null_and_a_source_can_be_passed() -> None:
    assert evaluate("uuid()", {}) is None
    with id_source(lambda: "fixed"):
        assert evaluate("uuid()", {}) == "fixed"
    assert evaluate("uuid()", {}, ids=lambda: "own") == "own"


def test_assert_fails_where_feel_scala_fails() -> None:
    assert evaluate("assert(x, x > 3)", {"x": 4}) == 4
    with pytest.raises(ExpressionError, match="The condition is not fulfilled"):
        evaluate("assert(x, x > 5)", {"x": 4})
    with pytest.raises(ExpressionError, match="too small"):
        evaluate('assert(x, x > 5, "too small")', {"x": 4})
