"""The working-state contract: ``apply`` runs on plain slotted objects, pydantic stays at
the edge, and the stored document does not change shape.

* A document an earlier dormant stored (``data/stored_checkpoints.json``) decodes and
  encodes back to the very same JSON text, and so does every document this dormant
  writes (a field typed ``float`` holding an ``int`` would change ``3600`` to ``3600.0``
  on the way back).
* ``apply`` never mutates the checkpoint it is given, and the step's checkpoint shares
  no mutable container with it (a shared ``variables`` dict would let a later step edit
  the document the Store still holds as "old").
* The step machine calls no pydantic validator or serializer: the triggers are
  pydantic, the working state is not.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from datetime import datetime
from types import FrameType
from typing import Any

import pytest
from pydantic import BaseModel

from dormant.engine_core.bpmn import read_bpmn
from dormant.engine_core.checkpoint import (
    CURRENT_SCHEMA,
    ROW_IDENTITY,
    Checkpoint,
    CompensationEntry,
    HeldTrigger,
    Incident,
    ParentLink,
    Scope,
    Token,
    Wait,
    WaitKind,
    _copier,
    copy_checkpoint,
    decode,
    decode_holds,
    encode,
    encode_json,
    encode_row_json,
    holds_of,
    with_row_identity,
)
from dormant.engine_core.engine import apply
from dormant.engine_core.errors import CheckpointTooNew, CorruptCheckpoint, DormantError
from dormant.engine_core.model import ProcessDefinition
from dormant.engine_core.triggers import (
    Cancel,
    JobCompleted,
    JobFailed,
    MessageReceived,
    SignalReceived,
    TaskCompleted,
    TimerFired,
    Trigger,
)
from tests.conformance import CAMUNDA8
from tests.core.checkpoint_corpus import STORED, live_documents
from tests.core.enginekit import T0

STATE_CLASSES = (
    Checkpoint,
    Token,
    Scope,
    Wait,
    Incident,
    CompensationEntry,
    ParentLink,
    HeldTrigger,
)
_STORED: dict[str, str] = json.loads(STORED.read_text())
_LIVE: dict[str, str] = live_documents()


@pytest.mark.parametrize("cls", STATE_CLASSES, ids=lambda c: c.__name__)
def test_the_working_state_is_plain_slotted_objects(cls: type) -> None:
    assert is_dataclass(cls)
    assert not issubclass(cls, BaseModel)
    assert "__slots__" in vars(cls) and "__dict__" not in dir(cls)


@pytest.mark.parametrize("name", sorted(_STORED))
def test_a_stored_document_re_encodes_to_the_same_text(name: str) -> None:
    """The same text but for what the upgrades to the current schema change: the
    schema number, and (schema 3) a user task's candidate groups text as a list."""
    stored = _STORED[name]
    assert json.dumps(encode(decode(stored))) == _upgraded(stored)


# The schema-2 candidate groups texts of the pinned documents, and their schema-3 lists.
GROUPS_AS_LISTS = {"['simpleGroupA', 'simpleGroupB']": ["simpleGroupA", "simpleGroupB"]}


def _upgraded(stored: str) -> str:
    """A pinned document's text as the current schema writes it."""
    doc = json.loads(stored)
    for wait in doc.get("waits", {}).values():
        if isinstance(wait.get("candidate_groups"), str):
            wait["candidate_groups"] = GROUPS_AS_LISTS[wait["candidate_groups"]]
    return json.dumps({**doc, "schema": CURRENT_SCHEMA})


def test_the_stored_corpus_covers_every_part_of_the_document() -> None:
    """The pinned documents exercise each class, so a field renamed or retyped in any
    of them changes a document the test above reads."""
    seen: set[str] = set()
    for doc in map(json.loads, _STORED.values()):
        seen.update(k for k in ("tokens", "scopes", "waits", "incidents") if doc.get(k))
        seen.update(k for k in ("compensation", "parent", "held") if doc.get(k))
    assert seen == {"tokens", "scopes", "waits", "incidents", "compensation", "parent", "held"}
    assert len(_STORED) >= 60, f"the conformance corpus at {CAMUNDA8} went missing"


@pytest.mark.parametrize("name", sorted(_LIVE))
def test_what_this_dormant_writes_round_trips_byte_identical(name: str) -> None:
    written = _LIVE[name]
    assert json.dumps(encode(decode(written))) == written


