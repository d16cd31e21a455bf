"""The seam between core and shell: every effect survives its outbox row, and a row of
a kind this version does not know (or a payload that does not fit its kind) is a named
error, never a guess."""

from __future__ import annotations

import json

import pytest

from dormant.engine_core.calls import missing_child, parent_trigger
from dormant.engine_core.effects import (
    EFFECT_KINDS,
    CancelChild,
    ContinueInstance,
    DeliverBuffered,
    DispatchJob,
    Effect,
    NotifyParent,
    StartChild,
    ThrowMessage,
    ThrowSignal,
    encode_effect,
    job_idempotency_key,
    parse_effect,
)
from dormant.engine_core.errors import CorruptEffect, UnknownEffect
from dormant.engine_core.triggers import ChildCompleted, ChildFailed, MessageReceived

EXAMPLES: list[Effect] = [
    DispatchJob("i1", "w1", "charge", "charge-card", 2, {"amount": 10}, {"region": "eu"}),
    ThrowMessage("paid", "order-1", {"ok": True}, "i1.m1", ttl_seconds=30.0),
    ThrowSignal("alarm", {}, "i1.g1"),
    StartChild("i1.w2", "child", {"x": [1, 2]}, "i1", "w2", "i1", version_tag="v2"),
    CancelChild("i1.w2"),
    NotifyParent("i0", "w9", False, {}, "boom", "ChildFailed", "E1"),
    ContinueInstance("i1"),
    DeliverBuffered(
        "i1", MessageReceived(wait_id="w3", name="paid", correlation_key="k", message_id="m1")
    ),
]


def test_every_effect_kind_has_an_example() -> None:
    assert {type(e).__name__ for e in EXAMPLES} == set(EFFECT_KINDS)


@pytest.mark.parametrize("effect", EXAMPLES, ids=lambda e: type(e).__name__)
def test_an_effect_survives_its_outbox_row(effect: Effect) -> None:
    kind, payload = encode_effect(effect)
    assert kind == type(effect).__name__
    stored = json.loads(json.dumps(payload)) | {"trigger_id": "i1@3.0"}  # the envelope
    assert parse_effect(kind, stored) == effect


def test_a_buffered_delivery_row_is_flat_and_the_nested_form_still_reads() -> None:
    trigger = MessageReceived(wait_id="w3", name="paid", message_id="m1")
    kind, payload = encode_effect(DeliverBuffered("i1", trigger))
    assert payload["instance_id"] == "i1" and payload["wait_id"] == "w3"
    nested = {"instance_id": "i1", "trigger": trigger.model_dump(mode="json")}
    assert parse_effect(kind, nested) == DeliverBuffered("i1", trigger)


def test_an_unknown_kind_and_a_corrupt_payload_are_named_errors() -> None:
    with pytest.raises(UnknownEffect, match="'Teleport'"):
        parse_effect("Teleport", {})
    with pytest.raises(CorruptEffect, match="CancelChild"):
        parse_effect("CancelChild", {"child": "x"})


def test_the_job_idempotency_key_has_one_source() -> None:
    job = EXAMPLES[0]
    assert isinstance(job, DispatchJob)
    assert job.idempotency_key == job_idempotency_key("i1", "w1", 2) == "i1:w1:2"


def test_the_core_decides_what_a_childs_end_tells_its_parent() -> None:
    done = parent_trigger(NotifyParent("i0", "w9", True, {"a": 1}))
    assert done == ChildCompleted(wait_id="w9", variables={"a": 1})
    failed = parent_trigger(NotifyParent("i0", "w9", False, {}))
    assert failed == ChildFailed(
        wait_id="w9", error="child instance failed", error_class="ChildFailed"
    )
    missing = missing_child("w9", "no process 'child'")
    assert missing == ChildFailed(
        wait_id="w9", error="no process 'child'", error_class="UnknownProcess"
    )
