"""dormant's pure core: the BPMN semantics, with no I/O, clock or environment.

Everything an instance is and does is decided here, as a function of
(definition, checkpoint, trigger, now); the packages above only store, lock, route
and carry what this package returns. The names below are the core's public surface
(a test keeps ``__all__`` honest); the modules behind them are the core's own
business, mapped in docs/internals.md.
"""

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
