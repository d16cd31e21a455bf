# mypy: disable-error-code="no-untyped-call"
"""A tenant's own job queue: how ``dormant worker --tenants`` serves chosen tenants.

A job of an instance of the default tenant goes where it always went (``job.<type>``
on the ``dormant`` exchange, or the queue its type is routed to). A job of any other
tenant goes to ``dormant.tenant.<tenant>``, a queue with a direct exchange of the same
name, declared with each publish (on Redis a message for a queue not yet bound is
dropped): only a worker started with that tenant in ``--tenants`` reads it, so one
tenant's jobs never run in another tenant's job workers (docs/tenants.md). A direct
exchange per tenant, never a topic pattern: tenant ids may hold dots, and ``a.#``
would also match tenant ``a.b``'s keys.
"""

from __future__ import annotations

from collections.abc import Iterable

from kombu.entity import Exchange, Queue

from dormant.engine_core.tenants import DEFAULT_TENANT, check_tenants

__all__ = ["TENANT_JOBS_KEY", "tenant_queue", "tenant_queue_names"]

# The one routing key of every tenant's queue: its exchange is the tenant's own.
TENANT_JOBS_KEY = "tenant.jobs"


def tenant_queue(tenant: str) -> Queue:
    """The job queue of ``tenant`` (not the default tenant: its jobs keep their queues)."""
    name = f"dormant.tenant.{tenant}"
    return Queue(name, Exchange(name, type="direct", durable=True), routing_key=TENANT_JOBS_KEY)


def tenant_queue_names(tenants: Iterable[str], default_queues: str) -> tuple[list[Queue], str]:
    """The queues a worker serving ``tenants`` declares, and its ``-Q`` list:
    ``<default>`` among them means ``default_queues`` (the triggers and the default
    tenant's jobs), every other tenant its own queue."""
    queues: list[Queue] = []
    names: list[str] = []
    for tenant in check_tenants(tenants, "--tenants"):
        if tenant == DEFAULT_TENANT:
            names.extend(n for n in default_queues.split(",") if n not in names)
            continue
        queue = tenant_queue(tenant)
        queues.append(queue)
        names.append(queue.name)
    return queues, ",".join(names)
