"""The requests of the Camunda 8 Orchestration Cluster REST API (v2) that dormant
serves, as its own pydantic models, written from Camunda's public documentation
(docs/camunda-api.md). One declared schema per request: a body that does not fit is a
400 problem naming the field, before anything is read or written.

Fields the clients send that dormant has no use for (``operationReference``, ...) are
accepted and ignored (``extra="ignore"``). ``tenantId`` is read where a request acts
for a tenant (creating an instance, publishing or correlating a message, broadcasting
a signal; docs/tenants.md): c8ctl and Desktop Modeler send ``"<default>"``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "ActivateJobs",
    "AssignUserTask",
    "BroadcastSignal",
    "CompleteJob",
    "CompleteUserTask",
    "CorrelateMessage",
    "CreateInstance",
    "EvaluateDecision",
    "FailJob",
    "MigrateInstance",
    "ModifyInstance",
    "PublishMessage",
    "Search",
    "SetVariables",
    "ThrowJobError",
    "UpdateJob",
]


class _Request(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class _TenantRequest(_Request):
    tenant_id: str | None = None  # None: the default tenant


class CreateInstance(_TenantRequest):
    process_definition_id: str | None = None
    process_definition_version: int = -1  # -1: the latest version
    process_definition_key: str | None = Field(default=None, pattern=r"^-?[0-9]+$")
    variables: dict[str, Any] | None = None
    await_completion: bool = False
    fetch_variables: list[str] | None = None
    request_timeout: int = 0  # milliseconds; 0: the server's default
    tags: list[str] = Field(default_factory=list)
    business_id: str | None = None


class ActivateJobs(_Request):
    type: str = Field(min_length=1)
    tenant_ids: list[str] | None = None  # None or empty: every tenant's jobs
    worker: str | None = None
    timeout: int = Field(gt=0)  # milliseconds
    max_jobs_to_activate: int = Field(gt=0, le=1000)
    fetch_variable: list[str] | None = None
    request_timeout: int = 0  # milliseconds; 0: the server's default, < 0: answer at once


class ActivateElement(_Request):
    element_id: str = Field(min_length=1, max_length=255)
    variables: dict[str, Any] | None = None


class JobResult(_Request):
    """A job completion's ``result``; dormant serves the ad-hoc sub-process's."""

    type: str | None = None
    activate_elements: list[ActivateElement] = Field(default_factory=list)
    is_completion_condition_fulfilled: bool = False
    is_cancel_remaining_instances: bool = False


class CompleteJob(_Request):
    variables: dict[str, Any] | None = None
    result: JobResult | None = None


class FailJob(_Request):
    retries: int = 0
    error_message: str | None = None
    retry_back_off: int = 0  # milliseconds
    variables: dict[str, Any] | None = None


class ThrowJobError(_Request):
    error_code: str = Field(min_length=1)
    error_message: str | None = None
    variables: dict[str, Any] | None = None


class JobChangeset(_Request):
    retries: int | None = Field(default=None, ge=1)  # attempts left, this one included
    timeout: int | None = Field(default=None, gt=0)  # milliseconds


class UpdateJob(_Request):
    changeset: JobChangeset


class PublishMessage(_TenantRequest):
    name: str = Field(min_length=1)
    correlation_key: str | None = None
    time_to_live: int | None = Field(default=None, ge=0)  # milliseconds
    message_id: str | None = None
    variables: dict[str, Any] | None = None


class CorrelateMessage(_TenantRequest):
    name: str = Field(min_length=1)
    correlation_key: str | None = None
    variables: dict[str, Any] | None = None


class BroadcastSignal(_TenantRequest):
    signal_name: str = Field(min_length=1)
    variables: dict[str, Any] | None = None


class AssignUserTask(_Request):
    assignee: str = Field(min_length=1)
    allow_override: bool = True


class CompleteUserTask(_Request):
    variables: dict[str, Any] | None = None


class SetVariables(_Request):
    variables: dict[str, Any]
    local: bool = False


class EvaluateDecision(_Request):
    decision_definition_id: str | None = None
    decision_definition_key: str | None = Field(default=None, pattern=r"^-?[0-9]+$")
    variables: dict[str, Any] | None = None


class ActivateInstruction(_Request):
    element_id: str = Field(min_length=1)
    variable_instructions: list[dict[str, Any]] = Field(default_factory=list)
    ancestor_element_instance_key: str | None = None


class SourceElement(_Request):
    source_type: str = "byId"
    source_element_id: str | None = None
    source_element_instance_key: str | None = Field(default=None, pattern=r"^-?[0-9]+$")


class MoveInstruction(_Request):
    source_element_instruction: SourceElement
    target_element_id: str = Field(min_length=1)
    variable_instructions: list[dict[str, Any]] = Field(default_factory=list)


class TerminateInstruction(_Request):
    element_id: str | None = None
    element_instance_key: str | None = Field(default=None, pattern=r"^-?[0-9]+$")


class ModifyInstance(_Request):
    activate_instructions: list[ActivateInstruction] = Field(default_factory=list)
    move_instructions: list[MoveInstruction] = Field(default_factory=list)
    terminate_instructions: list[TerminateInstruction] = Field(default_factory=list)


class MappingInstruction(_Request):
    source_element_id: str = Field(min_length=1)
    target_element_id: str = Field(min_length=1)


class MigrateInstance(_Request):
    target_process_definition_key: str = Field(pattern=r"^-?[0-9]+$")
    mapping_instructions: list[MappingInstruction] = Field(default_factory=list)


class Page(_Request):
    """Offset paging (``from``) or cursor paging (``after`` / ``before``, the
    ``endCursor`` / ``startCursor`` of an earlier answer); one of them."""

    limit: int = Field(default=100, ge=1, le=10000)
    from_: int = Field(default=0, ge=0, alias="from")
    after: str | None = Field(default=None, max_length=200)
    before: str | None = Field(default=None, max_length=200)


class Sort(_Request):
    field: str = Field(min_length=1)
    order: Literal["ASC", "DESC", "asc", "desc"] = "ASC"


class Search(_Request):
    """Every search: a filter (its fields depend on the resource; read as a plain
    object, each route takes the fields it supports) and a page."""

    filter: dict[str, Any] = Field(default_factory=dict)
    page: Page = Field(default_factory=Page)
    sort: list[Sort] = Field(default_factory=list, max_length=10)
