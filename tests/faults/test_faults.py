"""Faults: real processes killed with SIGKILL, real services restarted, triggers in
flight — then every trigger the Client reported as sent is applied exactly once and
every wait is still held. Counts are printed (``pytest -s``) and asserted:
sent == applied, duplicates == 0, lost == 0.

How "applied" is counted, from the database only: each instance loops on a message
catch (or a timer) whose continuation increments a counter variable, and each applied
trigger leaves one ``Hydrated`` fact; the two must agree, per instance.

PostgreSQL + Redis only (the shape these faults are about). Run with
``pytest -m faults tests/faults``; each test restores the services it stopped.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from typing import Any

import pytest
from sqlalchemy import text

from tests.faults.conftest import restart_postgresql, restart_redis
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import (
    end,
    engine_of,
    holds,
    message_catch,
    model,
    script,
    start,
    timer_catch,
    woken_by,
    xor,
)

pytestmark = [pytest.mark.faults, pytest.mark.integration]


def loop_model(key: str, name: str) -> str:
    """Wait for message ``name`` (key ``=id``), count it, wait again — forever."""
    nodes = start() + message_catch("mc", name) + script("inc", "=n + 1", "n") + xor("gw") + end()
    flows = [
        ("start", "mc"),
        ("mc", "inc"),
        ("inc", "gw"),
        ("gw", "mc", "=n < 1000000"),
        ("gw", "end", "=n >= 1000000"),
    ]
    return model(key, nodes, flows, messages={name: "=id"})


def timer_model(key: str, name: str, delay: str) -> str:
    """A timer, counted, then a message wait that stays held."""
    nodes = (
        start()
        + timer_catch("tm", delay)
        + script("inc", "=fired + 1", "fired")
        + message_catch("mc", name)
        + end()
    )
    flows = [("start", "tm"), ("tm", "inc"), ("inc", "mc"), ("mc", "end")]
    return model(key, nodes, flows, messages={name: "=id"})


class Sender:
    """Sends messages from a thread; a send that raises is retried with the SAME
    message id (what a producer does), so only returned sends count as sent."""

    def __init__(self, client: Any, name: str, keys: list[str], per_key: int) -> None:
        self.client = client
        self.name = name
        self.plan = [(k, f"{k}:{i}") for i in range(per_key) for k in keys]
        self.sent: dict[str, int] = {k: 0 for k in keys}
        self.errors = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for key, message_id in self.plan:
            deadline = time.monotonic() + 90
            while True:
                try:
                    self.client.send_message(self.name, key, message_id=message_id, ttl=300)
                    break
                except Exception:
                    self.errors += 1
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            self.sent[key] += 1
            time.sleep(0.005)

    def progress(self) -> int:
        return sum(self.sent.values())


def counts(
    stack: Stack, ids: dict[str, str], sent: dict[str, int], var: str, trigger: str
) -> dict[str, int]:
    applied = dups = lost = disagree = 0
    for key, iid in ids.items():
        view = stack.client.instance(iid)
        n = int(view.variables.get(var, 0))
        if woken_by(stack, iid, trigger) != n:
            disagree += 1
        applied += n
        dups += max(0, n - sent[key])
        lost += max(0, sent[key] - n)
    return {
        "sent": sum(sent.values()),
        "applied": applied,
        "duplicates": dups,
        "lost": lost,
        "facts_disagree": disagree,
    }


def settle(
    stack: Stack, ids: dict[str, str], sent: dict[str, int], var: str, timeout: float = 100.0
) -> None:
    def done() -> bool:
        return all(
            int(stack.client.instance(iid).variables.get(var, 0)) >= sent[key]
            for key, iid in ids.items()
        )

    try:
        wait_for(done, timeout, 0.5, f"every sent trigger applied ({var})")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{behind(stack, ids, sent, var)}") from None
    time.sleep(3.0)  # a late duplicate would land now


def behind(stack: Stack, ids: dict[str, str], sent: dict[str, int], var: str) -> str:
    """What a settle that timed out leaves to read: each instance short of its sent
    count, the triggers not yet applied or kept as failed, and the processes' tails."""
    lines = []
    for key, iid in ids.items():
        try:
            n = int(stack.client.instance(iid).variables.get(var, 0))
        except Exception as exc:
            lines.append(f"{key}: {exc!r}")
            continue
        if n < sent[key]:
            lines.append(f"{key}: sent {sent[key]}, applied {n}, holds {holds(stack, iid)}")
    with engine_of(stack).connect() as conn:
        for title, query in (
            (
                "unprocessed inbox rows",
                "SELECT id, kind, created_at, republished_at, redeliveries, last_error "
                "FROM inbox WHERE processed_at IS NULL",
            ),
            ("failed triggers", "SELECT error, task, instance_id, body FROM failed_triggers"),
            ("incidents", "SELECT instance_id, node_id, state, cause_class FROM incidents"),
            (
                "messages buffered, not consumed",
                "SELECT message_id, correlation_key, received_at FROM messages "
                "WHERE consumed_at IS NULL",
            ),
            ("messages that went nowhere", "SELECT message_id, at FROM unmatched_messages"),
        ):
            rows = conn.execute(text(query)).fetchall()
            lines.append(f"{title}: {len(rows)}")
            lines.extend(f"  {tuple(r)}"[:400] for r in rows[:20])
    return "\n".join(lines) + "\n" + stack.diagnostics()


