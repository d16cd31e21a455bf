"""dormant: a BPMN process engine on Celery, where every process instance is dormant
between triggers.

This module is the one door to what a user of dormant writes against::

    from dormant import Client, BpmnError, RateLimited, app, heartbeat

Its names are loaded on first use (PEP 562), so ``import dormant`` costs no Celery,
SQLAlchemy or FEEL import: a producer that only needs ``Client`` pays for the Client,
and a CLI command for what it runs. The packages below it (``dormant.engine_core``,
``dormant.persistence``, ``dormant.scheduler``, ``dormant.tasks``) are the engine's own
business, mapped in docs/internals.md; code outside dormant imports from here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dormant.engine_core.errors import (
        BpmnError,
        CallerError,
        CheckpointTooNew,
        CorruptCheckpoint,
        CorruptEffect,
        DatabaseUnavailable,
        DecisionError,
        DecisionEvaluationError,
        DecisionNotDeployed,
        DormantError,
        EngineInvariantError,
        ExpressionError,
        ExpressionLimitExceeded,
        InvalidField,
        InvalidMessage,
        InvalidModel,
        InvalidOperation,
        InvalidSetting,
        InvalidTestCases,
        InvalidVariables,
        ModelError,
        NotMigrated,
        OperatorError,
        PoisonTrigger,
        StoredDataError,
        TransitionDenied,
        UnknownDeployment,
        UnknownEffect,
        UnknownFailedTrigger,
        UnknownIncident,
        UnknownInstance,
        UnknownProcess,
        UnknownTask,
        UnsupportedElement,
    )
    from dormant.engine_core.job_flow import RateLimited
    from dormant.engine_core.views import (
        FactView,
        FailedTriggerView,
        IncidentView,
        InstanceView,
        ScopeView,
        TokenView,
        UserTaskView,
        WaitView,
    )
    from dormant.persistence.deployments import Deployment, DeploymentRecord
    from dormant.tasks.app import app
    from dormant.tasks.client import Client
    from dormant.tasks.jobs import heartbeat, idempotency_key, job_tenant, task_headers

# Where each public name lives: the lazy loader reads this table, and a test holds
# ``__all__`` (a literal, so type checkers see the re-exports) to exactly its names.
_HOMES: dict[str, str] = {
    "Client": "dormant.tasks.client",
    "app": "dormant.tasks.app",
    "heartbeat": "dormant.tasks.jobs",
    "idempotency_key": "dormant.tasks.jobs",
    "job_tenant": "dormant.tasks.jobs",
    "task_headers": "dormant.tasks.jobs",
    "Deployment": "dormant.persistence.deployments",
    "DeploymentRecord": "dormant.persistence.deployments",
    "FactView": "dormant.engine_core.views",
    "FailedTriggerView": "dormant.engine_core.views",
    "IncidentView": "dormant.engine_core.views",
    "InstanceView": "dormant.engine_core.views",
    "ScopeView": "dormant.engine_core.views",
    "TokenView": "dormant.engine_core.views",
    "UserTaskView": "dormant.engine_core.views",
    "WaitView": "dormant.engine_core.views",
    "BpmnError": "dormant.engine_core.errors",
    "CallerError": "dormant.engine_core.errors",
    "CheckpointTooNew": "dormant.engine_core.errors",
    "CorruptCheckpoint": "dormant.engine_core.errors",
    "CorruptEffect": "dormant.engine_core.errors",
    "DatabaseUnavailable": "dormant.engine_core.errors",
    "DecisionError": "dormant.engine_core.errors",
    "DecisionEvaluationError": "dormant.engine_core.errors",
    "DecisionNotDeployed": "dormant.engine_core.errors",
    "DormantError": "dormant.engine_core.errors",
    "EngineInvariantError": "dormant.engine_core.errors",
    "ExpressionError": "dormant.engine_core.errors",
    "ExpressionLimitExceeded": "dormant.engine_core.errors",
    "InvalidField": "dormant.engine_core.errors",
    "InvalidMessage": "dormant.engine_core.errors",
    "InvalidModel": "dormant.engine_core.errors",
    "InvalidOperation": "dormant.engine_core.errors",
    "InvalidSetting": "dormant.engine_core.errors",
    "InvalidTestCases": "dormant.engine_core.errors",
    "InvalidVariables": "dormant.engine_core.errors",
    "ModelError": "dormant.engine_core.errors",
    "NotMigrated": "dormant.engine_core.errors",
    "OperatorError": "dormant.engine_core.errors",
    "PoisonTrigger": "dormant.engine_core.errors",
    "StoredDataError": "dormant.engine_core.errors",
    "TransitionDenied": "dormant.engine_core.errors",
    "UnknownDeployment": "dormant.engine_core.errors",
    "UnknownEffect": "dormant.engine_core.errors",
    "UnknownFailedTrigger": "dormant.engine_core.errors",
    "UnknownIncident": "dormant.engine_core.errors",
    "UnknownInstance": "dormant.engine_core.errors",
    "UnknownProcess": "dormant.engine_core.errors",
    "UnknownTask": "dormant.engine_core.errors",
    "UnsupportedElement": "dormant.engine_core.errors",
    "RateLimited": "dormant.engine_core.job_flow",
}

__all__ = [
    "BpmnError",
    "CallerError",
    "CheckpointTooNew",
    "Client",
    "CorruptCheckpoint",
    "CorruptEffect",
    "DatabaseUnavailable",
    "DecisionError",
    "DecisionEvaluationError",
    "DecisionNotDeployed",
    "Deployment",
    "DeploymentRecord",
    "DormantError",
    "EngineInvariantError",
    "ExpressionError",
    "ExpressionLimitExceeded",
    "FactView",
    "FailedTriggerView",
    "IncidentView",
    "InstanceView",
    "InvalidField",
    "InvalidMessage",
    "InvalidModel",
    "InvalidOperation",
    "InvalidSetting",
    "InvalidTestCases",
    "InvalidVariables",
    "ModelError",
    "NotMigrated",
    "OperatorError",
    "PoisonTrigger",
    "RateLimited",
    "ScopeView",
    "StoredDataError",
    "TokenView",
    "TransitionDenied",
    "UnknownDeployment",
    "UnknownEffect",
    "UnknownFailedTrigger",
    "UnknownIncident",
    "UnknownInstance",
    "UnknownProcess",
    "UnknownTask",
    "UnsupportedElement",
    "UserTaskView",
    "WaitView",
    "app",
    "heartbeat",
    "idempotency_key",
    "job_tenant",
    "task_headers",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'dormant' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