@pytest.mark.parametrize("name", sorted(_STORED))
def test_text_and_dict_decode_alike_and_encode_json_is_the_same_document(name: str) -> None:
    """``decode`` of JSON text validates in one pass; the result is the one the dict path
    gives, and ``encode_json`` writes the document ``encode`` does, key for key."""
    stored = _STORED[name]
    from_text, from_dict = decode(stored), decode(json.loads(stored))
    assert from_text == from_dict
    assert json.dumps(json.loads(encode_json(from_text))) == json.dumps(encode(from_dict))


@pytest.mark.parametrize("name", sorted(_STORED))
def test_the_hold_state_read_from_the_text_is_the_full_decode_s(name: str) -> None:
    """The Store diffs hold and incident rows against ``decode_holds``: it must see
    every wait, incident and the suspension exactly as the full decode does."""
    stored = _STORED[name]
    full, holds = decode(stored), decode_holds(stored)
    assert (holds.waits, holds.incidents, holds.suspended) == (
        full.waits,
        full.incidents,
        full.suspended,
    )


@pytest.mark.parametrize("name", sorted(_STORED))
def test_the_hold_state_copied_from_a_decode_is_the_one_read_from_the_text(name: str) -> None:
    """``apply(keep_holds=True)`` hands the Store ``holds_of`` its decode instead of a
    second parse: the same waits, incidents and suspension, and copies of them."""
    stored = _STORED[name]
    full = decode(stored)
    kept, read = holds_of(full), decode_holds(stored)
    assert (kept.waits, kept.incidents, kept.suspended) == (
        read.waits,
        read.incidents,
        read.suspended,
    )
    for wait_id, wait in full.waits.items():
        assert kept.waits[wait_id] is not wait
        wait.node_id = "changed by the step"
        assert kept.waits[wait_id].node_id != "changed by the step"


def test_the_hold_state_of_an_older_schema_takes_the_full_decode() -> None:
    doc = json.loads(_STORED["resumed"]) | {"schema": 1}
    assert isinstance(decode_holds(json.dumps(doc)), Checkpoint)


@pytest.mark.parametrize(
    ("change", "error", "reason"),
    [
        pytest.param({"schema": None}, CorruptCheckpoint, "no valid 'schema'", id="missing"),
        pytest.param({"schema": True}, CorruptCheckpoint, "no valid 'schema'", id="bool"),
        pytest.param({"schema": 2.0}, CorruptCheckpoint, "no valid 'schema'", id="float"),
        pytest.param({"schema": "2"}, CorruptCheckpoint, "no valid 'schema'", id="string"),
        pytest.param(
            {"schema": CURRENT_SCHEMA + 1},
            CheckpointTooNew,
            f"has schema {CURRENT_SCHEMA + 1}",
            id="too-new",
        ),
        pytest.param({"extra": 1}, CorruptCheckpoint, "does not validate", id="unknown-field"),
    ],
)
def test_the_one_pass_text_decode_refuses_what_the_dict_path_refuses(
    change: dict[str, Any], error: type[Exception], reason: str
) -> None:
    doc = json.loads(_STORED["resumed"]) | change
    if change.get("schema", 0) is None:
        del doc["schema"]
    for raw in (json.dumps(doc), json.dumps(doc).encode(), doc):
        with pytest.raises(error, match=reason):
            decode(raw)
    if "extra" not in change:  # (a field outside waits and incidents is apply's to refuse)
        with pytest.raises(error, match=reason):
            decode_holds(json.dumps(doc))


def _containers(obj: Any) -> Iterator[Any]:
    """Every mutable object reachable from ``obj``: dataclasses, dicts, lists."""
    stack = [obj]
    while stack:
        value = stack.pop()
        if is_dataclass(value) and not isinstance(value, type):
            yield value
            stack.extend(getattr(value, f.name) for f in fields(value))
        elif isinstance(value, dict):
            yield value
            stack.extend(value.values())
        elif isinstance(value, list):
            yield value
            stack.extend(value)


def _shared(a: Checkpoint, b: Checkpoint) -> list[Any]:
    ids = {id(c) for c in _containers(a)}
    return [c for c in _containers(b) if id(c) in ids]


