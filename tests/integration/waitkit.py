"""Helpers for the wait tests (tests/integration/test_waits.py, tests/faults/): BPMN
built as XML text, and black-box reads of what an instance IS between triggers — its
``instances`` row (the checkpoint) and its hold rows. Nothing here drives the engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import text

HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
    'xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" '
    'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" id="d" targetNamespace="t">'
)
HOLD_TABLES = ("deadlines", "subscriptions", "user_tasks")


def esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def model(
    key: str,
    nodes: str,
    flows: Iterable[tuple[str, ...]],
    *,
    messages: dict[str, str | None] | None = None,
    signals: Iterable[str] = (),
) -> str:
    """A process: ``nodes`` XML, ``flows`` (source, target[, FEEL condition]),
    ``messages`` name -> correlation key expression (None: no key), ``signals`` names.
    Message/signal definitions get ids ``m_<name>`` / ``s_<name>`` (non-word chars → _)."""
    out = []
    for i, f in enumerate(flows):
        cond = (
            f'<bpmn:conditionExpression xsi:type="bpmn:tFormalExpression">{esc(f[2])}'
            "</bpmn:conditionExpression>"
            if len(f) > 2
            else ""
        )
        out.append(
            f'<bpmn:sequenceFlow id="fl{i}" sourceRef="{f[0]}" targetRef="{f[1]}">{cond}'
            "</bpmn:sequenceFlow>"
        )
    defs = ""
    for name, corr in (messages or {}).items():
        sub = (
            f'<bpmn:extensionElements><zeebe:subscription correlationKey="{esc(corr)}"/>'
            "</bpmn:extensionElements>"
            if corr
            else ""
        )
        defs += f'<bpmn:message id="{ref(name, "m")}" name="{name}">{sub}</bpmn:message>'
    for name in signals:
        defs += f'<bpmn:signal id="{ref(name, "s")}" name="{name}"/>'
    return (
        f'{HEAD}{defs}<bpmn:process id="{key}" isExecutable="true">{nodes}{"".join(out)}'
        "</bpmn:process></bpmn:definitions>"
    )


def ref(name: str, prefix: str) -> str:
    return prefix + "_" + "".join(c if c.isalnum() else "_" for c in name)


# -- node snippets ---------------------------------------------------------------------


def start(id_: str = "start") -> str:
    return f'<bpmn:startEvent id="{id_}"/>'


def end(id_: str = "end") -> str:
    return f'<bpmn:endEvent id="{id_}"/>'


def timer_def(duration: str | None = None, cycle: str | None = None) -> str:
    if cycle is not None:
        body = f'<bpmn:timeCycle xsi:type="bpmn:tFormalExpression">{esc(cycle)}</bpmn:timeCycle>'
    else:
        body = (
            f'<bpmn:timeDuration xsi:type="bpmn:tFormalExpression">{esc(duration or "")}'
            "</bpmn:timeDuration>"
        )
    return f"<bpmn:timerEventDefinition>{body}</bpmn:timerEventDefinition>"


def timer_catch(id_: str, duration: str) -> str:
    return (
        f'<bpmn:intermediateCatchEvent id="{id_}">{timer_def(duration)}'
        "</bpmn:intermediateCatchEvent>"
    )


def message_catch(id_: str, name: str) -> str:
    return (
        f'<bpmn:intermediateCatchEvent id="{id_}"><bpmn:messageEventDefinition '
        f'messageRef="{ref(name, "m")}"/></bpmn:intermediateCatchEvent>'
    )


def signal_catch(id_: str, name: str) -> str:
    return (
        f'<bpmn:intermediateCatchEvent id="{id_}"><bpmn:signalEventDefinition '
        f'signalRef="{ref(name, "s")}"/></bpmn:intermediateCatchEvent>'
    )


def signal_throw(id_: str, name: str) -> str:
    return (
        f'<bpmn:intermediateThrowEvent id="{id_}"><bpmn:signalEventDefinition '
        f'signalRef="{ref(name, "s")}"/></bpmn:intermediateThrowEvent>'
    )


def signal_end(id_: str, name: str) -> str:
    return (
        f'<bpmn:endEvent id="{id_}"><bpmn:signalEventDefinition '
        f'signalRef="{ref(name, "s")}"/></bpmn:endEvent>'
    )


def message_start(id_: str, name: str) -> str:
    return (
        f'<bpmn:startEvent id="{id_}"><bpmn:messageEventDefinition '
        f'messageRef="{ref(name, "m")}"/></bpmn:startEvent>'
    )


def user_task(id_: str, name: str = "Task") -> str:
    return f'<bpmn:userTask id="{id_}" name="{name}"/>'


def script(id_: str, expression: str, result: str) -> str:
    return (
        f'<bpmn:scriptTask id="{id_}"><bpmn:extensionElements><zeebe:script '
        f'expression="{esc(expression)}" resultVariable="{result}"/>'
        "</bpmn:extensionElements></bpmn:scriptTask>"
    )


def xor(id_: str, default: str | None = None) -> str:
    d = f' default="{default}"' if default else ""
    return f'<bpmn:exclusiveGateway id="{id_}"{d}/>'


def boundary(id_: str, attached: str, definition: str, *, interrupting: bool = True) -> str:
    cancel = "" if interrupting else ' cancelActivity="false"'
    return (
        f'<bpmn:boundaryEvent id="{id_}" attachedToRef="{attached}"{cancel}>{definition}'
        "</bpmn:boundaryEvent>"
    )


def message_def(name: str) -> str:
    return f'<bpmn:messageEventDefinition messageRef="{ref(name, "m")}"/>'


def signal_def(name: str) -> str:
    return f'<bpmn:signalEventDefinition signalRef="{ref(name, "s")}"/>'


# -- black-box reads -------------------------------------------------------------------


def engine_of(stack: Any) -> Any:
    return stack.client._store.engine


def holds(stack: Any, instance_id: str) -> dict[str, int]:
    """Hold rows of one instance, by table."""
    with engine_of(stack).connect() as conn:
        return {
            t: int(
                conn.execute(
                    text(f"SELECT count(*) FROM {t} WHERE instance_id = :i"), {"i": instance_id}
                ).scalar_one()
            )
            for t in HOLD_TABLES
        }


def deadline_rows(stack: Any, instance_id: str) -> list[Any]:
    with engine_of(stack).connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT wait_id, due_at, attempts, last_error, claimed_until FROM deadlines "
                    "WHERE instance_id = :i ORDER BY wait_id"
                ),
                {"i": instance_id},
            )
        )


def checkpoint(stack: Any, instance_id: str) -> dict[str, Any]:
    """The instance's stored checkpoint document: all there is of it between triggers."""
    with engine_of(stack).connect() as conn:
        row = conn.execute(
            text("SELECT id, key, checkpoint FROM instances WHERE id = :i"), {"i": instance_id}
        ).one()
    from pydantic import TypeAdapter

    from dormant.engine_core.checkpoint import Checkpoint
    from dormant.persistence.instance_rows import checkpoint_of

    return TypeAdapter(Checkpoint).dump_python(checkpoint_of(row), mode="json")


def facts(stack: Any, instance_id: str, kind: str | None = None) -> list[Any]:
    return [f for f in stack.client.history(instance_id) if kind is None or f.kind == kind]


def woken_by(stack: Any, instance_id: str, trigger: str) -> int:
    """How many triggers of kind ``trigger`` were applied (a ``Hydrated`` fact each)."""
    return sum(1 for f in facts(stack, instance_id, "Hydrated") if f.details["trigger"] == trigger)


@contextmanager
def shifted_clock(path: Path, seconds: float) -> Iterator[None]:
    """Move the worker's and beat's clock (DORMANT_CLOCK_OFFSET_FILE) for the block."""
    path.write_text(str(seconds))
    try:
        yield
    finally:
        path.write_text("0")
