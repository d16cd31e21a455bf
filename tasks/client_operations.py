"""The Client's operations on running instances: a part of ``tasks.client.Client``.

docs/operations.md documents every operation as a method of the Client
(``client.suspend(id)``, ``client.bulk(...)``, ...), and the console calls them so; they
stay there. The Client composes this object rather than inheriting it: it is given what
it needs (the Store, the Client's durable send, its instance read, the limits and the
broker) instead of assuming the attributes of the class it is mixed into, and the
Client's methods hand each call on to it.

Same door as the rest of the Client: what can be checked is checked before anything is
written (an ended instance, a suspend of a suspended one, variables that are not JSON,
a migration plan that does not fit), then the trigger goes through the inbox. Bulk
operations write a batch (persistence/batches.py) and enqueue its runner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dormant.engine_core.checkpoint import ROOT_SCOPE, InstanceStatus
from dormant.engine_core.errors import InvalidOperation
from dormant.engine_core.inputs import Limits, variables_params
from dormant.engine_core.job_flow import FlowLimits
from dormant.engine_core.migration import problems
from dormant.engine_core.triggers import (
    MigrateInstance,
    ModifyInstance,
    Resume,
    SetVariables,
    Suspend,
    Trigger,
)
from dormant.engine_core.views import InstanceView
from dormant.persistence import batches, clock, job_pause
from dormant.persistence.batches import BatchItemView, BatchState, BatchView
from dormant.persistence.job_flow import FlowRow
from dormant.persistence.selection import Selector, Target
from dormant.persistence.store import Store
from dormant.tasks import wire
from dormant.tasks.wire import Send

__all__ = ["Operations"]


class Operations:
    """Suspend, resume, set variables, migrate, modify; in bulk; and the batches.

    ``send``: the Client's durable send (inbox row first, then published); ``instance``:
    its read of one instance (``UnknownInstance`` with the hint of the Client's);
    ``command``: the Client's record of an operator action in the audit trail
    (``Client._command``), whose result the trigger carries; ``actor``: who a batch's
    items act for (kept in its parameters, carried by each item's trigger)."""

    def __init__(
        self,
        store: Store,
        send: Callable[[Send], str],
        instance: Callable[[str], InstanceView],
        limits: Limits,
        broker_url: str,
        command: Callable[..., dict[str, Any]],
        actor: str | None = None,
    ) -> None:
        self._store = store
        self._send = send
        self._instance = instance
        self._limits = limits
        self._broker_url = broker_url
        self._command = command
        self._actor = actor

    def _send_audited(
        self, message: Send, action: str, instance_id: str, params: Mapping[str, Any] | None = None
    ) -> None:
        cmd = self._command(action, target=instance_id, instance_id=instance_id, params=params)
        self._send(wire.audited(message, cmd))

    def _running(self, instance_id: str, what: str) -> InstanceView:
        view = self._instance(instance_id)
        if InstanceStatus(view.status).ended:
            raise InvalidOperation(
                f"instance {instance_id} ({view.key} v{view.version}) is {view.status}; "
                f"nothing to {what}"
            )
        return view

    def _rehearse(self, instance_id: str, trigger: Trigger) -> None:
        """Raise here the refusal the worker would meet applying ``trigger`` now
        (``Store.rehearse``): every operator action is rehearsed before it is sent, so
        its refusal reaches the caller (the CLI: one line, exit 2), not a worker log."""
        self._store.rehearse(instance_id, trigger, clock.now())

    # -- one instance --------------------------------------------------------------

    def suspend(self, instance_id: str) -> None:
        if self._running(instance_id, "suspend").suspended:
            raise InvalidOperation(f"instance {instance_id} is already suspended")
        self._rehearse(instance_id, Suspend())
        self._send_audited(wire.suspend(instance_id), "suspend", instance_id)

    def resume(self, instance_id: str) -> None:
        if not self._running(instance_id, "resume").suspended:
            raise InvalidOperation(f"instance {instance_id} is not suspended; nothing to resume")
        self._rehearse(instance_id, Resume())
        self._send_audited(wire.resume(instance_id), "resume", instance_id)

    def set_variables(self, instance_id: str, checked: dict[str, Any]) -> None:
        """``Client.set_variables`` with its arguments already checked
        (``variables_params``: the Client checks them before it reads the instance)."""
        self._running(instance_id, "change")
        self._rehearse(instance_id, SetVariables(**checked))
        self._send_audited(
            wire.set_variables(instance_id, checked), "set_variables", instance_id, checked
        )

    def migration_problems(
        self, instance_id: str, version: int, mapping: Mapping[str, str] | None = None
    ) -> list[str]:
        cp = self._store.queries.checkpoint(instance_id)
        source, _ = self._store.deployments.definition(cp.process_key, cp.version)
        target, _ = self._store.deployments.definition(cp.process_key, version)
        return problems(source, target, cp, dict(mapping or {}), version)

    def migrate(
        self, instance_id: str, version: int, mapping: Mapping[str, str] | None = None
    ) -> None:
        """Move the instance to ``version``; the plan is checked first (and again under
        the instance lock), and refused with every reason."""
        self._running(instance_id, "migrate")
        found = self.migration_problems(instance_id, version, mapping)
        if found:
            raise InvalidOperation(
                f"instance {instance_id} cannot move to v{version}: " + "; ".join(found)
            )
        self._rehearse(instance_id, MigrateInstance(version=version, mapping=dict(mapping or {})))
        plan = {"version": version, "mapping": dict(mapping or {})}
        self._send_audited(
            wire.migrate(instance_id, version, dict(mapping or {})), "migrate", instance_id, plan
        )

    def modify(
        self, instance_id: str, cancel_nodes: Iterable[str] = (), start_before: Iterable[str] = ()
    ) -> None:
        """Cancel the tokens at ``cancel_nodes`` and start a token before each of
        ``start_before``; refused (by the worker, with the reason) when it would leave the
        instance inconsistent."""
        cancel, start = list(cancel_nodes), list(start_before)
        if not cancel and not start:
            raise InvalidOperation("nothing to modify: name nodes to cancel or to start before")
        view = self._running(instance_id, "modify")
        if view.suspended:
            raise InvalidOperation(f"instance {instance_id} is suspended; resume it first")
        self._rehearse(instance_id, ModifyInstance(cancel_nodes=cancel, start_before=start))
        nodes = {"cancel_nodes": cancel, "start_before": start}
        self._send_audited(wire.modify(instance_id, cancel, start), "modify", instance_id, nodes)

    # -- job types -----------------------------------------------------------------

    def pause_job_type(self, job_type: str) -> None:
        cmd = self._command("job_type_pause", target=job_type)
        job_pause.pause(self._store.engine, job_type, clock.now(), cmd)

    def resume_job_type(self, job_type: str) -> int:
        cmd = self._command("job_type_resume", target=job_type)
        return job_pause.resume(self._store.engine, job_type, clock.now(), cmd)

    def paused_job_types(self) -> dict[str, int]:
        return job_pause.paused(self._store.engine)

    def job_types(self) -> list[FlowRow]:
        return self._store.flow.rows(clock.now())

    def set_job_type_limits(self, job_type: str, changes: Mapping[str, Any]) -> FlowLimits:
        cmd = self._command("job_type_set_limits", target=job_type, params=dict(changes) or None)
        return self._store.flow.set_limits(job_type, changes, clock.now(), cmd)

    # -- in bulk -------------------------------------------------------------------

    def select(self, operation: str, selector: Selector) -> list[Target]:
        return batches.preview(self._store, operation, selector)

    def bulk(
        self, operation: str, selector: Selector, params: Mapping[str, Any] | None = None
    ) -> BatchView:
        from dormant.tasks.app import pooled_producer
        from dormant.tasks.operations import enqueue_batch

        params = dict(params or {})
        if operation == "set_variables":
            params = variables_params(
                params.get("variables"),
                params.get("unset", ()),
                params.get("scope", ROOT_SCOPE),
                bool(params.get("retry_incidents", False)),
                self._limits,
            )
        if operation == "migrate" and selector.key is not None:
            self._store.deployments.definition(selector.key, int(params.get("version", 0)))
        if self._actor is not None:
            params["actor"] = self._actor
        cmd = self._command(
            f"bulk_{operation}",
            params={
                "selector": selector.model_dump(mode="json", exclude_none=True),
                **{k: v for k, v in params.items() if k != "actor"},
            },
        )
        view = batches.create(self._store, operation, selector, params, clock.now(), cmd)
        if view.state == BatchState.RUNNING:
            with pooled_producer(self._broker_url) as producer:
                enqueue_batch(view.id, producer=producer)
        return view

    def batches(self, limit: int = 100) -> list[BatchView]:
        return batches.list_batches(self._store, limit)

    def batch(self, batch_id: str) -> BatchView:
        found = batches.batch(self._store, batch_id)
        if found is None:
            raise InvalidOperation(f"no batch {batch_id!r}; list them with `dormant batches list`")
        return found

    def batch_items(self, batch_id: str) -> list[BatchItemView]:
        self.batch(batch_id)
        return batches.items(self._store, batch_id)
