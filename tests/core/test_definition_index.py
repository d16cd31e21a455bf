"""What the step caches per definition, and per expression text, is what it would have
computed on every step: the index of every conformance model against a plain scan, the
literal FEEL expressions folded to their value (and nothing else), the duration cache
bounded."""

from __future__ import annotations

import pytest

from dormant.engine_core import timers
from dormant.engine_core.bpmn import read_bpmn
from dormant.engine_core.errors import DormantError
from dormant.engine_core.feel.api import compile_expression
from dormant.engine_core.feel.scope import MISSING
from dormant.engine_core.model import EventKind, NodeKind, ProcessDefinition
from tests.conformance import CAMUNDA8


def _definitions() -> list[ProcessDefinition]:
    found: list[ProcessDefinition] = []
    for path in sorted(CAMUNDA8.glob("*.bpmn")):
        try:
            found.extend(read_bpmn(path.read_bytes()))
        except DormantError:
            continue
    assert len(found) > 50
    return found


@pytest.mark.parametrize("definition", _definitions(), ids=lambda d: d.key)
def test_the_index_is_what_a_scan_of_the_definition_gives(definition: ProcessDefinition) -> None:
    index = definition.index
    for node in definition.nodes.values():
        flows = tuple(definition.flows[f] for f in node.outgoing)
        assert index.outgoing[node.id] == flows
        assert (node.id in index.unconditional) == all(f.condition is None for f in flows)
    for container in definition.children:
        inside = definition.nodes_in(container)
        assert definition.event_sub_processes(container) == tuple(
            n for n in inside if n.kind is NodeKind.EVENT_SUB_PROCESS
        )
        assert definition.none_starts(container) == tuple(
            n for n in inside if n.kind is NodeKind.START_EVENT and n.event.kind is EventKind.NONE
        )


@pytest.mark.parametrize(
    ("text", "value"),
    [('"PT1H"', "PT1H"), ("true", True), ("false", False), ("null", None)],
)
def test_a_literal_expression_is_its_value(text: str, value: object) -> None:
    compiled = compile_expression(text)
    assert compiled._constant == value and compiled._constant is not MISSING
    assert compiled.evaluate({"PT1H": 1, "true": 2}) == value


@pytest.mark.parametrize("text", ["again", "1", '"a" + x', "[1]", "{a: 1}", "now()", "-1"])
def test_anything_but_a_literal_is_evaluated(text: str) -> None:
    assert compile_expression(text)._constant is MISSING


def test_the_duration_cache_keeps_only_short_texts() -> None:
    timers._parse_duration.cache_clear()
    assert timers._duration("PT1H").total_seconds() == 3600
    assert timers._duration("P" + "0" * 80 + "1D").days == 1
    assert timers._parse_duration.cache_info().currsize == 1
