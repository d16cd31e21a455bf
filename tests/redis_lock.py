"""Borrow one Redis database number on a shared server, and never touch anyone else's.

The Redis at 127.0.0.1:6379 is shared with other people's runs. A database is taken
only when it is EMPTY and its lock key is set with ``SET NX`` in the same atomic
script, so a database that holds somebody's data (locked or not) is never taken.
Every flush afterwards runs inside a script that first checks our token is still the
lock's value: a database whose lock expired and was taken by another run is left
alone. The lock is set again after a flush, so emptying our own queues never frees it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

LOCK_KEY = "dormant-test-lock"
LOCK_SECONDS = 3600

_TAKE = """
if redis.call('DBSIZE') ~= 0 then return 0 end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) and 1 or 0
"""

_FLUSH_IF_OURS = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('FLUSHDB')
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
"""

_RELEASE_IF_OURS = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('FLUSHDB')
return 1
"""


class BorrowedRedisDb:
    """One database number we hold the lock of; ``url`` is what a broker connects to."""

    def __init__(self, client: Any, url: str, token: str) -> None:
        self._client = client
        self.url = url
        self._token = token

    def flush(self) -> bool:
        """Empty the database, keeping our lock; False if the lock is no longer ours."""
        return bool(self._client.eval(_FLUSH_IF_OURS, 1, LOCK_KEY, self._token, LOCK_SECONDS))

    def release(self) -> None:
        self._client.eval(_RELEASE_IF_OURS, 1, LOCK_KEY, self._token)
        self._client.close()


@contextmanager
def borrow_redis_db(
    server_url: str, prefix: str = "test", descending: bool = False
) -> Iterator[BorrowedRedisDb]:
    """Lock an empty database 1..15 of ``server_url`` for the block; raise ``LookupError``
    when none is free (every one holds data or somebody's lock)."""
    import redis

    token = f"{prefix}-{uuid.uuid4().hex}"
    numbers = range(15, 0, -1) if descending else range(1, 16)
    for db in numbers:
        client = redis.Redis.from_url(f"{server_url}/{db}")
        if client.eval(_TAKE, 1, LOCK_KEY, token, LOCK_SECONDS):
            borrowed = BorrowedRedisDb(client, f"{server_url}/{db}", token)
            try:
                yield borrowed
            finally:
                borrowed.release()
            return
        client.close()
    raise LookupError(f"no empty, unlocked Redis database 1..15 at {server_url}")


def flush_borrowed(url: str) -> bool:
    """Flush the database at ``url`` only if a lock of ours (any token) holds it, keeping
    the lock: for tests that simulate a broker losing its memory."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        token = client.get(LOCK_KEY)
        if token is None:
            return False
        return bool(client.eval(_FLUSH_IF_OURS, 1, LOCK_KEY, token, LOCK_SECONDS))
    finally:
        client.close()
