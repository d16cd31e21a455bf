"""Network partition between the workers and PostgreSQL, and between the workers and
the broker, made by a TCP proxy on loopback (tests/faults/proxy.py) that only this
test's workers connect through; the Client and beat connect directly, so triggers keep
being sent (inbox rows, publishes) while the workers are cut off.

Each phase sends 40 messages during a partition held 8 s, heals it, and measures the
seconds from the heal until every trigger sent so far is applied. Modes: ``drop``
(bytes held — what TCP sees of a short partition) and ``reset`` (every connection
RST, new ones refused — a partition TCP gave up on). A worker that exits because its
broker connection was reset is started again, as a process manager would.

Bounded: 8 instances, 4 phases of ~8 s + recovery; about a minute in all.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest

from tests.faults.kit import counts, loop_instances, report_line, revive, settle, via, worker_with
from tests.faults.proxy import Proxy
from tests.faults.test_faults import Sender, all_still_held
from tests.integration.conftest import Proc, Stack, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.integration]

HOLD = 8.0


def _proxy_for(url: str) -> Proxy:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return Proxy(parts.hostname, parts.port)


def test_partition_workers_from_postgresql_and_from_the_broker(fstack: Stack) -> None:
    s = fstack
    pg, mq = _proxy_for(s.database_url), _proxy_for(s.broker_url)
    env = {
        "DORMANT_DATABASE_URL": via(s.database_url, pg.port),
        "DORMANT_BROKER_URL": via(s.broker_url, mq.port),
    }
    workers: list[Proc] = [worker_with(s, **env), worker_with(s, **env)]
    s.beat()
    name, ids = loop_instances(s, 8)
    sent = {k: 0 for k in ids}
    recoveries: dict[str, float] = {}
    restarted = 0
    try:
        for label, proxy, mode in (
            ("postgresql drop", pg, "drop"),
            ("postgresql reset", pg, "reset"),
            ("broker drop", mq, "drop"),
            ("broker reset", mq, "reset"),
        ):
            proxy.set(mode)
            t_cut = time.monotonic()
            sender = Sender(s.client, name, list(ids), 5)
            sender.plan = [(k, f"{label}:{m}") for k, m in sender.plan]
            sender.thread.start()
            sender.thread.join(60)
            for k, n in sender.sent.items():
                sent[k] += n
            time.sleep(max(0.0, HOLD - (time.monotonic() - t_cut)))
            proxy.set("pass")
            t_heal = time.monotonic()
            time.sleep(2.0)
            for i, w in enumerate(workers):
                fresh = revive(s, w)
                restarted += fresh is not w
                workers[i] = fresh
            wait_for(
                lambda: all(
                    int(s.client.instance(iid).variables.get("n", 0)) >= sent[k]
                    for k, iid in ids.items()
                ),
                120,
                0.2,
                f"every trigger applied after {label}",
            )
            recoveries[label] = time.monotonic() - t_heal
        settle(s, ids, sent, "n")
        c = counts(s, ids, sent, "n", "message")
        per = " ".join(f"{k.replace(' ', '_')}={v:.1f}s" for k, v in recoveries.items())
        report_line(
            "partition workers|PostgreSQL and workers|broker (8 s each)",
            c,
            max(recoveries.values()),
            f" {per} processes_restarted={restarted}",
        )
        all_still_held(s, ids)
        assert pg.accepted > 0 and mq.accepted > 0, "the workers bypassed the proxies"
    finally:
        pg.close()
        mq.close()
