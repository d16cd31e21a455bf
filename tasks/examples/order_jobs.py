# mypy: disable-error-code="untyped-decorator"
"""The job of the order example: an ordinary Celery task named like the job type.

Load it into a worker with ``dormant worker --include dormant.tasks.examples.order_jobs``.
Jobs are delivered at least once: the idempotency key (``instance:wait:attempt``) is
what a real payment API would be given so that a repeated run charges only once.
"""

from __future__ import annotations

from typing import Any

from celery import Task

from dormant.tasks.app import app
from dormant.tasks.jobs import idempotency_key


@app.task(name="charge-card", bind=True)
def charge_card(self: Task, orderId: str, amount: float, **_: Any) -> dict[str, Any]:
    """Pretend to charge the card; the returned dict is merged into the variables."""
    key = idempotency_key(self) or "direct-call"
    return {
        "charged": True,
        "chargeId": f"ch-{orderId}",
        "chargeKey": key,
        "charged_amount": amount,
    }
