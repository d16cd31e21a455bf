"""What a job may return (docs/incidents.md, "What a job may return"): the check
tasks/job_task.py runs inside a job's task call, before Celery encodes the result."""

from __future__ import annotations

from typing import Any

import pytest

from dormant.engine_core.inputs import DEFAULT_LIMITS
from dormant.tasks.job_task import UnencodableJobResult, checked_result


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (None, {}),
        ({"a": (1, 2), "b": {"c": 1.5}}, {"a": [1, 2], "b": {"c": 1.5}}),
        ("a plain value merges nothing", {}),
        ([1, 2], {}),
    ],
)
def test_a_json_result_is_carried_as_plain_json(result: Any, expected: dict[str, Any]) -> None:
    assert checked_result(result, DEFAULT_LIMITS) == expected


@pytest.mark.parametrize(
    ("result", "words"),
    [
        ({"s": {1, 2}}, "the job's result.s is a set"),
        ({"big": 10**5000}, "the job's result.big is an integer of about 5001 digits"),
        (10**5000, "the job's result is an integer"),
        ({"o": object()}, "the job's result.o is a object"),
        ({1: "x"}, "key 1 is not a string"),
        ({"f": float("nan")}, "which JSON cannot hold"),
        ({2, 3}, "is a set"),
    ],
    ids=["set", "big", "bare-big", "object", "int-key", "nan", "bare-set"],
)
def test_what_cannot_be_encoded_is_named(result: Any, words: str) -> None:
    with pytest.raises(UnencodableJobResult) as raised:
        checked_result(result, DEFAULT_LIMITS)
    assert words in str(raised.value)
