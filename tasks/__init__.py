"""The shell: the Celery app, trigger tasks, job dispatch, outbox relay, Client and CLI.

Public names: ``tasks.client.Client``, ``tasks.app.app`` (for users' job tasks),
``tasks.jobs.idempotency_key``, and the Celery task names ``dormant.*``. Importing this
package imports nothing else, so ``from dormant.tasks.client import Client`` stays cheap.
"""

__all__: list[str] = []