def report(what: str, c: dict[str, int], extra: str = "") -> None:
    print(
        f"\nFAULT {what}: sent={c['sent']} applied={c['applied']} "
        f"duplicates={c['duplicates']} lost={c['lost']}{extra}"
    )
    assert c["duplicates"] == 0 and c["lost"] == 0 and c["sent"] == c["applied"]
    assert c["facts_disagree"] == 0


def loop_instances(stack: Stack, n: int) -> tuple[str, dict[str, str]]:
    k = f"fl_{uuid.uuid4().hex[:6]}"
    name = f"tick-{k}"
    stack.client.deploy(loop_model(k, name))
    ids = {f"{k}-{i}": stack.client.start(k, {"id": f"{k}-{i}", "n": 0}) for i in range(n)}
    for iid in ids.values():
        wait_for(
            lambda iid=iid: holds(stack, iid)["subscriptions"] == 1, 30, what="instance waiting"
        )
    return name, ids


def all_still_held(stack: Stack, ids: dict[str, str], table: str = "subscriptions") -> None:
    for iid in ids.values():
        assert holds(stack, iid)[table] == 1, stack.diagnostics(iid)


def test_sigkill_the_worker_while_it_applies_triggers(fstack: Stack) -> None:
    s = fstack
    workers = [s.worker()]
    s.beat()
    name, ids = loop_instances(s, 12)
    sender = Sender(s.client, name, list(ids), 25)
    sender.thread.start()
    kills = 0
    for at in (60, 160):  # SIGKILL mid-stream, twice; a fresh worker each time
        wait_for(lambda at=at: sender.progress() >= at, 60, 0.05, f"{at} sent")
        workers[-1].stop(sig=signal.SIGKILL)
        kills += 1
        workers.append(s.worker())
    sender.thread.join(120)
    settle(s, ids, sender.sent, "n")
    c = counts(s, ids, sender.sent, "n", "message")
    report("worker SIGKILL x2 mid-apply", c, f" kills={kills}")
    all_still_held(s, ids)


def test_sigkill_beat_and_the_claiming_worker_while_deadlines_come_due(fstack: Stack) -> None:
    """Beat only rings (publishes ``scan_deadlines``); the claim runs on a worker. Kill
    both with SIGKILL while 40 timers come due: claims whose fires died with the worker
    expire (4 s here) and are claimed again; each timer fires exactly once."""
    s = fstack
    worker, beat = s.worker(), s.beat()
    k = f"ft_{uuid.uuid4().hex[:6]}"
    name = f"after-{k}"
    s.client.deploy(timer_model(k, name, "PT6S"))
    ids = {f"{k}-{i}": s.client.start(k, {"id": f"{k}-{i}", "fired": 0}) for i in range(40)}
    t0 = time.monotonic()
    for iid in ids.values():
        wait_for(lambda iid=iid: holds(s, iid)["deadlines"] == 1, 30, what="timer armed")
    time.sleep(max(0.0, 5.5 - (time.monotonic() - t0)))
    kills = 0
    for _ in range(3):
        beat.stop(sig=signal.SIGKILL)
        worker.stop(sig=signal.SIGKILL)
        kills += 2
        time.sleep(1.0)
        worker, beat = s.worker(), s.beat()
        time.sleep(1.5)
    expected = {key: 1 for key in ids}
    settle(s, ids, expected, "fired", timeout=90)
    c = counts(s, ids, expected, "fired", "timer")
    report("beat + worker SIGKILL x3 while claiming", c, f" kills={kills}")
    all_still_held(s, ids)  # each now waits on its message
    for iid in ids.values():
        assert holds(s, iid)["deadlines"] == 0


