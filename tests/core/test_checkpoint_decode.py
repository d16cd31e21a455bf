"""Reading a stored checkpoint: each way a stored document can be unreadable is its own
classified error with one line saying what is wrong; and which waits hold a deadline
row or a subscription row.
"""

from __future__ import annotations

from typing import Any

import pytest

from dormant.engine_core.builder import ProcessBuilder, message, timer
from dormant.engine_core.checkpoint import Checkpoint, decode, encode
from dormant.engine_core.errors import CheckpointTooNew, CorruptCheckpoint, StoredDataError
from tests.core.enginekit import Run


def _run() -> Run:
    b = ProcessBuilder("p")
    b.start_event("s").parallel_gateway("fork")
    b.intermediate_catch_event("t", timer("PT1H")).end_event("e1")
    b.intermediate_catch_event("m", message("go", "=key")).end_event("e2")
    b.user_task("u").end_event("e3")
    b.sequence("s", "fork", "t", "e1")
    b.sequence("fork", "m", "e2")
    b.sequence("fork", "u", "e3")
    run = Run(b.build())
    run.start({"key": "k"})
    return run


@pytest.mark.parametrize(
    ("stored", "error", "reason"),
    [
        pytest.param("{oops", CorruptCheckpoint, "stored checkpoint is not JSON", id="not-json"),
        pytest.param("[1, 2]", CorruptCheckpoint, "is not a JSON object", id="json-array"),
        pytest.param(
            {"schema": True}, CorruptCheckpoint, "no valid 'schema' field (got True)", id="bool"
        ),
        pytest.param(
            {"schema": 1, "instance_id": "i9"},
            CorruptCheckpoint,
            "stored checkpoint does not validate",
            id="missing-fields",
        ),
        pytest.param(
            {"schema": 99, "instance_id": "i9"},
            CheckpointTooNew,
            "checkpoint of instance i9 has schema 99, newer than this dormant reads",
            id="too-new",
        ),
    ],
)
def test_an_unreadable_checkpoint_is_one_classified_line(
    stored: str | dict[str, Any], error: type[StoredDataError], reason: str
) -> None:
    with pytest.raises(error) as refused:
        decode(stored)
    assert reason in str(refused.value)


def test_which_waits_hold_a_deadline_and_which_a_subscription() -> None:
    cp: Checkpoint = _run().cp
    holds = {
        w.node_id: (w.holds_deadline, w.holds_subscription)
        for w in decode(encode(cp)).waits.values()
    }
    assert holds == {"t": (True, False), "m": (False, True), "u": (False, False)}