@pytest.mark.parametrize("name", sorted(_STORED))
def test_the_copy_is_equal_and_shares_nothing_mutable(name: str) -> None:
    cp = decode(_STORED[name])
    copy = copy_checkpoint(cp)
    assert copy == cp
    assert json.dumps(encode(copy)) == _upgraded(_STORED[name])
    assert _shared(cp, copy) == []


def _definitions() -> dict[str, ProcessDefinition]:
    found: dict[str, ProcessDefinition] = {}
    for path in sorted(CAMUNDA8.glob("*.bpmn")):
        try:
            for d in read_bpmn(path.read_bytes()):
                found[f"{path.stem}/{d.key}"] = d
        except DormantError:  # a refused model has no stored document
            continue
    return found


def _triggers(cp: Checkpoint) -> Iterator[Trigger]:
    """A trigger for each wait of ``cp`` (the one its kind takes), then a cancel."""
    for wait in cp.waits.values():
        if wait.kind is WaitKind.USER_TASK:
            yield TaskCompleted(wait_id=wait.id, variables={"done": True})
        elif wait.kind is WaitKind.JOB:
            yield JobCompleted(wait_id=wait.id, attempt=wait.attempt, variables={"r": [1]})
            yield JobFailed(wait_id=wait.id, attempt=wait.attempt, error="e", error_class="E")
        elif wait.kind is WaitKind.MESSAGE:
            yield MessageReceived(
                wait_id=wait.id,
                name=wait.message_name or "",
                correlation_key=wait.correlation_key,
                variables={"m": {"k": 1}},
            )
        elif wait.kind is WaitKind.SIGNAL:
            yield SignalReceived(wait_id=wait.id, name=wait.signal_name or "")
        elif wait.due_at is not None:
            yield TimerFired(wait_id=wait.id)
    if not cp.status.ended:
        yield Cancel()


def _later(cp: Checkpoint) -> datetime:
    """A moment every timer of ``cp`` is due at: each step fires the overdue ones first."""
    return max([T0, *(w.due_at for w in cp.waits.values() if w.due_at is not None)])


_DEFINITIONS = _definitions()
_CONFORMANCE = sorted(n for n in _STORED if n in _DEFINITIONS)


@pytest.mark.parametrize("name", _CONFORMANCE)
def test_apply_never_mutates_its_input_document(name: str) -> None:
    definition = _DEFINITIONS[name]
    cp = decode(_STORED[name])
    for trigger in _triggers(cp):
        step = apply(definition, cp, trigger, now=_later(cp))
        assert json.dumps(encode(cp)) == _upgraded(_STORED[name]), (
            f"{trigger.kind} mutated its input"
        )
        if step.changed:
            assert _shared(cp, step.checkpoint) == [], f"{trigger.kind} shares state"


