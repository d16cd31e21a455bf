"""The shared Redis is never flushed where it holds somebody else's data (issue 8, 11)."""

from __future__ import annotations

import redis

from tests.integration.conftest import REDIS_HOST
from tests.redis_lock import LOCK_KEY, borrow_redis_db, flush_borrowed


def test_a_database_holding_data_without_a_lock_is_never_taken_or_flushed() -> None:
    with borrow_redis_db(REDIS_HOST) as first:
        client = redis.Redis.from_url(first.url)
        # Make ``first`` look like another person's database: data, and no lock of ours.
        client.delete(LOCK_KEY)
        client.set("someone-elses-key", "kept")
        try:
            with borrow_redis_db(REDIS_HOST) as second:
                assert second.url != first.url
            assert not first.flush()
            assert not flush_borrowed(first.url)
            assert client.get("someone-elses-key") == b"kept"
        finally:
            client.delete("someone-elses-key")
            client.close()


def test_a_flush_of_our_own_database_keeps_its_lock() -> None:
    with borrow_redis_db(REDIS_HOST) as borrowed:
        client = redis.Redis.from_url(borrowed.url)
        client.set("queued", "x")
        assert borrowed.flush()
        assert client.get("queued") is None
        assert client.get(LOCK_KEY) is not None
        client.close()
