"""Bulk batches and their selection against the Store on SQLite and PostgreSQL, with no
worker: what each filter selects, the runner's claim, exact counts on a re-run."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from dormant.engine_core.errors import InvalidOperation
from dormant.engine_core.triggers import Suspend
from dormant.persistence import batches
from dormant.persistence.selection import Selector
from dormant.persistence.store import NewInstance, Store
from tests.integration.opskit import gate, three_waits

pytestmark = pytest.mark.integration


def _start(store: Store, key: str, n: int, now: datetime, **variables: object) -> list[str]:
    ids = []
    for i in range(n):
        iid = f"{key}-{i}"
        store.start(
            NewInstance(key, iid, dict(variables), business_key=f"bk-{i}"),
            now=now + timedelta(seconds=i),
        )
        ids.append(iid)
    return ids


def test_filters_select_what_they_name(store: Store, now: datetime) -> None:
    store.deployments.deploy(three_waits("sel"), now)
    ids = _start(store, "sel", 4, now, orderId="o")
    store.deployments.deploy(gate("other"), now)
    _start(store, "other", 2, now)

    def pick(operation: str = "cancel", **kw: object) -> list[str]:
        return [t.target_id for t in batches.preview(store, operation, Selector(**kw))]

    assert pick(key="sel") == ids
    assert pick(key="sel", business_key_like="bk-1%") == [ids[1]]
    assert pick(key="sel", started_before=now + timedelta(seconds=2)) == ids[:2]
    assert pick(key="sel", started_after=now + timedelta(seconds=2)) == ids[3:]
    assert pick(key="sel", node="review") == ids and pick(key="sel", node="nowhere") == []
    assert pick(key="sel", version=2) == []
    assert pick(key="sel", status="completed") == []
    assert len(pick("incident_retry", key="other", node="gw", cause_class="ExpressionError")) == 2
    assert pick("incident_retry", key="other", cause_class="NoSuchClass") == []
    # A tenant's batch selects its tenant's alone (docs/tenants.md).
    assert pick(key="sel", tenant="<default>") == ids and pick(key="sel", tenant="acme") == []
    assert pick("incident_retry", key="other", tenant="acme") == []
    assert [t.instance_id for t in batches.preview(store, "cancel", Selector(ids=ids[:1]))] == [
        ids[0]
    ]
    assert (
        batches.preview(store, "cancel", Selector(ids=ids[:1], tenant="acme"))[0].instance_id
        is None
    )
    for bad, reason in [
        ({}, "nothing selected"),
        ({"ids": ["a"], "key": "sel"}, "not both"),
        ({"key": "sel", "cause_class": "X"}, "do not filter instances"),
    ]:
        with pytest.raises(InvalidOperation, match=reason):
            pick(**bad)


def test_a_batch_counts_exactly_and_a_rerun_applies_nothing_twice(
    store: Store, now: datetime
) -> None:
    store.deployments.deploy(three_waits("bat"), now)
    ids = _start(store, "bat", 5, now, orderId="o")
    store.apply(ids[0], Suspend(), now)
    view = batches.create(store, "suspend", Selector(ids=[*ids, "ghost"]), {}, now)
    assert (view.state, view.selected) == ("running", 6)
    assert batches.stalled(store, now) == [view.id]
    clock = lambda: now  # noqa: E731
    assert batches.run(store, view.id, clock, claim_seconds=30) is False
    done = batches.batch(store, view.id)
    assert done is not None and done.state == "completed"
    assert done.report().startswith(
        "selected 6, suspended 4, refused 2: 1 InvalidOperation, 1 UnknownInstance ("
    )
    assert any("bat-0 (bat v1) is already suspended" in r for r in done.refusals)
    assert any("no instance has id 'ghost'" in r for r in done.refusals)
    revisions = {i: store.queries.checkpoint(i).revision for i in ids}
    # Nothing left to do: a second run finds the batch completed and changes nothing.
    assert batches.run(store, view.id, clock, claim_seconds=30) is False
    assert {i: store.queries.checkpoint(i).revision for i in ids} == revisions
    assert batches.stalled(store, now) == []


def test_a_held_claim_keeps_a_second_runner_out_until_it_expires(
    store: Store, now: datetime
) -> None:
    store.deployments.deploy(three_waits("claim"), now)
    ids = _start(store, "claim", 3, now, orderId="o")
    view = batches.create(store, "cancel", Selector(key="claim"), {}, now)
    assert batches._claim(store, view.id, "someone", now, 30)
    assert batches.run(store, view.id, lambda: now, claim_seconds=30) is False
    assert batches.batch(store, view.id).done == 0  # type: ignore[union-attr]
    later = now + timedelta(seconds=31)
    assert batches.stalled(store, later) == [view.id]
    assert batches.run(store, view.id, lambda: later, claim_seconds=30) is False
    assert batches.batch(store, view.id).report() == "selected 3, cancelled 3, refused 0"  # type: ignore[union-attr]
    assert all(store.queries.checkpoint(i).status.value == "terminated" for i in ids)