@pytest.mark.restarts_services
def test_postgresql_restart_while_triggers_are_in_flight(fstack: Stack) -> None:
    s = fstack
    s.worker()
    s.beat()
    name, ids = loop_instances(s, 8)
    k = f"fp_{uuid.uuid4().hex[:6]}"
    tname = f"after-{k}"
    s.client.deploy(timer_model(k, tname, "PT4S"))
    tids = {f"{k}-{i}": s.client.start(k, {"id": f"{k}-{i}", "fired": 0}) for i in range(10)}
    for iid in tids.values():
        wait_for(lambda iid=iid: holds(s, iid)["deadlines"] == 1, 30, what="timer armed")
    sender = Sender(s.client, name, list(ids), 20)
    sender.thread.start()
    wait_for(lambda: sender.progress() >= 40, 60, 0.05, "40 sent")
    down = restart_postgresql()
    sender.thread.join(150)
    settle(s, ids, sender.sent, "n", timeout=120)
    c = counts(s, ids, sender.sent, "n", "message")
    report("PostgreSQL restart", c, f" restart={down:.1f}s client_retries={sender.errors}")
    expected = {key: 1 for key in tids}
    settle(s, tids, expected, "fired", timeout=60)
    ct = counts(s, tids, expected, "fired", "timer")
    report("PostgreSQL restart (timers)", ct)
    all_still_held(s, ids)
    all_still_held(s, tids)


def revive_dead(stack: Stack) -> int:
    """Restart every worker or beat that died, as a process manager would
    (compose.yaml's ``restart: unless-stopped``, systemd, supervisord).

    Celery's Redis consumer sometimes dies at a broker restart instead of reconnecting
    (kombu: "Unrecoverable error: AttributeError ... 'hostname'"); dormant keeps nothing
    in a worker, so a restarted one carries on where the dead one stopped."""
    revived = 0
    for proc in list(stack.procs):
        if proc.popen is None or proc.popen.poll() is None:
            continue
        stack.procs.remove(proc)
        (stack.beat() if proc.name.startswith("beat") else stack.worker())
        revived += 1
    return revived


@pytest.mark.restarts_services
def test_redis_restart_while_triggers_are_in_flight(fstack: Stack) -> None:
    """Redis here keeps nothing on disk: every queued and unacknowledged task is gone.
    The Client wrote each trigger to the inbox first, and beat's sweep re-publishes
    what was never processed; claimed deadlines whose fires vanished expire and are
    claimed again."""
    s = fstack
    s.worker()
    s.beat()
    name, ids = loop_instances(s, 8)
    k = f"fr_{uuid.uuid4().hex[:6]}"
    tname = f"after-{k}"
    s.client.deploy(timer_model(k, tname, "PT5S"))
    tids = {f"{k}-{i}": s.client.start(k, {"id": f"{k}-{i}", "fired": 0}) for i in range(10)}
    for iid in tids.values():
        wait_for(lambda iid=iid: holds(s, iid)["deadlines"] == 1, 30, what="timer armed")
    sender = Sender(s.client, name, list(ids), 20)
    sender.thread.start()
    wait_for(lambda: sender.progress() >= 50, 60, 0.05, "50 sent")
    restart_redis(down_seconds=3.0, lock_url=s.broker_url)
    time.sleep(3.0)  # long enough for a consumer that will die of the restart to die
    revived = revive_dead(s)
    sender.thread.join(150)
    settle(s, ids, sender.sent, "n", timeout=120)
    c = counts(s, ids, sender.sent, "n", "message")
    report(
        "Redis restart (no persistence)",
        c,
        f" client_retries={sender.errors} processes_restarted={revived}",
    )
    expected = {key: 1 for key in tids}
    settle(s, tids, expected, "fired", timeout=60)
    report("Redis restart (timers)", counts(s, tids, expected, "fired", "timer"))
    all_still_held(s, ids)
    all_still_held(s, tids)
