"""The Client's operations on running instances (mixed into ``tasks.client.Client``).

Same door as the rest of the Client: what can be checked is checked before anything is
written (an ended instance, a suspend of a suspended one, variables that are not JSON,
a migration plan that does not fit), then the trigger goes through the inbox. Bulk
operations write a batch (persistence/batches.py) and enqueue its runner.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dormant.engine_core.checkpoint import ROOT_SCOPE, InstanceStatus
from dormant.engine_core.errors import InvalidOperation
from dormant.engine_core.inputs import Limits, variables_params
from dormant.engine_core.migration import problems
from dormant.engine_core.views import InstanceView
from dormant.persistence import batches, clock, job_pause
from dormant.persistence.batches import BatchItemView, BatchState, BatchView
from dormant.persistence.selection import Selector, Target
from dormant.persistence.settings import Settings
from dormant.persistence.store import Store
from dormant.tasks import wire
from dormant.tasks.wire import Send

__all__ = ["Operations"]


class Operations:
    """Suspend, resume, set variables, migrate, modify; in bulk; and the batches."""

    _store: Store
    _limits: Limits
    settings: Settings

    def _send(self, message: Send) -> str:
        raise NotImplementedError  # pragma: no cover - the Client's

    def instance(self, instance_id: str) -> InstanceView:
        raise NotImplementedError  # pragma: no cover - the Client's

    def _running(self, instance_id: str, what: str) -> InstanceView:
        view = self.instance(instance_id)
        if InstanceStatus(view.status).ended:
            raise InvalidOperation(
                f"instance {instance_id} ({view.key} v{view.version}) is {view.status}; "
                f"nothing to {what}"
            )
        return view

    # -- one instance --------------------------------------------------------------

    def suspend(self, instance_id: str) -> None:
        """Hold the instance's triggers (and timers) until ``resume``."""
        if self._running(instance_id, "suspend").suspended:
            raise InvalidOperation(f"instance {instance_id} is already suspended")
        self._send(wire.suspend(instance_id))

    def resume(self, instance_id: str) -> None:
        """Apply the held triggers in arrival order; due timers fire once."""
        if not self._running(instance_id, "resume").suspended:
            raise InvalidOperation(f"instance {instance_id} is not suspended; nothing to resume")
        self._send(wire.resume(instance_id))

    def set_variables(
        self,
        instance_id: str,
        variables: Mapping[str, Any] | None = None,
        unset: Iterable[str] = (),
        *,
        scope: str = ROOT_SCOPE,
        retry_incidents: bool = False,
    ) -> None:
        """Set or remove variables in ``scope`` (a scope id or a sub-process node id),
        validated as a start's are; ``retry_incidents`` retries the open incidents after."""
        kwargs = variables_params(variables, unset, scope, retry_incidents, self._limits)
        self._running(instance_id, "change")
        self._send(wire.set_variables(instance_id, kwargs))

    def migration_problems(
        self, instance_id: str, version: int, mapping: Mapping[str, str] | None = None
    ) -> list[str]:
        """Why the instance cannot move to ``version`` (empty: the plan fits). Read-only."""
        cp = self._store.checkpoint(instance_id)
        source, _ = self._store.definition(cp.process_key, cp.version)
        target, _ = self._store.definition(cp.process_key, version)
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
        self._send(wire.migrate(instance_id, version, dict(mapping or {})))

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
        self._send(wire.modify(instance_id, cancel, start))

    # -- job types -----------------------------------------------------------------

    def pause_job_type(self, job_type: str) -> None:
        """Stop sending jobs of ``job_type``; they are held until ``resume_job_type``."""
        job_pause.pause(self._store.engine, job_type, clock.now())

    def resume_job_type(self, job_type: str) -> int:
        """Send the held jobs of ``job_type`` again; returns how many were held."""
        return job_pause.resume(self._store.engine, job_type, clock.now())

    def paused_job_types(self) -> dict[str, int]:
        """Paused job types and how many jobs each holds."""
        return job_pause.paused(self._store.engine)

    # -- in bulk -------------------------------------------------------------------

    def select(self, operation: str, selector: Selector) -> list[Target]:
        """What a bulk operation would act on (a dry run)."""
        return batches.preview(self._store, operation, selector)

    def bulk(
        self, operation: str, selector: Selector, params: Mapping[str, Any] | None = None
    ) -> BatchView:
        """Write a batch for ``operation`` (``incident_retry|resolve|drop``, ``cancel``,
        ``suspend``, ``resume``, ``migrate``, ``set_variables``) and start it."""
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
            self._store.definition(selector.key, int(params.get("version", 0)))
        view = batches.create(self._store, operation, selector, params, clock.now())
        if view.state == BatchState.RUNNING:
            with pooled_producer(self.settings.broker_url) as producer:
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

    def wait_batch(
        self,
        batch_id: str,
        timeout: float | None = None,
        progress: Callable[[BatchView], None] | None = None,
        poll: float = 0.5,
    ) -> BatchView:
        """Poll until the batch completes (or ``timeout``), calling ``progress`` each time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            view = self.batch(batch_id)
            if progress is not None:
                progress(view)
            if view.state == BatchState.COMPLETED or (
                deadline is not None and time.monotonic() > deadline
            ):
                return view
            time.sleep(poll)
