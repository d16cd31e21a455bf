# mypy: disable-error-code="untyped-decorator"
"""The example's job: charge a card through a payment gateway that is not configured yet.

The "configuration" is a file named by ``EXAMPLE_GATEWAY_FLAG`` — it lives outside the
process instance, as the fix for a real incident would (a credential, a row, a service
coming back). Until the file exists the job raises, and after the model's retries the
engine opens an incident that waits for an operator.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Task

from dormant import app, idempotency_key


class GatewayNotConfigured(RuntimeError):
    """The payment gateway has no configuration yet."""


@app.task(name="example-charge-card", bind=True)
def charge_card(self: Task, orderId: str, amount: float, **_: Any) -> dict[str, Any]:
    if not Path(os.environ["EXAMPLE_GATEWAY_FLAG"]).exists():
        raise GatewayNotConfigured("the payment gateway is not configured")
    # A real gateway call would pass idempotency_key(self): the job may run twice.
    return {"receipt": f"r-{orderId}", "charged_with_key": idempotency_key(self)}
