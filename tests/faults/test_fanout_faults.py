"""Fan-out under a bad holder: broadcasts reach every healthy holder once each while one
holder's checkpoint cannot be read; the bad holder's deliveries are kept for it, none
is lost. Counts are printed like tests/faults/test_faults.py (sent, applied,
duplicates, lost) and asserted. No service is restarted here: this file only breaks
one row.
"""

from __future__ import annotations

import uuid

import pytest

from tests.faults.test_faults import counts, report, settle
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import end, holds, model, script, signal_catch, start, xor
from tests.security.kit import overwrite_checkpoint

pytestmark = [pytest.mark.faults, pytest.mark.integration]

HOLDERS = 12
BROADCASTS = 5


def signal_loop(key: str, name: str) -> str:
    """Wait for signal ``name``, count it in ``n``, wait again — forever."""
    nodes = start() + signal_catch("sc", name) + script("inc", "=n + 1", "n") + xor("gw") + end()
    flows = [
        ("start", "sc"),
        ("sc", "inc"),
        ("inc", "gw"),
        ("gw", "sc", "=n < 1000000"),
        ("gw", "end", "=n >= 1000000"),
    ]
    return model(key, nodes, flows, signals=[name])


def test_a_broadcast_with_one_corrupt_holder_among_many(fstack: Stack) -> None:
    s = fstack
    s.worker_and_beat()
    k = f"ff_{uuid.uuid4().hex[:6]}"
    name = f"bcast-{k}"
    s.client.deploy(signal_loop(k, name))
    ids = {f"{k}-{i}": s.client.start(k, {"n": 0}) for i in range(HOLDERS)}
    for iid in ids.values():
        wait_for(lambda iid=iid: holds(s, iid)["subscriptions"] == 1, 30, what="holder waiting")
    # The holder routing serves first: the later, healthy ones must still be reached.
    victim_key = min(ids, key=lambda key: ids[key])
    victim = ids.pop(victim_key)
    overwrite_checkpoint(s, victim, {"schema": 1, "not": "a checkpoint"})

    sent = {key: 0 for key in ids}
    for b in range(1, BROADCASTS + 1):
        s.client.signal(name)
        for key in sent:
            sent[key] += 1
        # A signal is not buffered: the next is sent once every holder waits again.
        settle_round = {key: b for key in ids}
        wait_for(
            lambda want=settle_round: all(
                int(s.client.instance(ids[key]).variables.get("n", 0)) >= n
                and holds(s, ids[key])["subscriptions"] == 1
                for key, n in want.items()
            ),
            60,
            0.2,
            f"broadcast {b} applied by every healthy holder",
        )
    settle(s, ids, sent, "n")
    c = counts(s, ids, sent, "n", "signal")
    kept = wait_for(
        lambda: len(s.client.failed_triggers(victim)) == BROADCASTS or None,
        30,
        what="one failed trigger per broadcast for the corrupt holder",
    )
    report(
        f"broadcast x{BROADCASTS} to {HOLDERS} holders, one corrupt",
        c,
        f" kept_for_corrupt={len(s.client.failed_triggers(victim)) if kept else 0}",
    )
    assert [i.cause_class for i in s.client.incidents(victim)] == ["CorruptCheckpoint"]
