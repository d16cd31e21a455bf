"""Every connection to the test's own database terminated (``pg_terminate_backend``,
filtered by ``datname``: nobody else's database is touched) while triggers stream in,
six times: workers', beat's and the Client's connections alike, many of them
mid-transaction. Each trigger is applied once; a send the Client saw fail is sent again
with the same message id, as a producer would.

Bounded: 12 instances x 25 messages, a kill every 2 s; ~40 s.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.faults.kit import counts, loop_instances, report_line, settle
from tests.faults.test_faults import Sender, all_still_held
from tests.integration.conftest import Stack, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.integration]

KILL = """
SELECT count(*) FILTER (WHERE state IN ('active', 'idle in transaction')) AS in_tx,
       count(*) FILTER (WHERE pg_terminate_backend(pid)) AS killed
FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()
"""


def kill_connections(database: str) -> tuple[int, int]:
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as c:
        row = c.execute(KILL, (database,)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_terminate_every_engine_connection_mid_transaction(fstack: Stack) -> None:
    s = fstack
    database = urlsplit(s.database_url).path.lstrip("/")
    assert database and database != "postgres"
    s.worker(), s.worker(), s.beat()
    name, ids = loop_instances(s, 12)
    sender = Sender(s.client, name, list(ids), 25)
    sender.thread.start()
    killed = in_tx = 0
    for _ in range(5):
        wait_for(lambda: sender.progress() > 0, 30, 0.05, "sending")
        time.sleep(2.0)
        tx, k = kill_connections(database)
        in_tx += tx
        killed += k
    sender.thread.join(150)
    tx, k = kill_connections(database)
    in_tx, killed = in_tx + tx, killed + k
    t_last = time.monotonic()
    settle(s, ids, sender.sent, "n", timeout=120)
    recovery = time.monotonic() - t_last - 3.0
    c = counts(s, ids, sender.sent, "n", "message")
    report_line(
        "pg_terminate_backend x6 under load",
        c,
        recovery,
        f" connections_killed={killed} mid_transaction={in_tx} client_retries={sender.errors}",
    )
    assert killed > 0
    all_still_held(s, ids)
