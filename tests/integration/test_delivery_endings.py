"""A poison trigger's "last error" is its last dying delivery's own (persistence/deliveries.py).

A hard time limit is reported against the task that ran it, and under batching that task
may have been applying triggers it took from the queue: a trigger that kills its process
then met a hang taken into its batch, was charged with the batch's time limit, and its
own later deliveries, which die without a report, kept that error for ever. A counted
redelivery that goes on to be applied starts with no error known; one refused at the
bound keeps the error it is refused with.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from dormant.persistence import deliveries, inbox

TIME_LIMIT = "TimeLimitExceeded: past the hard time limit (4.0 s), the pool process was killed"
AT = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _trigger(store: Any, with_inbox: bool) -> tuple[str | None, str]:
    if not with_inbox:
        return None, f"plain-producer-task-{uuid.uuid4().hex}"
    [row_id] = inbox.record_many(
        store.engine, [("dormant.message", "dormant", {"name": "tick", "correlation_key": "k"})]
    )
    return row_id, row_id


@pytest.mark.parametrize("with_inbox", [True, False], ids=["inbox", "plain"])
def test_a_redelivery_that_is_applied_forgets_an_earlier_deliverys_error(
    store: Any, with_inbox: bool
) -> None:
    inbox_id, trigger_id = _trigger(store, with_inbox)
    bound = 2
    # delivery 1 died of a time limit (its batch's)
    deliveries.record_ending(store.engine, inbox_id, trigger_id, TIME_LIMIT, AT)
    assert deliveries.last_error(store.engine, inbox_id, trigger_id) == TIME_LIMIT
    # delivery 2 is counted and applied: what killed delivery 1 is not what it dies of
    assert deliveries.count_redelivery(store.engine, inbox_id, trigger_id, AT, bound=bound) == 1
    assert deliveries.last_error(store.engine, inbox_id, trigger_id) is None
    # it dies by a time limit of its own: that is the error delivery 3 is refused with
    deliveries.record_ending(store.engine, inbox_id, trigger_id, TIME_LIMIT, AT)
    assert deliveries.count_redelivery(store.engine, inbox_id, trigger_id, AT, bound=bound) == 2
    assert deliveries.last_error(store.engine, inbox_id, trigger_id) == TIME_LIMIT


@pytest.mark.parametrize("with_inbox", [True, False], ids=["inbox", "plain"])
def test_a_redelivery_refused_at_the_bound_keeps_the_error_it_is_refused_with(
    store: Any, with_inbox: bool
) -> None:
    inbox_id, trigger_id = _trigger(store, with_inbox)
    deliveries.record_ending(store.engine, inbox_id, trigger_id, TIME_LIMIT, AT)
    # with a bound of 1, the first redelivery is already refused
    assert deliveries.count_redelivery(store.engine, inbox_id, trigger_id, AT, bound=1) == 1
    assert deliveries.last_error(store.engine, inbox_id, trigger_id) == TIME_LIMIT
