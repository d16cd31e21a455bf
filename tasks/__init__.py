"""The shell: the Celery app, trigger tasks, job dispatch, outbox relay, Client and CLI.

Users reach its public names through the one door, ``from dormant import Client, app,
idempotency_key`` (see dormant/__init__.py), and the Celery task names ``dormant.*``.
Importing this package imports nothing else, so the door's lazy ``Client`` stays cheap.
"""

__all__: list[str] = []