def test_the_step_machine_calls_no_pydantic() -> None:
    """Over every conformance model's triggers, no pydantic frame and no pydantic-core
    validator or serializer runs inside ``apply``: the working state is plain."""
    seen: set[str] = set()

    def watch(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and "/pydantic/" in frame.f_code.co_filename:
            seen.add(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
        elif event == "c_call" and type(getattr(arg, "__self__", None)).__module__.startswith(
            "pydantic_core"
        ):
            seen.add(getattr(arg, "__qualname__", repr(arg)))

    steps = 0
    for name in _CONFORMANCE:
        cp = decode(_STORED[name])
        for trigger in _triggers(cp):
            sys.setprofile(watch)
            try:
                apply(_DEFINITIONS[name], cp, trigger, now=_later(cp))
            finally:
                sys.setprofile(None)
            steps += 1
    assert steps > 50
    assert seen == set()


@pytest.mark.parametrize("name", _CONFORMANCE)
def test_apply_given_the_stored_text_steps_as_given_the_decoded_checkpoint(name: str) -> None:
    """Given the stored text, ``apply`` decodes it into its private working state (the
    decode is the copy); every step is the one the decoded checkpoint gives."""
    definition, stored = _DEFINITIONS[name], _STORED[name]
    cp = decode(stored)
    for trigger in [*_triggers(cp), TaskCompleted(wait_id="gone")]:
        from_text = apply(definition, stored, trigger, now=_later(cp))
        from_state = apply(definition, cp, trigger, now=_later(cp))
        assert from_text.changed == from_state.changed
        assert encode(from_text.checkpoint) == encode(from_state.checkpoint)
        assert (from_text.effects, from_text.facts) == (from_state.effects, from_state.facts)
        if not from_text.changed:
            assert json.dumps(encode(from_text.checkpoint)) == _upgraded(stored)


def test_nested_json_values_are_copied_all_the_way_down() -> None:
    cp = decode(_STORED["resumed"])
    cp.scopes["s0"].variables["deep"] = [[1, {"b": [2, {"c": []}]}], {"d": {"e": [3]}}]
    copy = copy_checkpoint(cp)
    assert copy == cp
    assert _shared(cp, copy) == []


@pytest.mark.parametrize("hint", [int | str, set[str], tuple[int, ...], list[set[str]]])
def test_a_field_type_without_a_copy_rule_is_refused_at_import(hint: Any) -> None:
    with pytest.raises(TypeError, match="checkpoint field type"):
        _copier(hint)


@pytest.mark.parametrize("as_text", [False, True], ids=["checkpoint", "text"])
def test_an_invariant_broken_mid_step_fails_the_instance_from_an_untouched_copy(
    as_text: bool,
) -> None:
    """A token at a node the definition lacks is dormant's bug, not the model's: the
    instance fails, from a fresh private state (nothing half-done), input untouched."""
    name = next(n for n in _CONFORMANCE if decode(_STORED[n]).waits)
    stored = _STORED[name]
    doc = json.loads(stored)
    wait = next(iter(doc["waits"].values()))
    doc["tokens"][wait["token_id"]]["node_id"] = "no-such-node"
    text = json.dumps(doc)
    cp = decode(text)
    trigger = next(_triggers(cp))
    step = apply(_DEFINITIONS[name], text if as_text else cp, trigger, now=_later(cp))
    assert step.checkpoint.status.value == "failed"
    assert "internal invariant broken" in (step.checkpoint.failure or "")
    assert json.dumps(encode(cp)) == _upgraded(text)


def test_apply_keeps_the_state_before_the_step_only_when_asked() -> None:
    """The Store asks (``keep_holds=True``) and diffs its rows against what it gets."""
    from datetime import UTC, datetime

    from bench.models import LOOP
    from dormant.engine_core.bpmn import read_bpmn
    from dormant.engine_core.engine import apply, new_checkpoint
    from dormant.engine_core.triggers import Start, TaskCompleted

    now = datetime(2026, 12, 1, tzinfo=UTC)
    (definition,) = read_bpmn(LOOP)
    first = new_checkpoint(definition, "i-1", 1, now)
    started = apply(definition, first, Start(variables={"again": True}), now=now)
    stored = encode_json(started.checkpoint)
    (wait,) = started.checkpoint.waits.values()
    trigger = TaskCompleted(wait_id=wait.id, variables={"again": True})
    step = apply(definition, stored, trigger, now=now, keep_holds=True)
    assert step.holds_before is not None
    assert step.holds_before.waits == decode_holds(stored).waits == {wait.id: wait}
    assert set(step.checkpoint.waits) != {wait.id}  # the loop armed a new task
    assert apply(definition, stored, trigger, now=now).holds_before is None


@pytest.mark.parametrize("name", sorted(_STORED))
def test_a_row_stores_the_document_without_its_identity_and_reads_it_whole(name: str) -> None:
    """``encode_row_json`` leaves the instance id and process key to the row;
    ``with_row_identity`` puts them back, from text, bytes or a dict, and a document
    stored whole keeps its own."""
    cp = decode(_STORED[name])
    row = encode_row_json(cp)
    assert not ROW_IDENTITY & set(json.loads(row))
    for raw in (row, row.encode(), json.loads(row), " " + row, _STORED[name]):
        assert decode(with_row_identity(raw, cp.instance_id, cp.process_key)) == cp


def test_row_identity_leaves_what_is_no_object_for_decode_to_refuse() -> None:
    assert with_row_identity("[1]", "i", "p") == "[1]"
    assert json.loads(with_row_identity(" { } ", "i", "p")) == {
        "instance_id": "i",
        "process_key": "p",
    }
    with pytest.raises(CorruptCheckpoint):
        decode(with_row_identity("not json", "i", "p"))
