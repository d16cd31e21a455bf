"""dormant's pure core: the BPMN semantics, with no I/O, clock or environment.

Everything an instance is and does is decided here, as a function of
(definition, checkpoint, trigger, now); the packages above only store, lock, route
and carry what this package returns. The names below are the core's public surface
(a test keeps ``__all__`` honest); the modules behind them are the core's own
business, mapped in docs/internals.md.

The names are loaded on first use (PEP 562, as ``dormant``'s own door): importing one
module of the core (``dormant.engine_core.errors``) runs this file first, and must not
pay for the BPMN reader and the FEEL grammar it does not use (``dormant --help``,
bench/bench_cli.py).
"""

from __future__ import annotations

import typing

from dormant.engine_core.lazy import lazy_names as _lazy_names

if typing.TYPE_CHECKING:
    from dormant.engine_core.bpmn import read_bpmn
    from dormant.engine_core.builder import ProcessBuilder
    from dormant.engine_core.checkpoint import (
        Checkpoint,
        IncidentState,
        InstanceStatus,
        TokenState,
        WaitKind,
        decode,
        encode,
    )
    from dormant.engine_core.dmn import Decision, evaluate_decision, is_dmn, read_dmn
    from dormant.engine_core.effects import Effect, Fact, Step, encode_effect, parse_effect
    from dormant.engine_core.engine import apply, new_checkpoint
    from dormant.engine_core.errors import BpmnError, DormantError
    from dormant.engine_core.model import ProcessDefinition
    from dormant.engine_core.services import Services
    from dormant.engine_core.triggers import Trigger, parse_trigger
    from dormant.engine_core.views import InstanceView, instance_view

_HOMES: dict[str, str] = {
    "read_bpmn": "dormant.engine_core.bpmn",
    "ProcessBuilder": "dormant.engine_core.builder",
    "Checkpoint": "dormant.engine_core.checkpoint",
    "IncidentState": "dormant.engine_core.checkpoint",
    "InstanceStatus": "dormant.engine_core.checkpoint",
    "TokenState": "dormant.engine_core.checkpoint",
    "WaitKind": "dormant.engine_core.checkpoint",
    "decode": "dormant.engine_core.checkpoint",
    "encode": "dormant.engine_core.checkpoint",
    "Decision": "dormant.engine_core.dmn",
    "evaluate_decision": "dormant.engine_core.dmn",
    "is_dmn": "dormant.engine_core.dmn",
    "read_dmn": "dormant.engine_core.dmn",
    "Effect": "dormant.engine_core.effects",
    "Fact": "dormant.engine_core.effects",
    "Step": "dormant.engine_core.effects",
    "encode_effect": "dormant.engine_core.effects",
    "parse_effect": "dormant.engine_core.effects",
    "apply": "dormant.engine_core.engine",
    "new_checkpoint": "dormant.engine_core.engine",
    "BpmnError": "dormant.engine_core.errors",
    "DormantError": "dormant.engine_core.errors",
    "ProcessDefinition": "dormant.engine_core.model",
    "Services": "dormant.engine_core.services",
    "Trigger": "dormant.engine_core.triggers",
    "parse_trigger": "dormant.engine_core.triggers",
    "InstanceView": "dormant.engine_core.views",
    "instance_view": "dormant.engine_core.views",
}

__all__ = [
    "BpmnError",
    "Checkpoint",
    "Decision",
    "DormantError",
    "Effect",
    "Fact",
    "IncidentState",
    "InstanceStatus",
    "InstanceView",
    "ProcessBuilder",
    "ProcessDefinition",
    "Services",
    "Step",
    "TokenState",
    "Trigger",
    "WaitKind",
    "apply",
    "decode",
    "encode",
    "encode_effect",
    "evaluate_decision",
    "instance_view",
    "is_dmn",
    "new_checkpoint",
    "parse_effect",
    "parse_trigger",
    "read_bpmn",
    "read_dmn",
]


__getattr__, __dir__ = _lazy_names(__name__, _HOMES)
